"""Report: the model's section of the build report, one table per place."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from ..recipe import ModelRecipe
from .plan import Place, aoti_compiler, where_of
from .select import Outcome, ServingChoice

_HEADER = [
    "| bucket | compile s | bytes | rel err | padded from | rel err padded | timed µs | serves |",
    "|---|---|---|---|---|---|---|---|",
]


def section(mr: ModelRecipe, places: Sequence[tuple[Place, Sequence[Outcome]]]) -> str:
    """The Markdown section: the model, then per place a row per bucket."""
    backend = f"backend {mr.backend}" + (f", C++ compiler {aoti_compiler(mr)}"
                                         if mr.backend == "aoti" else "")  # fmt: skip
    lines = [f"## Model `{mr.name}` ({mr.source_text}, {mr.dtype}, mode {mr.mode}, {backend})",
             ""]  # fmt: skip
    for place, outcomes in places:
        lines += [f"### {place.target} ({place.name})", "", *_HEADER]
        lines += [row(mr, o) for o in outcomes]
        lines.append("")
    return "\n".join(lines) + "\n"


def row(mr: ModelRecipe, o: Outcome) -> str:
    m = o.metrics
    size = len(o.data) if o.serving.impl == "compiled" else "none"
    timed = timed_cell(o.choice) if o.choice is not None else ""
    return (
        f"| {where_of(mr, o.bucket)} | {_compile_cell(mr, o)} | {size} | "
        f"{m['rel_err']:.2e} | {m.get('padded_from', '')} | "
        f"{_fmt(m.get('pad_rel_err'))} | {timed} | {o.serving.label} |"
    )


def _compile_cell(mr: ModelRecipe, o: Outcome) -> str:
    """Seconds of each mode's compilation, or "cached"."""
    if all(o.cached[m] for m in mr.modes):
        return "cached"
    return " + ".join(
        "cached" if o.cached[m] else f"{o.arts[m].metrics['compile_s']:.1f}" for m in mr.modes
    )


def timed_cell(choice: ServingChoice) -> str:
    """The "timed µs" cell: each candidate's median, or why it was not timed."""
    cells = [f"{k} {v:.1f}" for k, v in choice.times_us.items()]
    cells += [f"{k}: not servable ({v[:80]})" for k, v in choice.errors.items()]
    return "; ".join(cells).replace("|", "/")


def _fmt(x: Any) -> str:
    return f"{x:.2e}" if isinstance(x, float) else ""
