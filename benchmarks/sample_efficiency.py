"""Sample efficiency of the search strategies, replayed against an exhaustive measurement.

    python benchmarks/sample_efficiency.py [--db benchmarks/data/h200-exhaustive.tunedb.jsonl.gz]

The database holds every config of the example's space (bf16, sm_90) benchmarked at every
bucket on an H200 (`aotc build benchmarks/recipes/exhaustive.toml`, strategy "grid"), and
the top five re-measured in five interleaved rounds. A config's true time is its measured
median (for the re-measured finalists, the median of their rounds); the target is the
re-measured exhaustive best. Each strategy is replayed over that table with measurement
noise drawn from the spread observed between rounds, over several seeds:

- "n to 3%": benchmarks until the best-looking config is truly within 3% of the best
  (median over seeds; ">B" if never within the budget B);
- the default strategy with the example recipe's real settings (model, budget 60,
  patience 30, top-5 re-measured in 5 rounds), from cold and warm-started from the
  neighbouring bucket's best configs: how often its final pick is within 3% and 5%,
  and how many benchmarks it spent.

Runs on a CPU machine (no GPU needed): it only reads the recorded table.
"""

from __future__ import annotations

import argparse
import gzip
import json
import random
import statistics
import sys
from collections import defaultdict
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))


def load_table(path: Path) -> dict[tuple[str, int], dict[str, object]]:
    opener = gzip.open if path.suffix == ".gz" else open
    bench: dict[tuple[str, int], dict[str, float]] = defaultdict(dict)
    rounds: dict[tuple[str, int], dict[str, list[float]]] = defaultdict(lambda: defaultdict(list))
    with opener(path, "rt") as f:
        for line in f:
            r = json.loads(line)
            key = (r["kernel"], r["problem"]["M"])
            if r["kind"] == "bench" and r["ok"]:
                bench[key][r["config"]] = r["ms"]
            elif r["kind"] == "final" and r["ok"]:
                rounds[key][r["config"]].append(r["ms"])
    out = {}
    for key, times in bench.items():
        truth = dict(times)
        spreads = []
        for cid, ms in rounds[key].items():
            truth[cid] = statistics.median(ms)
            if len(ms) > 1:
                spreads.append(statistics.pstdev(ms) / statistics.mean(ms))
        sigma = statistics.median(spreads) if spreads else 0.02
        out[key] = {"truth": truth, "best": min(truth.values()), "sigma": sigma}
    return out


def replay(search, truth, sigma, rng, best, limit):  # type: ignore[no-untyped-def]
    """Run a strategy against noisy observations; return (n to 3%, observations)."""
    seen: dict[object, float] = {}
    n_hit = None
    while (c := search.ask()) is not None and len(seen) < limit:
        obs = truth[c.id] * (1 + rng.gauss(0, sigma))
        seen[c] = obs
        search.tell(c, obs)
        pick = min(seen, key=seen.__getitem__)
        if n_hit is None and truth[pick.id] <= best * 1.03:
            n_hit = len(seen)
    return n_hit, seen


def finalize(seen, truth, sigma, rng, finalists=5, rounds=5):  # type: ignore[no-untyped-def]
    top = sorted(seen, key=seen.__getitem__)[:finalists]
    med = {c: statistics.median(truth[c.id] * (1 + rng.gauss(0, sigma)) for _ in range(rounds))
           for c in top}  # fmt: skip
    return min(med, key=med.__getitem__)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument(
        "--db", type=Path, default=ROOT / "benchmarks" / "data" / "h200-exhaustive.tunedb.jsonl.gz"
    )
    ap.add_argument(
        "--recipe", type=Path, default=ROOT / "benchmarks" / "recipes" / "exhaustive.toml"
    )
    ap.add_argument("--seeds", type=int, default=20)
    ap.add_argument("--bayes-seeds", type=int, default=5)
    ap.add_argument("--strategies", nargs="+", default=["grid", "random", "bayes", "model"])
    ap.add_argument("--json", type=Path)
    args = ap.parse_args()

    from aot.heuristic import rank
    from aot.plan import make_plan
    from aot.recipe import load

    table = load_table(args.db)
    # The default strategy is replayed with the example recipe's real tuning settings.
    defaults = {k.name: k.tune for k in load(ROOT / "recipes" / "example.toml").kernels}
    plan = make_plan(load(args.recipe))
    results = []
    for inst in plan.instances:
        prev_top: list = []
        for bucket in inst.buckets:
            key = (inst.kernel.name, bucket[0])
            if key not in table:
                continue
            t = table[key]
            truth = t["truth"]  # type: ignore[index]
            ranked = [c for c in rank(inst, bucket) if c.id in truth]
            row: dict[str, object] = {"kernel": inst.kernel.name, "M": bucket[0],
                                      "configs": len(ranked), "sigma": t["sigma"]}  # fmt: skip
            row.update(strategy_rows(args, ranked, t))
            row.update(default_rows(args, defaults[inst.kernel.name], ranked, t, prev_top))
            prev_top = sorted(ranked, key=lambda c: truth[c.id])[:3]
            results.append(row)
            print(f"{row['kernel']} M={row['M']} done", file=sys.stderr)
    if args.json:
        args.json.write_text(json.dumps(results, indent=1))
    print_table(results)


def strategy_rows(args, ranked, t) -> dict[str, object]:  # type: ignore[no-untyped-def]
    """Per search strategy, the median (and p90) number of benchmarks over seeds to get
    within 3% of the best."""
    from aot.tune import strategies

    truth, best, sigma = t["truth"], t["best"], t["sigma"]
    row: dict[str, object] = {}
    for name in ("grid", "random", "bayes", "model"):
        if name not in args.strategies:
            row[name] = row[name + "_p90"] = float("nan")
            continue
        seeds = args.bayes_seeds if name == "bayes" else args.seeds
        limit = min(150, len(ranked))
        ns = []
        for seed in range(seeds):
            rng = random.Random(1000 + seed)
            s = strategies.make(name, ranked, budget=len(ranked), patience=len(ranked),
                                seed=seed)  # fmt: skip
            n, _ = replay(s, truth, sigma, rng, best, limit)
            ns.append(n if n is not None else limit + 1)
        row[name] = statistics.median(ns)
        row[name + "_p90"] = sorted(ns)[int(0.9 * (len(ns) - 1))]
    return row


def default_rows(args, ts, ranked, t, prev_top) -> dict[str, object]:  # type: ignore[no-untyped-def]
    """The recipe's own tuning settings, cold and warm-started from the previous bucket's
    top three: benchmarks used, and how often the pick is within 3% and 5% of the best."""
    from aot.tune import strategies

    truth, best, sigma = t["truth"], t["best"], t["sigma"]
    row: dict[str, object] = {}
    for mode, warm in (("cold", []), ("warm", prev_top)):
        used, within3, within5 = [], 0, 0
        for seed in range(args.seeds):
            rng = random.Random(2000 + seed)
            patience = min(ts.patience, ts.warm_patience) if warm else ts.patience
            s = strategies.make(ts.strategy, ranked, budget=ts.budget,
                                patience=patience, seed=seed, warm=warm)  # fmt: skip
            _, seen = replay(s, truth, sigma, rng, best, ts.budget)
            pick = finalize(seen, truth, sigma, rng, ts.finalists, ts.rounds)
            used.append(len(seen))
            within3 += truth[pick.id] <= best * 1.03
            within5 += truth[pick.id] <= best * 1.05
        row[f"default_{mode}_used"] = statistics.median(used)
        row[f"default_{mode}_within3"] = within3 / args.seeds
        row[f"default_{mode}_within5"] = within5 / args.seeds
    return row


def print_table(results) -> None:  # type: ignore[no-untyped-def]
    print("\nbenchmarks to get within 3% of the re-measured exhaustive best "
          "(median over seeds; p90 in brackets)")  # fmt: skip
    print(
        f"{'kernel':<8}{'M':>6}{'space':>6}{'noise':>7}{'grid':>11}{'random':>11}{'bayes':>11}"
        f"{'model':>11}  | example's settings: cold used/≤3%/≤5%   warm used/≤3%/≤5%"
    )
    for r in results:
        cells = "".join(f"{r[n]:>6.0f} [{r[n + '_p90']:>3.0f}]" for n in
                        ("grid", "random", "bayes", "model"))  # fmt: skip
        print(
            f"{r['kernel']:<8}{r['M']:>6}{r['configs']:>6}{100 * r['sigma']:>6.1f}%{cells}  |"
            f"{r['default_cold_used']:>12.0f} {100 * r['default_cold_within3']:>4.0f}% "
            f"{100 * r['default_cold_within5']:>4.0f}%{r['default_warm_used']:>12.0f} "
            f"{100 * r['default_warm_within3']:>4.0f}% {100 * r['default_warm_within5']:>4.0f}%"
        )
    for kernel in sorted({r["kernel"] for r in results}):
        mine = [r for r in results if r["kernel"] == kernel]
        for mode in ("cold", "warm"):
            used = sorted(r[f"default_{mode}_used"] for r in mine)
            w3 = statistics.mean(r[f"default_{mode}_within3"] for r in mine)
            w5 = min(r[f"default_{mode}_within5"] for r in mine)
            print(f"{kernel}, example's settings, {mode}: median {statistics.median(used):.0f} "
                  f"benchmarks per bucket (p90 {used[int(0.9 * (len(used) - 1))]:.0f}); "
                  f"within 3% in {100 * w3:.0f}% of (bucket, seed) runs; every bucket within "
                  f"5% in at least {100 * w5:.0f}% of seeds")  # fmt: skip


if __name__ == "__main__":
    main()
