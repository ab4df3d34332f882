"""A heatmap of measured time over the two most influential parameters, as plain SVG.

Influence of a parameter = how much the best time achievable changes with its value
(max over values of the best time at that value, over the overall best). Each cell shows
the best time over all other parameters; green is fast, red slow, grey not measured.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from html import escape

from .db import Record

CELL, LEFT, TOP = 56, 90, 60


def influential(records: Sequence[Record]) -> list[str]:
    ok = [r for r in records if r.ok and r.ms]
    if not ok:
        return []
    best = min(r.ms for r in ok if r.ms)
    spread: dict[str, float] = {}
    for p in sorted(ok[0].values):
        values = {r.values[p] for r in ok}
        if len(values) < 2:
            continue
        per_value = [min(r.ms for r in ok if r.values[p] == v and r.ms) for v in values]
        spread[p] = max(per_value) / best
    return sorted(spread, key=lambda p: (-spread[p], p))[:2]


def svg(records: Sequence[Record], title: str) -> str | None:
    """The heatmap, or None when fewer than two parameters vary among the measurements."""
    params = influential(records)
    if len(params) < 2:
        return None
    px, py = params
    ok = [r for r in records if r.ok and r.ms]
    xs = sorted({r.values[px] for r in ok})
    ys = sorted({r.values[py] for r in ok})
    cell: dict[tuple[int, int], float] = {}
    for r in ok:
        key = (r.values[px], r.values[py])
        assert r.ms is not None
        cell[key] = min(cell.get(key, math.inf), r.ms)
    lo, hi = min(cell.values()), max(cell.values())
    width, height = LEFT + CELL * len(xs) + 20, TOP + CELL * len(ys) + 50
    out = [
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" '
        'font-family="sans-serif" font-size="11">',
        f'<text x="{LEFT}" y="18" font-size="13">{escape(title)}</text>',
        f'<text x="{LEFT}" y="36">best time (ms) over other parameters; fastest {lo:.4g} ms</text>',
    ]
    for j, y in enumerate(ys):
        out.append(f'<text x="{LEFT - 8}" y="{TOP + CELL * j + CELL / 2 + 4}" '
                   f'text-anchor="end">{py}={y}</text>')  # fmt: skip
        for i, x in enumerate(xs):
            xx, yy = LEFT + CELL * i, TOP + CELL * j
            ms = cell.get((x, y))
            if ms is None:
                color, label = "#dddddd", "–"
            else:
                t = 0.0 if hi == lo else math.log(ms / lo) / math.log(hi / lo)
                color = f"rgb({int(60 + 195 * t)},{int(190 - 150 * t)},80)"
                label = f"{ms:.3g}"
            out.append(f'<rect x="{xx}" y="{yy}" width="{CELL - 2}" height="{CELL - 2}" '
                       f'fill="{color}"/>')  # fmt: skip
            out.append(f'<text x="{xx + CELL / 2 - 1}" y="{yy + CELL / 2 + 4}" '
                       f'text-anchor="middle">{label}</text>')  # fmt: skip
    for i, x in enumerate(xs):
        out.append(f'<text x="{LEFT + CELL * i + CELL / 2}" y="{TOP + CELL * len(ys) + 16}" '
                   f'text-anchor="middle">{x}</text>')  # fmt: skip
    out.append(f'<text x="{LEFT + CELL * len(xs) / 2}" y="{TOP + CELL * len(ys) + 36}" '
               f'text-anchor="middle">{px}</text>')  # fmt: skip
    out.append("</svg>")
    return "\n".join(out) + "\n"
