"""The held-out recipes' bundles calibrated on half their buckets, timed on a GPU beside the
tuned and the predicted ones (check_predicted.sh with KINDS="tuned predicted calibrated
calibrated2"): for each size the check times, the bundle whose database left that size's
bucket out (so the model, calibrated on the other half, picked it), its µs per call over
the tuned bundle's, beside the predicted bundle's. Sizes and buckets are matched by the
rules below, one per recipe; the bucket's "how" is read from the bundle's build report.

    python benchmarks/heldout/compare_calibrated.py RUN_DIR

RUN_DIR holds LIB-KIND/ folders of check-RECIPE.log and RECIPE.report.md.
"""

from __future__ import annotations

import math
import re
import sys
from collections.abc import Callable
from pathlib import Path

from compare_checks import times

DTYPE = "bf16"  # the checks time bf16
Sizes = dict[str, int]
NUM = re.compile(r"\d+")


def _ints(s: str) -> list[int]:
    return [int(x) for x in NUM.findall(s)]


# recipe: (library, the bucket's sizes from a check row's size label)
RULES: dict[str, tuple[str, Callable[[list[int]], Sizes]]] = {
    "decode": ("lightllm", lambda v: {"batch": v[0], "max_len": v[1]}),
    "rotary": ("lightllm", lambda v: {"max_total_len": v[0]}),
    "selective_state_update": ("mamba", lambda v: {"batch": v[0]}),
    "bmm_chunk": ("mamba", lambda v: {"seqlen": v[0]}),
    "rms_layernorm": ("unsloth", lambda v: {"n_rows": v[0], "cols": v[1]}),
    "rope": ("unsloth", lambda v: {"n_rows": v[0], "qcols": v[1] * 128}),
    "swiglu": ("unsloth", lambda v: {"n_elements": v[0] * v[1]}),
}


def hows(report: Path) -> dict[tuple[tuple[str, int], ...], str]:
    """The buckets (their bounds) of the report's first bf16 instance -> how each was
    chosen (a kernel's instances split their buckets alike: their databases measured
    the same buckets)."""
    out: dict[tuple[tuple[str, int], ...], str] = {}
    mine = False
    for line in report.read_text().splitlines():
        if line.startswith("## "):
            mine = f"[T={DTYPE}" in line and not out
        elif mine and line.startswith("| ") and "≤" in line:
            cells = [c.strip() for c in line.strip("|").split("|")]
            bounds = tuple((k.strip(), int(v)) for k, v in
                           (part.split("≤") for part in cells[0].split(",")))  # fmt: skip
            out.setdefault(bounds, cells[-1])
    return out


def bucket(buckets: list[tuple[tuple[str, int], ...]], sizes: Sizes) -> tuple[tuple[str, int], ...]:
    """The least bucket whose every bound holds ``sizes``."""
    fits = [b for b in buckets if all(sizes[k] <= v for k, v in b)]
    return min(fits, key=lambda b: sum(v for _, v in b))


def main() -> None:
    if len(sys.argv) != 2:
        sys.exit("usage: python benchmarks/heldout/compare_calibrated.py RUN_DIR")
    run = Path(sys.argv[1])
    kinds = ("tuned", "predicted", "calibrated", "calibrated2")
    wanted = [run / f"{lib}-{k}" / f"{name}{recipe}{ext}" for recipe, (lib, _) in RULES.items()
              for k in kinds for name, ext in (("check-", ".log"), ("", ".report.md"))]  # fmt: skip
    if missing := [str(f) for f in wanted if not f.is_file()]:
        sys.exit(f"{run}: no {missing[0]} ({len(missing)} files missing); see the docstring")
    every: dict[str, list[float]] = {"predicted": [], "calibrated": []}
    for recipe, (lib, rule) in RULES.items():
        logs = {k: times(run / f"{lib}-{k}" / f"check-{recipe}.log") for k in kinds}
        reports = {k: hows(run / f"{lib}-{k}" / f"{recipe}.report.md")
                   for k in ("calibrated", "calibrated2")}  # fmt: skip
        for key, tuned in logs["tuned"].items():
            b = bucket(list(reports["calibrated"]), rule(_ints(key[1])))
            kind = next(k for k, h in reports.items() if "calibrated on" in h[b])
            pred, cal = logs["predicted"][key] / tuned, logs[kind][key] / tuned
            every["predicted"].append(pred)
            every["calibrated"].append(cal)
            label = ", ".join(f"{k}≤{v}" for k, v in b)
            print(f"{recipe:24} {key[1]:16} {label:28} tuned {tuned:7.1f}  predicted {pred:.2f}"
                  f"  calibrated ({kind}) {cal:.2f}  {reports[kind][b]}")  # fmt: skip
    for k, xs in every.items():
        g = math.exp(sum(map(math.log, xs)) / len(xs))
        print(
            f"{k}: {len(xs)} sizes, / tuned geomean {g:.3f}, {min(xs):.2f}-{max(xs):.2f}, "
            f"{sum(x > 1.10 for x in xs)} past 1.10, {sum(x > 1.25 for x in xs)} past 1.25"
        )


if __name__ == "__main__":
    main()
