"""benchmarks/costmodel_heldout.py scores what a CPU-only build ships for a bucket (and
checks whether the bucket's database timed it): that must be the build's own pick (its two
passes over every bucket's shortlist), not the model's pick with every candidate compiled.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from aot.build import build
from aot.costmodel.data import Resolved
from aot.plan import make_plan
from aot.recipe import load
from loader.format import BundleFile
from loader.manifest import Manifest
from tests.conftest import env_for
from tests.modules import load_module

ROOT = Path(__file__).resolve().parents[1]

KERNEL = """
import triton
import triton.language as tl


@triton.jit
def scale_rows(x_ptr, y_ptr, n_rows, BLOCK_R: tl.constexpr, WIDTH: tl.constexpr):
    rows = tl.program_id(0) * BLOCK_R + tl.arange(0, BLOCK_R)
    cols = tl.arange(0, WIDTH)
    offs = rows[:, None] * WIDTH + cols[None, :]
    ok = (rows < n_rows)[:, None]
    tl.store(y_ptr + offs, tl.load(x_ptr + offs, mask=ok) * 2.0, mask=ok)
"""

RECIPE = """format = 1
[bundle]
name = "heldout-pick"
version = "1"
targets = ["H100"]
[[kernel]]
name = "scale_rows"
source = "k.py:scale_rows"
grid = "cdiv(n_rows, BLOCK_R)"
signature = { x_ptr = "*fp32", y_ptr = "*fp32", n_rows = "i32" }
buckets = { n_rows = [1, 64, 4096, 65536] }
fixed = { WIDTH = 128 }
[kernel.space]
BLOCK_R = [1, 2, 4, 8, 16, 32]
num_warps = [1, 2, 4, 8]
num_stages = [1]
"""


def test_the_pick_checked_for_having_been_timed_is_the_one_the_build_ships(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    pytest.importorskip("lightgbm", reason="the cost model needs lightgbm")
    from aot.costmodel import predict

    # one candidate a bucket compiled in the first pass: the build's picks then differ from
    # the model's with every candidate compiled at every bucket of this recipe
    monkeypatch.setattr(predict, "PREFILTER", 1)
    (tmp_path / "k.py").write_text(KERNEL)
    (tmp_path / "r.toml").write_text(RECIPE)
    env = env_for(tmp_path / "cache", predict="cost-model")
    result = build(tmp_path / "r.toml", tmp_path / "r.aotc", env, tmp_path)
    with BundleFile(result.bundle) as bf:
        shipped = {c.bucket: c.config for c in Manifest.from_json(bf.manifest).kernels[0]
                   .instances[0].choices}  # fmt: skip
    heldout = load_module(ROOT / "benchmarks" / "costmodel_heldout.py", "bench_costmodel_heldout")
    plan = make_plan(load(tmp_path / "r.toml"))
    (inst,) = plan.instances
    for bucket in inst.buckets:
        configs = {c.id: c for c in inst.candidates(bucket)}
        r = Resolved(plan, inst, bucket, inst.target, configs)
        assert heldout.shipped_pick(r, env) == shipped[bucket], bucket
