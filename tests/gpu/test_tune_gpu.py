"""Tuning on a real GPU: planted faults are rejected while the build finishes."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from aot.build import TuneOptions, build
from aot.env import Environment
from aot.tune.db import TuningDB
from loader.format import BundleFile
from loader.manifest import Manifest

pytestmark = pytest.mark.gpu
DATA = Path(__file__).parent / "data"


def test_fault_hang_and_wrong_result_are_rejected(tmp_path: Path) -> None:
    env = Environment(cache_dir=tmp_path / "cache", jobs=os.cpu_count() or 1, progress=False)
    r = build(DATA / "faulty.toml", tmp_path / "f.aotc", env, tmp_path,
              TuneOptions(timeout=20.0))  # fmt: skip
    assert r.tuning is not None and r.tuning.restarts >= 2  # the fault and the hang
    with BundleFile(r.bundle) as bf:
        m = Manifest.from_json(bf.manifest)
    (inst,) = m.kernels[0].instances
    (choice,) = inst.choices
    assert inst.variants[choice.variants[0]].meta["MODE"] == 0
    assert choice.how.startswith("measured on NVIDIA")
    reasons = {rec.values["MODE"]: rec.reason for rec in TuningDB(r.db) if not rec.ok}
    assert "illegal" in reasons[1].lower(), reasons
    assert "wrong result" in reasons[2], reasons
    assert "hang" in reasons[3], reasons


def test_tune_example_recipe_end_to_end(tmp_path: Path) -> None:
    """The example recipe's real kernels, tuned on this GPU (two buckets and a small
    budget, to keep the test short; benchmarks/run_tuning_on_gpu.sh tunes all of it),
    then loaded and called: the bundle's choices are measured and verified, and correct."""
    import shutil

    import torch

    import loader

    root = Path(__file__).resolve().parents[2] / "recipes"
    shutil.copytree(root / "kernels", tmp_path / "kernels")
    text = (root / "example.toml").read_text()
    text = text.replace("M = [1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024, 2048, 4096, 8192]",
                        "M = [16, 4096]")  # fmt: skip
    text = text.replace("budget = 60", "budget = 10").replace(
        'T = ["fp16", "bf16"]', 'T = ["bf16"]'
    )
    (tmp_path / "example.toml").write_text(text)
    env = Environment(cache_dir=tmp_path / "cache", jobs=os.cpu_count() or 1, progress=False)
    r = build(tmp_path / "example.toml", tmp_path / "e.aotc", env, tmp_path, TuneOptions())
    assert r.decided["measured"] == 4 and r.decided["heuristic"] == 4  # sm_90 here, sm_80 not
    with BundleFile(r.bundle) as bf:
        m = Manifest.from_json(bf.manifest)
    for k in m.kernels:
        inst = next(i for i in k.instances if i.target == "sm_90")
        for choice in inst.choices:
            assert choice.how.startswith("measured on NVIDIA"), choice.how
            assert choice.metrics["error"] <= choice.metrics["tolerance"]
            assert choice.metrics["rounds"] == 5 and choice.metrics["benchmarks"] <= 12
    b = loader.open(r.bundle)
    a = torch.randn(100, 4096, device="cuda", dtype=torch.bfloat16)
    w = torch.randn(4096, 4096, device="cuda", dtype=torch.bfloat16) / 64
    c = torch.full((100, 4096), float("nan"), device="cuda", dtype=torch.bfloat16)
    b["matmul"](a, w, c, 100, 4096, 4096, 4096, 1, 4096, 1, 4096, 1)
    torch.cuda.synchronize()
    ref = a.double() @ w.double()
    assert float(torch.linalg.norm(c.double() - ref) / torch.linalg.norm(ref)) < 1e-2
    assert r.report.exists() and "measured on NVIDIA" in r.report.read_text()
