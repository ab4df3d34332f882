"""The model's scores for a bucket no GPU measured, calibrated on the measurements of the
same kernel's other buckets.

A tuning database may decide some of an instance's buckets and not others: the recipe
gained buckets after its GPU runner tuned, a runner's tuning stopped part way, a shard's
database is missing. What the GPU measured at the other buckets says how this kernel's
configs run, which the model, trained on other kernels, can only guess. So before it picks
for such a bucket, its scores are refitted to those measurements:

    log t[bucket j, config c] ≈ a_j + b · score[j, c] + Σ effect[p, v] + residual[c]

a_j each measured bucket's level (its times and scores centred), b the model's scale,
the effects of each parameter's values backfitted to what that leaves, and a residual for
each config timed (what the effects do not say of it). Each measured bucket weighs
exp(-distance / ``WIDTH``), its distance the sum over the problem's sizes of |Δ log size|:
a kernel's configs rank alike at nearby sizes, and less so far away. What the
measurements say is shrunk by weight / (weight + ``SHRINK``): the effects and residuals
toward 0, and b, the least-squares slope (≤ 0, as ``strategies.refit``: scores that run
against the times are not inverted), toward the slope at which the scores would explain
the times' spread exactly. So a bucket near measured ones is picked by what was measured
there, and one far from every measurement by the model's order.

Replayed on every held-out bucket of the committed H200 measurements, the kernel's other
buckets tuned in replay by the ``model`` strategy (``benchmarks/costmodel_calibrated.py``),
this is the figure ``WIDTH`` and ``SHRINK`` were chosen on, a flat region of it
(benchmarks/RESULTS.md, issue 19).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from ..plan import Config
from ..tune.strategies import backfit

WIDTH = 1.0
SHRINK = 1.0


@dataclass(frozen=True)
class Measured:
    """One measured bucket of the instance: its problem's sizes, the configs the GPU timed
    there (ms), and the model's scores of its candidates (higher: predicted faster),
    scored as the bucket to be calibrated is."""

    problem: Mapping[str, int]
    times: Mapping[Config, float]
    scores: Mapping[Config, float]


def distance(a: Mapping[str, int], b: Mapping[str, int]) -> float:
    """Σ |log a[k] − log b[k]| over the problem's sizes (a size below 1 counts as 1)."""
    return sum(abs(math.log(max(v, 1)) - math.log(max(b.get(k, 1), 1))) for k, v in a.items())


def calibrated(
    problem: Mapping[str, int], scores: Mapping[Config, float], measured: Sequence[Measured]
) -> dict[Config, float]:
    """``scores``, the model's for the bucket of ``problem`` (higher: predicted faster),
    refitted to ``measured``: minus each config's predicted log time, up to a constant.
    With no measured config that the model scored, ``scores`` as given."""
    points: list[tuple[Config, float, float, float]] = []  # config, score, log t, weight
    for m in measured:
        mine = [(c, m.scores[c], math.log(ms)) for c, ms in m.times.items()
                if c in m.scores and ms > 0]  # fmt: skip
        w = math.exp(-distance(problem, m.problem) / WIDTH)
        if len(mine) < 2 or w == 0:  # one time says nothing of how configs rank
            continue
        mx = sum(x for _, x, _ in mine) / len(mine)
        my = sum(y for _, _, y in mine) / len(mine)
        points += [(c, x - mx, y - my, w) for c, x, y in mine]
    if not points:
        return dict(scores)
    total = sum(w for *_, w in points)
    sxx = sum(w * x * x for _, x, _, w in points)
    sxy = sum(w * x * y for _, x, y, w in points)
    syy = sum(w * y * y for _, _, y, w in points)
    # the least-squares slope (≤ 0), shrunk toward the one at which the scores would
    # explain the times' spread exactly: far from every measurement, the model's order
    b = (
        (total * min(0.0, sxy / sxx) - SHRINK * math.sqrt(syy / sxx)) / (total + SHRINK)
        if sxx > 0
        else 0.0
    )
    effect = backfit([(c.values(), y - b * x, w) for c, x, y, w in points], SHRINK)

    def additive(c: Config) -> float:
        return sum(effect.get(pv, 0.0) for pv in c.values().items())

    left: dict[Config, list[float]] = {}
    for c, x, y, w in points:
        acc = left.setdefault(c, [0.0, 0.0])
        acc[0] += w * (y - b * x - additive(c))
        acc[1] += w
    residual = {c: r / (weight + SHRINK) for c, (r, weight) in left.items()}
    return {c: -(b * s + additive(c) + residual.get(c, 0.0)) for c, s in scores.items()}
