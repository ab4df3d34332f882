"""Features of one (kernel, config, bucket, target), from what a build knows without a GPU.

Every feature is a number normalised to transfer across kernels: logs of sizes, ratios to
the target's limits, and ratios to the best value among the bucket's candidates (the
``*_rel`` features: a ranking model compares configs within a bucket, and "the largest
tile of this bucket" means the same thing for a norm and for a matmul, where "a 128×256
tile" does not). NaN where a value is unknown (a recipe without ``tune.flops``): the
boosted trees route it on their own. The table ``FEATURES`` documents each; its order
is the model's column order, and a model trained on other columns is refused with a
message to train it again (``model.loads``). ``SIZES`` are worked out too, and left out.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from loader.expr import Expr

from ..heuristic import cost as heuristic_cost
from ..kernel_env import TARGET_SMS, EnvError, env_at
from ..plan import Config, Instance
from ..targets import GPU

NAN = float("nan")

FEATURES: tuple[tuple[str, str], ...] = (
    ("log2_warps", "log2 of the warps a block launches (num_warps, or more if specialised)"),
    ("stages", "num_stages"),
    ("log2_tile", "log2 of the output tile: the product of the meta-parameters the grid reads"),
    ("log2_block", "log2 of the product of every integer meta-parameter named *BLOCK*"),
    ("tile_aspect", "log2 of the largest over the smallest tile side (0 for one side)"),
    ("log2_tile_per_thread", "log2 of tile elements per thread"),
    ("log2_block_per_thread", "log2 of block elements per thread"),
    ("regs_frac", "registers per thread over the target's 255"),
    ("log2_local", "log2(1 + local memory bytes per thread): spills, in Triton's kernels"),
    ("spills", "1 when the cubin has a local stack frame (spilled registers), else 0"),
    ("shared_frac", "shared memory per block over the target's shared memory per SM"),
    ("blocks_per_sm", "resident blocks per SM, limited by registers, shared memory, threads"),
    ("occupancy", "resident warps per SM over the target's maximum"),
    ("sm_fill", "programs over SMs, at most 1: how much of the GPU one wave uses"),
    ("log2_waves", "log2 of programs (persistent: tiles) over SMs × resident blocks per SM"),
    ("tail_waste", "the idle share of the last wave: 1 − waves / ceil(waves)"),
    ("log2_intensity_vs_ridge", "log2 of flops/bytes over the target's peak flops/bandwidth"),
    ("log2_sms", "log2 of the target's SMs"),
    ("log2_peak_tflops", "log2 of the target's peak fp16 TFLOP/s"),
    ("log2_peak_gbps", "log2 of the target's peak memory bandwidth"),
    ("coverage_rel", "log2 of programs (tiles) × tile over the bucket's smallest: overhang"),
    ("heuristic_rel", "log2 of the analytical heuristic's cost over the bucket's best"),
    ("tile_rel", "log2_tile minus the bucket's largest"),
    ("block_rel", "log2_block minus the bucket's largest"),
    ("warps_rel", "log2_warps minus the bucket's largest"),
    ("stages_rel", "num_stages minus the bucket's largest"),
    ("occupancy_rel", "occupancy over the bucket's largest"),
    ("waves_rel", "log2_waves minus the bucket's smallest"),
    ("regs_rel", "regs_frac minus the bucket's smallest"),
    ("log2_active_warps", "log2 of the warps the first wave keeps per SM: achieved occupancy"),
    ("log2_in_flight", "log2 of the block elements the first wave keeps per SM (Little's law)"),
    ("traffic_rel", "log2 of tiles × the tile's side sum over the bucket's least: input panels"),
    ("active_warps_rel", "log2_active_warps minus the bucket's largest"),
    ("in_flight_rel", "log2_in_flight minus the bucket's largest"),
    ("block_overhang", "log2 of blocks the grid does not read past the size it leaves them (≥ 0)"),
)
NAMES = tuple(n for n, _ in FEATURES)

# What ``raw`` works out but the model does not read: the problem's and a program's
# absolute sizes. They tell one kernel's buckets from another's rather than how configs
# rank, and a model without them ranks the configs of kernels it never saw better:
# leave-one-kernel-out and the held-out libraries (benchmarks/RESULTS.md, issue 19;
# ``benchmarks/costmodel_features_probe.py sizes`` measures them back).
SIZES: tuple[tuple[str, str], ...] = (
    ("log2_programs", "log2 of the grid's programs at the bucket's upper bound"),
    ("log2_flops", "log2 of the recipe's tune.flops at the bucket (NaN if not given)"),
    ("log2_bytes", "log2 of the recipe's tune.bytes at the bucket (NaN if not given)"),
    ("log2_flops_per_program", "log2 of tune.flops per program (per tile, persistent)"),
    ("log2_bytes_per_program", "log2 of tune.bytes per program (per tile, persistent)"),
)


@dataclass(frozen=True)
class Facts:
    """What the compiled cubin says of a variant."""

    regs: int  # per thread
    shared: int  # bytes per block
    local: int  # bytes of local memory per thread (the stack frame)
    warps: int = 0  # the warps a block launches; 0: the config's (warp specialisation adds)

    @property
    def spills(self) -> bool:
        return self.local > 0


def _log2(x: float) -> float:
    return math.log2(x) if x > 0 else NAN


def _tile(config: Config, grid: tuple[Expr, Expr, Expr]) -> list[int]:
    meta = dict(config.meta)
    names = sorted(set().union(*(g.names for g in grid)) & meta.keys())
    return [int(v) for n in names if isinstance(v := meta[n], int) and not isinstance(v, bool)]


def _block(config: Config, tile: Sequence[int]) -> int:
    dims = [
        int(v)
        for k, v in config.meta
        if "BLOCK" in k.upper() and isinstance(v, int) and not isinstance(v, bool) and v > 0
    ]
    return math.prod(dims) if dims else max(1, math.prod(tile))


def blocks_per_sm(gpu: GPU, threads: int, facts: Facts) -> int:
    """Resident blocks per SM: registers are allocated per warp in units of 256, shared
    memory per block (with 1 KiB reserved by the driver on sm_80+)."""
    warps = max(1, threads // 32)
    regs_per_warp = math.ceil(max(facts.regs, 1) * 32 / 256) * 256
    by_regs = gpu.regs_per_sm // (regs_per_warp * warps)
    by_smem = gpu.smem_per_sm // (facts.shared + 1024) if facts.shared else gpu.max_blocks_per_sm
    by_threads = gpu.max_threads_per_sm // threads
    return max(0, min(by_regs, by_smem, by_threads, gpu.max_blocks_per_sm))


# A persistent grid, ``min(NUM_SMS, tiles)``, launches as many programs whatever the tile;
# each loops over tiles. Its waves and work per program are counted in tiles: the grid
# with an unbounded SM count, where that bounds it (a grid that grows with NUM_SMS itself
# counts its programs).
_UNBOUNDED_SMS = 1 << 24


def work_units(grid: Sequence[Expr], env: Mapping[str, Any], programs: int) -> int:
    """The grid's units of work: its programs, or for a persistent grid the tiles they
    loop over."""
    if not any(TARGET_SMS in g.names for g in grid):
        return programs
    units = math.prod(max(int(g.evaluate({**env, TARGET_SMS: _UNBOUNDED_SMS})), 0) for g in grid)
    return units if programs <= units < _UNBOUNDED_SMS else programs


def in_flight(
    gpu: GPU, programs: int, resident: int, warps: int, block: int
) -> tuple[float, float]:
    """log2 of the warps and of the block elements one wave keeps resident per SM, averaged
    over the SMs: a grid smaller than the GPU leaves SMs idle, and a memory-bound loop
    needs many bytes in flight, whatever the occupancy a full grid would reach."""
    per_sm = min(programs / gpu.sms, float(resident))
    return _log2(per_sm * warps), _log2(per_sm * block)


def block_overhang(grid: Sequence[Expr], sizes: Mapping[str, int], config: Config) -> float:
    """How far the config's blocks overhang the sizes the grid leaves to them: the
    power-of-two integer meta-parameters the grid does not read (a row's block, a K loop's
    step) against the next power of two of the largest size the grid does not read (the
    row, K). log2 of each one's excess, summed; 0 where none exceeds (a loop covers any
    size), and 0 where the grid reads every size. A block twice the row loads and reduces
    half padding, and the programs' count does not show it."""
    read = set().union(*(g.names for g in grid))
    free = [v for n, v in sizes.items() if n not in read and v > 0]
    if not free:
        return 0.0
    top = 1 << (max(free) - 1).bit_length()
    blocks = [v for k, v in config.meta if k not in read and isinstance(v, int)
              and not isinstance(v, bool) and v > 1 and v & (v - 1) == 0]  # fmt: skip
    return float(sum(max(0.0, math.log2(b / top)) for b in blocks))


def _problem(inst: Instance, env: Mapping[str, Any]) -> tuple[float, float]:
    t = inst.kernel.tune
    flops = float(t.flops.evaluate(env)) if t.flops is not None else NAN
    nbytes = float(t.bytes.evaluate(env)) if t.bytes is not None else NAN
    return flops, nbytes


# The features read off the cubin: NaN in a row whose variant is not compiled yet (the
# cost model's compile-free first pass, predict.py). LightGBM reads a NaN as 0 where
# training saw none; in leave-one-kernel-out this kept the configs that measured fast
# among the first few more often than a guess of the facts did (64 registers a thread
# and no shared memory, or registers from the elements per thread).
FROM_CUBIN = ("regs_frac", "log2_local", "spills", "shared_frac", "blocks_per_sm", "occupancy",
              "log2_waves", "tail_waste", "log2_active_warps", "log2_in_flight")  # fmt: skip


def raw(
    inst: Instance, config: Config, bucket: tuple[int, ...], gpu: GPU, facts: Facts | None
) -> dict[str, float]:
    """The features that need nothing but this config (the ``*_rel`` ones come from
    ``relative`` over the bucket's candidates); with ``facts`` None (not compiled), those
    ``FROM_CUBIN`` are NaN."""
    if facts is None:
        row = _raw(inst, config, bucket, gpu, Facts(regs=0, shared=0, local=0))
        return {**row, **dict.fromkeys(FROM_CUBIN, NAN)}
    return _raw(inst, config, bucket, gpu, facts)


def _raw(
    inst: Instance, config: Config, bucket: tuple[int, ...], gpu: GPU, facts: Facts
) -> dict[str, float]:
    kr = inst.kernel
    point = dict(zip(kr.buckets, bucket, strict=True))
    try:
        env = env_at(kr, point, config, {**gpu.properties()}, dict(inst.dtypes))
        programs = math.prod(max(int(g.evaluate(env)), 0) for g in kr.grid)
        units = work_units(kr.grid, env, programs)
        heur = heuristic_cost(config, kr.grid, env, gpu.sms)
        flops, nbytes = _problem(inst, env)
        sizes = {n: v for n in (*kr.sizes, *kr.size_exprs, *point)
                 if isinstance(v := env.get(n), int)}  # fmt: skip
        overhang = block_overhang(kr.grid, sizes, config)
    except (EnvError, ArithmeticError, ValueError, TypeError):
        programs, units, heur, flops, nbytes, overhang = 0, 0, NAN, NAN, NAN, NAN
    tile = _tile(config, kr.grid)
    work = math.prod(tile) if tile else 1
    warps = facts.warps or config.num_warps
    threads = warps * 32
    resident = blocks_per_sm(gpu, threads, facts)
    waves = units / (gpu.sms * resident) if resident and units else NAN
    ridge = gpu.tflops_16 * 1e12 / (gpu.gbps * 1e9)
    warps_sm, elems_sm = in_flight(gpu, programs, resident, warps, _block(config, tile))
    return {
        "log2_warps": math.log2(warps),
        "stages": float(config.num_stages),
        "log2_tile": math.log2(work),
        "log2_block": math.log2(_block(config, tile)),
        "tile_aspect": math.log2(max(tile) / min(tile)) if len(tile) > 1 and min(tile) else 0.0,
        "log2_tile_per_thread": math.log2(work / threads) if tile else NAN,
        "log2_block_per_thread": math.log2(_block(config, tile) / threads),
        "regs_frac": facts.regs / gpu.max_regs_per_thread,
        "log2_local": math.log2(1 + facts.local),
        "spills": float(facts.spills),
        "shared_frac": facts.shared / gpu.smem_per_sm,
        "blocks_per_sm": float(resident),
        "occupancy": resident * warps / (gpu.max_threads_per_sm / 32),
        "log2_programs": _log2(programs),
        "sm_fill": min(1.0, programs / gpu.sms),
        "log2_waves": _log2(waves),
        "tail_waste": 1 - waves / math.ceil(waves) if waves == waves and waves > 0 else NAN,
        "log2_flops": _log2(flops),
        "log2_bytes": _log2(nbytes),
        "log2_intensity_vs_ridge": _log2(flops / nbytes / ridge) if nbytes > 0 else NAN,
        "log2_flops_per_program": _log2(flops / units) if units else NAN,
        "log2_bytes_per_program": _log2(nbytes / units) if units else NAN,
        "log2_sms": math.log2(gpu.sms),
        "log2_peak_tflops": math.log2(gpu.tflops_16),
        "log2_peak_gbps": math.log2(gpu.gbps),
        "log2_active_warps": warps_sm,
        "log2_in_flight": elems_sm,
        "block_overhang": overhang,
        "_coverage": float(units * work),  # for relative(); not a model column
        "_traffic": float(units * (sum(tile) if tile else 1)),
        "_heuristic": heur,
    }


def _finite(xs: Sequence[float]) -> list[float]:
    return [x for x in xs if x == x and not math.isinf(x)]


def _log2_over(x: float, base: float) -> float:
    """log2 of ``x`` over the bucket's ``base``; NaN where there is no positive base."""
    return _log2(x / base) if base and base == base else NAN


def relative(
    rows: Sequence[Mapping[str, float]], names: Sequence[str] = NAMES
) -> list[list[float]]:
    """The bucket's candidates as model rows (the columns ``names``: the model's, or for an
    experiment those and ``SIZES``): each raw row plus the features relative to the best
    of the bucket."""

    def best(key: str, pick: Any) -> float:
        vals = _finite([r[key] for r in rows])
        return float(pick(vals)) if vals else NAN

    def least(key: str) -> float:
        return best(key, lambda v: min(x for x in v if x > 0) if any(x > 0 for x in v) else 0)

    cov, traffic = least("_coverage"), least("_traffic")
    top = {k: best(k, max) for k in ("log2_tile", "log2_block", "log2_warps", "stages",
                                     "occupancy", "log2_active_warps",
                                     "log2_in_flight")}  # fmt: skip
    low = {k: best(k, min) for k in ("log2_waves", "regs_frac", "_heuristic")}
    out = []
    for r in rows:
        rel = {
            "coverage_rel": _log2_over(r["_coverage"], cov),
            "heuristic_rel": _log2_over(r["_heuristic"], low["_heuristic"]),
            "tile_rel": r["log2_tile"] - top["log2_tile"],
            "block_rel": r["log2_block"] - top["log2_block"],
            "warps_rel": r["log2_warps"] - top["log2_warps"],
            "stages_rel": r["stages"] - top["stages"],
            "occupancy_rel": r["occupancy"] / top["occupancy"] if top["occupancy"] else NAN,
            "waves_rel": r["log2_waves"] - low["log2_waves"],
            "regs_rel": r["regs_frac"] - low["regs_frac"],
            "traffic_rel": _log2_over(r["_traffic"], traffic),
            "active_warps_rel": r["log2_active_warps"] - top["log2_active_warps"],
            "in_flight_rel": r["log2_in_flight"] - top["log2_in_flight"],
        }  # fmt: skip
        full = {**r, **rel}
        out.append([float(full[n]) for n in names])
    return out
