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
