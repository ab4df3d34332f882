"""The statistics the model benchmark reports its ratios with (benchmarks/model_bench.py)."""

from __future__ import annotations

import random
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))

from model_bench import goals, paired_ratio, verdict


def _noisy(base: float, n: int, seed: int) -> list[float]:
    rng = random.Random(seed)
    return [base * (1 + rng.gauss(0, 0.01)) for _ in range(n)]


def test_same_speed_is_a_tie_and_a_real_difference_is_not() -> None:
    eager = _noisy(100.0, 100, 1)
    assert verdict(paired_ratio(eager, _noisy(100.0, 100, 2))) == "tie"
    lo, mid, hi = paired_ratio(eager, _noisy(95.0, 100, 3))
    assert lo < mid < hi and verdict([lo, mid, hi]) == "faster" and 1.04 < mid < 1.07
    assert verdict(paired_ratio(eager, _noisy(105.0, 100, 4))) == "slower"


def test_goals_fail_only_buckets_measurably_slower() -> None:
    def row(b: int, ci: list[float]) -> dict[str, object]:
        nan = float("nan")
        return {"batch": b, "seq": 128, "aotc_vs_eager": ci[1], "aotc_vs_eager_ci": ci,
                "max_autotune_us": nan, "aotc_vs_max_autotune": nan}  # fmt: skip

    tie = goals({}, [row(4, [0.99, 1.0, 1.01])])
    assert tie[1].startswith("PASS every bucket >= eager") and "(4, 128)" in tie[1]
    slow = goals({}, [row(4, [0.97, 0.98, 0.99]), row(1, [2.4, 2.5, 2.6])])
    assert slow[1].startswith("FAIL every bucket") and "not: [(4, 128)]" in slow[1]
    assert slow[2] == "PASS batch 1 >= 2x eager"
    assert tie[2] == "NOTE batch 1 >= 2x eager: no batch-1 bucket timed"  # not a FAIL
    short = goals({}, [row(1, [1.3, 1.4, 1.5])])
    assert short[2] == "FAIL batch 1 >= 2x eager (not: [(128, 1.4)])"
