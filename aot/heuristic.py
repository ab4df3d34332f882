"""The analytical heuristic that picks configs when no GPU of a target is present.

For a bucket we evaluate the launch grid at the bucket's upper bound (and the recipe's
``sizes`` for the other size arguments) to get P programs. The meta-parameters the grid
reads (BLOCK_M and BLOCK_N for a matmul) are the output tile each program covers; W is
their product. The estimated cost of a config is

    cost = ceil(P / SMs) × W × (1 + ALPHA × Σ 1/B_d)

- ``ceil(P / SMs) × W`` is the busiest SM's work: it charges tiles that overhang the
  problem (a 128-row tile for a 16-row bucket), wave quantization, and a grid too small to
  fill the GPU (then smaller tiles win because they spread the work).
- ``1 + ALPHA × Σ 1/B_d`` charges low reuse: a B_1 × B_2 tile reads operands in proportion
  to B_1 + B_2 while computing B_1 × B_2, so larger, squarer tiles cost less per element.

Ties are broken, in order, by how far the tile's elements per thread (W / threads) are
from 32, a register budget an accumulator tile fits comfortably (only when the grid reads
a tile); by the recipe's ``default`` values (the usual case for kernels whose grid reads
no meta-parameter, like a row-wise norm); then by the smallest config. The
result is recorded as ``untuned (heuristic)``; the tuner replaces it with measurements.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

from loader.expr import Expr

from .kernel_env import env_at
from .plan import Config, Instance

ALPHA = 32.0
ELEMENTS_PER_THREAD = 32


def _tile(config: Config, grid: tuple[Expr, Expr, Expr]) -> list[int]:
    meta = dict(config.meta)
    names = sorted(set().union(*(g.names for g in grid)) & meta.keys())
    return [int(meta[n]) for n in names if isinstance(meta[n], int)]  # type: ignore[arg-type]


def cost(config: Config, grid: tuple[Expr, Expr, Expr], env: Mapping[str, Any], sms: int) -> float:
    """The estimated cost of ``config`` with every value of the bucket in ``env``."""
    programs = 1
    for g in grid:
        programs *= max(int(g.evaluate(env)), 0)
    dims = _tile(config, grid)
    work = math.prod(dims) if dims else 1
    reuse = 1.0 + ALPHA * sum(1.0 / d for d in dims if d > 0)
    return math.ceil(programs / sms) * work * reuse


def rank(inst: Instance, bucket: tuple[int, ...]) -> list[Config]:
    """The configs the bucket may choose from, best first."""
    kr = inst.kernel
    point = dict(zip(kr.buckets, bucket, strict=True))
    sms = inst.target.sms

    def key(c: Config) -> tuple[float, float, int, Config]:
        values = c.values()
        dims = _tile(c, kr.grid)
        per_thread = math.prod(dims) / (c.num_warps * 32)
        occupancy = abs(math.log2(per_thread / ELEMENTS_PER_THREAD)) if dims else 0.0
        off_default = sum(1 for k, v in kr.default.items() if values.get(k) != v)
        env = env_at(kr, point, c, {"NUM_SMS": sms})
        return (round(cost(c, kr.grid, env, sms), 6), occupancy, off_default, c)

    return sorted(inst.candidates(bucket), key=key)
