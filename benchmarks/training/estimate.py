"""What a dense GPU build of the training recipes costs, from their plans (no compiling):

    python benchmarks/training/estimate.py [--bench-ms 45] [--compile-s 0.3] [-j 16]

Per recipe: buckets, configs per bucket, benchmarks (every candidate at every bucket, the
``grid`` strategy with no early stop), re-measurements (finalists x rounds per bucket) and
variants to compile (each config's specializations, with the generic one), then the
estimated seconds: benchmarks and re-measurements in turn on one GPU, compiles spread
over ``-j`` processes. The per-benchmark figure is an assumption to adjust: the tuner
times each candidate for about 25 ms once warm, plus a warm-up, an L2 flush per launch and
the request's own cost.
"""

from __future__ import annotations

import argparse
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parents[1]))

FINAL_MS = 12.0  # a re-measurement round: 10 ms of timing plus its request


@dataclass(frozen=True)
class Cost:
    recipe: str
    buckets: int  # (instance, bucket) pairs
    benchmarks: int
    finals: int
    variants: int

    def seconds(self, bench_ms: float, compile_s: float, jobs: int) -> float:
        timing = self.benchmarks * bench_ms / 1000 + self.finals * FINAL_MS / 1000
        return timing + self.variants * compile_s / jobs


def cost(path: Path) -> Cost:
    from aot.plan import make_plan
    from aot.recipe import load

    return plan_cost(make_plan(load(path)), path.name)


def plan_cost(plan: Any, name: str) -> Cost:
    buckets = benchmarks = finals = variants = 0
    for inst in plan.instances:
        tune = inst.kernel.tune
        configs = set()
        for bucket in inst.buckets:
            cands = inst.candidates(bucket)
            configs.update(cands)
            n = min(len(cands), tune.budget)
            buckets += 1
            benchmarks += n
            finals += min(n, tune.finalists) * tune.rounds
        variants += sum(1 for _ in inst.variants(tuple(configs)))
    return Cost(name, buckets, benchmarks, finals, variants)


def recipes() -> list[Path]:
    return sorted(HERE.glob("*.toml"))


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--bench-ms", type=float, default=45.0)
    ap.add_argument("--compile-s", type=float, default=0.3)
    ap.add_argument("-j", type=int, default=16)
    args = ap.parse_args()
    rows = [cost(p) for p in recipes()]
    print(
        f"{'recipe':<22}{'buckets':>8}{'benchmarks':>11}{'finals':>8}{'variants':>9}{'est. s':>8}"
    )
    for c in rows:
        s = c.seconds(args.bench_ms, args.compile_s, args.j)
        print(
            f"{c.recipe:<22}{c.buckets:>8}{c.benchmarks:>11}{c.finals:>8}{c.variants:>9}{s:>8.0f}"
        )
    total = sum(c.seconds(args.bench_ms, args.compile_s, args.j) for c in rows)
    print(
        f"{'all':<22}{sum(c.buckets for c in rows):>8}{sum(c.benchmarks for c in rows):>11}"
        f"{sum(c.finals for c in rows):>8}{sum(c.variants for c in rows):>9}{total:>8.0f}"
    )


if __name__ == "__main__":
    main()
