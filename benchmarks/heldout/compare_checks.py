"""Side by side, from two runs of a held-out folder's check.py (check_predicted.sh's, on
the H200-tuned bundle and on the cost model's CPU-only one, or the one calibrated on half
the buckets): each size's µs per call, the ratio predicted (or calibrated) / tuned, and
per recipe its geometric mean and range.

    python benchmarks/heldout/compare_checks.py TUNED_LOGS PREDICTED_LOGS RECIPE...

TUNED_LOGS and PREDICTED_LOGS hold check-RECIPE.log files. Times include the host's cost
of a call (a few µs), so sizes of a few µs read a few percent either way between runs.
"""

from __future__ import annotations

import math
import re
import sys
from pathlib import Path

TITLE = re.compile(r"^(.*): µs per call")
ROW = re.compile(r"^(\S.*?)\s+([\d.]+)\s+([\d.]+)\s+[\d.]+x$")  # sizes, ours, theirs, ratio


def times(log: Path) -> dict[tuple[str, str], float]:
    """(table title, sizes) -> the bundle's µs per call, from one check log."""
    out: dict[tuple[str, str], float] = {}
    title = ""
    for line in log.read_text().splitlines():
        if m := TITLE.match(line):
            title = m.group(1)
        elif (m := ROW.match(line)) and title:
            out[(title, m.group(1).strip())] = float(m.group(2))
    return out


def main() -> None:
    if len(sys.argv) < 4:
        sys.exit("usage: python benchmarks/heldout/compare_checks.py TUNED OTHER RECIPE...")
    tuned_dir, predicted_dir, *recipes = sys.argv[1:]
    # the second run's kind, from its folder's name (LIB-predicted, LIB-calibrated)
    kind = Path(predicted_dir).name.rpartition("-")[2] or "predicted"
    logs = [Path(d) / f"check-{r}.log" for r in recipes for d in (tuned_dir, predicted_dir)]
    if missing := [str(f) for f in logs if not f.is_file()]:
        sys.exit(f"no {missing[0]} ({len(missing)} check logs missing)")
    for recipe in recipes:
        tuned = times(Path(tuned_dir) / f"check-{recipe}.log")
        predicted = times(Path(predicted_dir) / f"check-{recipe}.log")
        ratios = []
        for key, t in tuned.items():
            if key in predicted:
                ratios.append(predicted[key] / t)
                print(f"{key[0]:28} {key[1]:16} tuned {t:7.1f}  {kind} {predicted[key]:7.1f}"
                      f"  {ratios[-1]:.2f}")  # fmt: skip
        if ratios:
            mean = math.exp(sum(map(math.log, ratios)) / len(ratios))
            print(f"{recipe}: {len(ratios)} sizes, {kind} / tuned geomean {mean:.3f}, "
                  f"{min(ratios):.2f}-{max(ratios):.2f}\n")  # fmt: skip


if __name__ == "__main__":
    main()
