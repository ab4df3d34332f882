"""The command line: exit codes, messages, default output path, nothing half-written."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from aot.cli import main

ROOT = Path(__file__).resolve().parents[1]


def run(args: list[str], cwd: Path, cache: Path) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "AOTC_CACHE_DIR": str(cache), "AOTC_NO_PROGRESS": "1"}
    return subprocess.run(
        [sys.executable, "-m", "aot.cli", *args], cwd=cwd, env=env, capture_output=True, text=True
    )


def test_build_inspect_verify(recipe_dir: Path, tmp_path: Path, compile_cache: Path) -> None:
    r = run(["build", str(recipe_dir / "small.toml")], tmp_path, compile_cache)
    assert r.returncode == 0, r.stderr
    bundle = tmp_path / "artifacts" / "small-1.0.aotc"
    assert bundle.exists() and (tmp_path / "artifacts" / "small-1.0.report.md").exists()
    assert "wrote" in r.stdout and "report:" in r.stdout
    r = run(["inspect", str(bundle)], tmp_path, compile_cache)
    assert r.returncode == 0 and "kernel scale(" in r.stdout
    r = run(["verify", str(bundle)], tmp_path, compile_cache)
    assert r.returncode == 0 and r.stdout.startswith("OK")
    data = bytearray(bundle.read_bytes())
    data[-1] ^= 0xFF
    bundle.write_bytes(bytes(data))
    r = run(["verify", str(bundle)], tmp_path, compile_cache)
    assert r.returncode == 3 and "fails its checksum" in r.stderr and "Traceback" not in r.stderr


def test_plan_prints_matrix(recipe_dir: Path, tmp_path: Path) -> None:
    r = run(["plan", str(recipe_dir / "small.toml")], tmp_path, tmp_path / "c")
    assert r.returncode == 0, r.stderr
    assert "matrix: 16 variants in all" in r.stdout
    assert not (tmp_path / "c").exists()  # planning compiles nothing


def test_plan_lists_a_models_compilations(tmp_path: Path) -> None:
    r = run(["plan", str(ROOT / "recipes" / "layer.toml")], tmp_path, tmp_path / "c")
    assert r.returncode == 0, r.stderr
    assert "model layer (models/layer.py:make_layer, fp16, backend aoti" in r.stdout
    assert "buckets (12): batch ≤ [1, 4, 16, 32], seq ≤ [128, 512, 2048]; padded: batch, seq" in (
        r.stdout
    )
    assert "compilations: 24 = 12 buckets × 2 modes" in r.stdout and "(sm_90)" in r.stdout
    assert "matrix:" not in r.stdout  # no kernels, no kernel matrix
    assert not (tmp_path / "c").exists()


def test_bad_recipe_exit_2_and_nothing_written(recipe_dir: Path, tmp_path: Path) -> None:
    recipe = recipe_dir / "small.toml"
    recipe.write_text(recipe.read_text().replace('"H100"', '"H1OO"'))
    r = run(
        ["build", str(recipe), "-o", str(tmp_path / "out" / "x.aotc")], tmp_path, tmp_path / "c"
    )
    assert r.returncode == 2
    assert "small.toml: [bundle].targets[1]: unknown GPU 'H1OO'" in r.stderr
    assert "Traceback" not in r.stderr
    assert not (tmp_path / "out").exists()


def test_explicit_output_path(
    recipe_dir: Path, tmp_path: Path, compile_cache: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("AOTC_CACHE_DIR", str(compile_cache))
    out = tmp_path / "deep" / "dir" / "mine.aotc"
    assert main(["build", str(recipe_dir / "small.toml"), "-o", str(out), "--no-progress"]) == 0
    assert out.exists() and out.with_suffix(".report.md").exists()
    leftovers = [p for p in out.parent.iterdir() if p.name.startswith(".")]
    assert leftovers == []


def test_missing_bundle(tmp_path: Path) -> None:
    r = run(["inspect", str(tmp_path / "nope.aotc")], tmp_path, tmp_path)
    assert r.returncode == 3 and "no such bundle file" in r.stderr


def test_usage_error(tmp_path: Path) -> None:
    r = run(["frobnicate"], tmp_path, tmp_path)
    assert r.returncode == 2 and "invalid choice" in r.stderr


@pytest.mark.parametrize("value", ["x", "1.5"])
def test_bad_env_var(tmp_path: Path, value: str) -> None:
    env = {**os.environ, "AOTC_JOBS": value}
    r = subprocess.run(
        [sys.executable, "-m", "aot.cli", "plan", "x.toml"],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
    )
    assert r.returncode == 2 and "AOTC_JOBS" in r.stderr
