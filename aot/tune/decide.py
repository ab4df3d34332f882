"""From measurements to choices: a pure function of the tuning database.

The tuner only fills the database; what a build ships is decided here from its records,
so a build on a CPU machine with a database merged from GPU runners makes the same
choices as the GPU runners would. For each (kernel, target, dtypes, bucket):

- measured: the finalist with the lowest median over its interleaved re-measurement
  rounds, among those that passed verification (or all of them if the kernel has no
  reference, marked unverified), measured on a GPU of the target's kind;
- transferred: a target with no measurements takes the winner of the closest measured
  target of the same arch family (same compute capability major; nearest minor, then
  nearest SM count), if that config fits it;
- otherwise the fallback: the heuristic, or for a kernel whose recipe asks for it the
  learned cost model's prediction (aot/costmodel/predict.py).
"""

from __future__ import annotations

import statistics
from collections import defaultdict
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from loader.expr import ExprError

from ..heuristic import rank
from ..kernel_env import EnvError, env_at
from ..plan import Config, Instance, Plan
from ..plan_checks import call_dependent
from ..select import HEURISTIC, Chooser, InstanceKey, Pick
from ..targets import GPU, resolve
from .db import Record, TuningDB
from .gpu import device_matches

BENCH, FINAL, VERIFY, BASELINE = "bench", "final", "verify", "baseline"
BASELINE_CONFIG = "baseline"
SEEDED = "bucket"  # a timing's ``seed``: its inputs were seeded by the bucket alone


def problem(inst: Instance, bucket: tuple[int, ...]) -> dict[str, int]:
    """The problem a bucket is tuned at: its upper bounds plus the recipe's sizes."""
    return {**inst.kernel.sizes, **dict(zip(inst.kernel.buckets, bucket, strict=True))}


def off_bucket(
    inst: Instance, bucket: tuple[int, ...], config: Config | None = None
) -> dict[str, int]:
    """A size inside the bucket but off its bound, for the second verification (a listed
    size stays at its value: the bundle is built for exactly those).

    The size is near the bucket's middle, and, given ``config``, one its constraints allow:
    a kernel that needs ``N_CTX % BLOCK_M == 0`` is verified at a multiple of its block,
    the calls the loader would serve, not at one it refuses. Where no size in the bucket
    but its bound is allowed, the bound is verified twice."""
    out = dict(problem(inst, bucket))
    for key, bound in zip(inst.kernel.buckets, bucket, strict=True):
        if key in inst.kernel.listed:
            continue
        bounds = inst.kernel.buckets[key]
        prev = bounds[bounds.index(bound) - 1] if bounds.index(bound) > 0 else 0
        mid = max(prev + 1, (prev + bound) // 2 + 1) if bound > prev + 1 else bound
        out[key] = _allowed_near(inst, config, out, key, mid, prev + 1, bound)
    return out


_SCAN = 4096  # sizes tried each way from the middle before settling for the bound


def _allowed_near(
    inst: Instance,
    config: Config | None,
    point: dict[str, int],
    key: str,
    mid: int,
    low: int,
    bound: int,
) -> int:
    """The size of ``key`` nearest above ``mid`` (else below it) in [low, bound) at which
    ``config`` meets the kernel's call-dependent constraints; ``bound`` if none does."""
    kr = inst.kernel
    dependent = [c for c in kr.constraints if call_dependent(kr, c)] if config else []
    if not dependent:
        return mid

    def allowed(value: int) -> bool:
        try:
            env = env_at(kr, {**point, key: value}, config, inst.target.properties())
            return all(bool(c.evaluate(env)) for c in dependent)
        except (EnvError, ExprError, ArithmeticError, TypeError, ValueError):
            return False

    upward = range(mid, min(bound, mid + _SCAN))
    downward = range(mid - 1, max(low, mid - _SCAN) - 1, -1)
    return next((v for r in (upward, downward) for v in r if allowed(v)), bound)


@dataclass(frozen=True)
class Outcome:
    config: Config
    device: str
    verified: bool | None  # None: the kernel has no reference
    metrics: Mapping[str, Any] = field(default_factory=dict)
    # every config the search benchmarked there without failing: its time (ms), by config
    # id (what the cost model is calibrated on for the instance's unmeasured buckets)
    timed: Mapping[str, float] = field(default_factory=dict)

    @property
    def how(self) -> str:
        note = "" if self.verified else " (unverified: no reference)"
        return f"measured on {self.device}{note}"


def _r(x: float) -> float:
    return float(f"{x:.4g}")


def outcome(
    plan: Plan, inst: Instance, bucket: tuple[int, ...], records: list[Record]
) -> Outcome | None:
    """The bucket's winner from one device's records, or None if it was not finalized."""
    by_id = {c.id: c for c in inst.configs}
    rounds: dict[str, list[float]] = defaultdict(list)
    sustained = False  # the final rounds were timed under load
    verify: dict[str, Record] = {}
    bench: dict[str, Record] = {}
    baseline: list[float] = []
    for r in timed_as_now(inst, records):
        if r.kind != BASELINE and r.config not in by_id:
            continue  # a config the recipe's space has since dropped: it neither wins nor counts
        if r.kind == FINAL and r.ok and r.ms is not None:
            rounds[r.config].append(r.ms)
            sustained = sustained or sustain_of(r) > 0
        elif r.kind == VERIFY:
            verify[r.config] = r
        elif r.kind == BENCH:
            bench[r.config] = r
        elif r.kind == BASELINE and r.ok and r.ms is not None:
            baseline.append(r.ms)
    has_reference = inst.kernel.reference is not None
    finalists = [
        (statistics.median(ms), cid)
        for cid, ms in rounds.items()
        if not has_reference or (cid in verify and verify[cid].ok)
    ]
    if not finalists:
        return None
    ms, cid = _winner(finalists, rounds, bench) if sustained else min(finalists)
    device = records[0].device
    metrics: dict[str, Any] = {
        "device": device,
        "ms": _r(ms),
        "rounds": len(rounds[cid]),
        "benchmarks": sum(1 for r in bench.values() if r.ok or r.reason),
        "failed": sum(1 for r in bench.values() if not r.ok),
    }
    if has_reference:
        v = verify[cid]
        metrics["error"] = _r(float(v.extra.get("error") or 0.0))
        metrics["tolerance"] = float(v.extra.get("tolerance", 0.0))
    default = rank(inst, bucket)[0]
    d = bench.get(default.id)
    if default.id in rounds:  # re-measured alongside the finalists: the fair comparison
        metrics["default_ms"] = _r(statistics.median(rounds[default.id]))
    elif d is not None and d.ok and d.ms:
        metrics["default_ms"] = _r(d.ms)
    if "default_ms" in metrics:
        metrics["vs_default"] = _r(metrics["default_ms"] / ms)
    if baseline:
        metrics["baseline_ms"] = _r(statistics.median(baseline))
        metrics["vs_baseline"] = _r(metrics["baseline_ms"] / ms)
    metrics.update(throughput(inst, bucket, ms, device, by_id[cid]))
    timed = {c: r.ms for c, r in bench.items() if r.ok and r.ms}
    return Outcome(by_id[cid], device, True if has_reference else None, metrics, timed)


def _winner(
    finalists: list[tuple[float, str]], rounds: Mapping[str, list[float]],
    bench: Mapping[str, Record],
) -> tuple[float, str]:  # fmt: skip
    """The fastest finalist by its rounds' median, unless its rounds and another's overlap
    (one's fastest round no slower than the other's slowest): timed under sustained load
    the two are then tied, and the one faster in its screening benchmark (timed from an
    idle GPU, as a call after host work finds it) wins: as fast under load, faster after
    a pause."""
    _, cid = min(finalists)
    tied = [(m, c) for m, c in finalists if min(rounds[c]) <= max(rounds[cid])]

    def screened(entry: tuple[float, str]) -> tuple[float, float]:
        r = bench.get(entry[1])
        return (r.ms if r is not None and r.ok and r.ms else float("inf"), entry[0])

    return min(tied, key=screened)


def sustain_of(r: Record) -> int:
    """How long the GPU was kept busy before a final round or baseline was timed
    (``tune.sustain_ms``; 0, from an idle GPU, for every record from before it)."""
    return int(r.extra.get("sustain_ms", 0))


def timed_as_now(inst: Instance, records: list[Record]) -> list[Record]:
    """``records`` without the timings taken otherwise than the tuner takes them now,
    where some were taken that way: a re-tune re-measures only the configs its search
    visits, and another config's old timing must not win against them.

    - Final rounds and baselines timed otherwise than ``tune.sustain_ms`` (from an idle
      GPU: faster, at its boost clock).
    - For a kernel with a size in its config's terms, timings whose inputs were not
      seeded by the bucket alone (``seed``: each block size timed on its own routing).

    A database with none timed the current way is read whole, as it was before."""
    want = inst.kernel.tune.sustain_ms
    out = list(records)
    for kind in (FINAL, BASELINE):
        mine = [r for r in records if r.kind == kind]
        if any(sustain_of(r) == want for r in mine):
            out = [r for r in out if r.kind != kind or sustain_of(r) == want]
    if any(r.extra.get("seed") == SEEDED for r in out):
        timed = (BENCH, FINAL, BASELINE)
        out = [r for r in out if r.kind not in timed or r.extra.get("seed") == SEEDED]
    return out


def throughput(
    inst: Instance, bucket: tuple[int, ...], ms: float, device: str, config: Config
) -> dict[str, Any]:
    """TFLOP/s and GB/s from the recipe's ``flops``/``bytes`` (sizes that are expressions
    evaluated under ``config``), and % of the device's ceilings (measured ones where the
    targets table has them)."""
    t = inst.kernel.tune
    env = env_at(inst.kernel, problem(inst, bucket), config)
    out: dict[str, Any] = {}
    gpu = product_gpu(device)
    if t.flops is not None:
        tflops = t.flops.evaluate(env) / (ms * 1e-3) / 1e12
        out["tflops"] = _r(tflops)
        if gpu is not None:
            out["pct_peak_flops"] = _r(100 * tflops / gpu.ceiling_tflops)
    if t.bytes is not None:
        gbps = t.bytes.evaluate(env) / (ms * 1e-3) / 1e9
        out["gbps"] = _r(gbps)
        if gpu is not None:
            out["pct_peak_bw"] = _r(100 * gbps / gpu.ceiling_gbps)
    return out


def product_gpu(device: str) -> GPU | None:
    """The targets table's entry for a device name ("NVIDIA H200" -> H200), if any."""
    for token in device.replace("NVIDIA", " ").split():
        try:
            return resolve(token)
        except ValueError:
            continue
    return None


def outcomes(plan: Plan, db: TuningDB) -> dict[InstanceKey, dict[tuple[int, ...], Outcome]]:
    """Every bucket the database can decide, per instance (first matching device wins,
    by name, so the choice does not depend on record order)."""
    found: dict[InstanceKey, dict[tuple[int, ...], Outcome]] = {}
    for inst in plan.instances:
        src = plan.sources[inst.kernel.name]
        recs = db.select(kernel=inst.kernel.name, source=src.cache_key, dtypes=dict(inst.dtypes))
        devices = sorted({(r.device, r.arch) for r in recs})
        for bucket in inst.buckets:
            prob = problem(inst, bucket)
            for device, arch in devices:
                if not device_matches(inst.target, device, arch):
                    continue
                mine = [r for r in recs if r.device == device and dict(r.problem) == prob]
                o = outcome(plan, inst, bucket, mine) if mine else None
                if o is not None:
                    found.setdefault(inst.key, {})[bucket] = o
                    break
    return found


def _transfer_source(plan: Plan, inst: Instance, measured: set[InstanceKey]) -> Instance | None:
    family = [
        other
        for other in plan.instances
        if other.key in measured
        and other.kernel.name == inst.kernel.name
        and other.dtypes == inst.dtypes
        and other.target.family == inst.target.family
        and other.key != inst.key
    ]
    if not family:
        return None
    return min(
        family,
        key=lambda o: (
            abs(o.target.cc[1] - inst.target.cc[1]),
            abs(o.target.sms - inst.target.sms),
            o.target.name,
        ),
    )


Found = Mapping[InstanceKey, Mapping[tuple[int, ...], Outcome]]


def chooser(plan: Plan, found: Found, fallback: Chooser) -> Chooser:
    """A chooser that prefers measurements (``found``: ``outcomes`` of the plan's
    database), then transfers, then ``fallback``."""
    transfers = {
        inst.key: src
        for inst in plan.instances
        if inst.key not in found and (src := _transfer_source(plan, inst, set(found))) is not None
    }

    def choose(inst: Instance, bucket: tuple[int, ...]) -> list[Pick]:
        rest = fallback(inst, bucket)
        o = found.get(inst.key, {}).get(bucket)
        if o is not None:
            return [Pick(o.config, o.how, o.metrics), *rest]
        src = transfers.get(inst.key)
        if src is not None:
            so = found[src.key].get(bucket)
            if so is not None and so.config in inst.configs:
                note = {"from": src.target.name, "device": so.device}
                return [Pick(so.config, f"transferred from {src.target.name}", note), *rest]
        return rest

    return choose


def count(plan: Plan, choose: Chooser) -> dict[str, int]:
    """How many of the plan's buckets are measured, transferred or left to the heuristic."""
    counts = {"measured": 0, "transferred": 0, "heuristic": 0}
    for inst in plan.instances:
        for bucket in inst.buckets:
            how = choose(inst, bucket)[0].how
            if how.startswith(HEURISTIC[:-1]):  # also "untuned (heuristic; cost model …)"
                key = "heuristic" if how == HEURISTIC else "heuristic (cost model unavailable)"
            else:
                key = how.split()[0]
            counts[key] = counts.get(key, 0) + 1
    return counts
