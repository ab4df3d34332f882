"""The repository's own promises: the README's commands, lint and types."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def readme_commands() -> list[str]:
    lines = (ROOT / "README.md").read_text().splitlines()
    assert lines[0] == "```sh", "the README must open with its two commands"
    end = lines.index("```", 1)
    return lines[1:end]


def test_readme_opens_with_exactly_two_commands_and_ci_runs_the_second() -> None:
    commands = readme_commands()
    assert len(commands) == 2
    assert "aotc build recipes/example.toml" in commands[0]
    ci = (ROOT / ".ci" / "run").read_text().splitlines()
    assert commands[1] in ci


RUFF = shutil.which("ruff", path=str(Path(sys.executable).parent)) or shutil.which("ruff")


@pytest.mark.skipif(RUFF is None, reason="ruff not installed")
def test_ruff_clean() -> None:
    assert RUFF is not None
    ruff = RUFF
    r = subprocess.run([ruff, "check", "."], cwd=ROOT, capture_output=True, text=True)
    assert r.returncode == 0, r.stdout + r.stderr


def test_mypy_clean() -> None:
    pytest.importorskip("mypy")
    r = subprocess.run([sys.executable, "-m", "mypy"], cwd=ROOT, capture_output=True, text=True)
    assert r.returncode == 0, r.stdout + r.stderr


def test_recipe_docs_example_matches_example_recipe() -> None:
    import tomllib

    text = (ROOT / "recipes" / "README.md").read_text()
    block = text.split("```toml\n", 1)[1].split("```", 1)[0]
    documented = tomllib.loads(block)
    actual = tomllib.loads((ROOT / "recipes" / "example.toml").read_text())
    assert documented["bundle"] == actual["bundle"]
    assert documented["kernel"][0] == actual["kernel"][0]


def test_recipe_docs_pipeline_matches_mlp_recipe() -> None:
    import tomllib

    blocks = (ROOT / "recipes" / "README.md").read_text().split("```toml\n")[1:]
    blocks = [b.split("```", 1)[0] for b in blocks]
    documented = tomllib.loads(next(b for b in blocks if b.startswith("[[pipeline]]")))
    access = tomllib.loads(next(b for b in blocks if b.startswith("shapes =")))
    actual = tomllib.loads((ROOT / "recipes" / "mlp.toml").read_text())
    doc, real = documented["pipeline"][0], actual["pipeline"][0]
    assert {k: v for k, v in doc.items() if k != "step"} == {
        k: v for k, v in real.items() if k != "step"
    }
    assert doc["step"] == real["step"][: len(doc["step"])]
    gate_up = next(k for k in actual["kernel"] if k["name"] == "gate_up")
    assert access == {k: gate_up[k] for k in ("shapes", "strides", "writes")}
