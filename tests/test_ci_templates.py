"""The CI templates in ci/: every aotc command in them parses, and the GitHub workflow's
commands, run in job order (compile shards, the GPU job's build, merge, verify, push),
produce the full build's bytes and push them to a registry."""

from __future__ import annotations

import glob
import re
import shlex
from pathlib import Path

import pytest
from click.testing import CliRunner

from aot.build import build
from aot.cli import main
from aot.cli.commands import cli
from tests import ociserve
from tests.conftest import env_for

ROOT = Path(__file__).resolve().parents[1]
TEMPLATES = sorted((ROOT / "ci").glob("*.yml"))


def aotc_commands(path: Path) -> list[str]:
    """The template's aotc command lines, in file order, without the YAML around them."""
    out = []
    for line in path.read_text().splitlines():
        text = re.sub(r"^\s*-?\s*(run:)?\s*", "", line)
        text = text.removeprefix(".venv/bin/")
        if text.startswith("aotc ") and not line.lstrip().startswith("#"):
            out.append(text.split(" #")[0])
    return out


def expand(command: str, values: dict[str, str]) -> list[str]:
    def value(m: re.Match[str]) -> str:
        name = m.group(1) or m.group(2) or m.group(3)
        return values.get(name, "X")

    text = re.sub(r"\$\{\{\s*matrix\.(\w+)\s*\}\}|\$\{(\w+)\}|\$(\w+)", value, command)
    words = shlex.split(text)[1:]
    expanded: list[str] = []
    for w in words:
        expanded += (sorted(glob.glob(w)) or [w]) if "*" in w else [w]
    return expanded


@pytest.mark.parametrize("template", TEMPLATES, ids=[t.name for t in TEMPLATES])
def test_every_aotc_command_parses(template: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    for verb in cli.commands.values():  # parse and convert every option, run nothing
        monkeypatch.setattr(verb, "callback", lambda **_: None)
    commands = aotc_commands(template)
    assert {c.split()[1] for c in commands} >= {"build", "merge", "verify", "push"}
    for command in commands:
        words = expand(command, {"repo": "ghcr.io/o/r/bundles", "CI_REGISTRY_IMAGE": "r.io/g/p"})
        words = ["1/3" if w == "X/X" else w for w in words]
        r = CliRunner().invoke(cli, words)
        assert r.exit_code == 0, f"{command}: {r.output}"


def test_github_workflow_end_to_end(
    tmp_path: Path,
    recipe_dir: Path,
    compile_cache: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    ociserve.require_binary()
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("AOTC_CACHE_DIR", str(compile_cache))
    monkeypatch.setenv("HOME", str(tmp_path))
    recipe = recipe_dir / "small.toml"  # targets sm_80 and H100 (sm_90)
    full = build(recipe, tmp_path / "full.aotc", env_for(compile_cache), tmp_path)
    commands = aotc_commands(ROOT / "ci" / "github-actions.yml")
    with ociserve.registry(tmp_path / "reg") as reg:
        values = {
            "RECIPE": str(recipe),
            "CPU_TARGETS": "sm_80",
            "SHARDS": "3",
            "BUNDLE": "small-1.0.aotc",
            "target": "sm_90",
            "repo": f"{reg.address}/o/r/bundles",
            "GITHUB_SHA": "abc123",
        }
        for command in commands:
            if " --shard " in command:
                for shard in ("1", "2", "3"):
                    assert main(expand(command, {**values, "shard": shard})) == 0, command
            else:
                assert main(expand(command, values)) == 0, command
        assert (tmp_path / "artifacts" / "small-1.0.aotc").read_bytes() == full.bundle.read_bytes()
        out = tmp_path / "pulled.aotc"
        assert main(["pull", f"oci://{reg.address}/o/r/bundles:abc123", "-o", str(out)]) == 0
        assert out.read_bytes() == full.bundle.read_bytes()
