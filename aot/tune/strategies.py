"""Search strategies over a bucket's candidate configs, driven by ask/tell.

Every strategy is reproducible from its seed and the results it is told, never proposes a
config twice, learns from failures (a failed config counts against its neighbourhood or,
for TPE, as a bad observation), and stops at its budget or after ``patience`` benchmarks
without a gain above 1%.

- ``grid``: every candidate, in the cost model's order.
- ``random``: a seeded shuffle.
- ``bayes``: Optuna's TPE sampler over the meta-parameters as categorical choices.
- ``model``: the cost model's top picks first (the learned model's, or the analytical
  heuristic's), then local moves around the best config found so far (one parameter
  changed at a time), ordered, after each measurement, by the learned model refitted to
  the bucket's measurements (its scores calibrated to the times measured, corrected per
  parameter value), or with the heuristic's order by an additive surrogate fitted to
  them; with seeded exploration; the default.
"""

from __future__ import annotations

import math
import random
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from ..config import sort_key
from ..plan import Config

GAIN = 0.01  # an improvement must beat the best by more than 1% to reset patience


class Search:
    """Bookkeeping shared by the strategies: budget, patience, best, what was seen."""

    def __init__(
        self,
        candidates: Sequence[Config],
        *,
        budget: int,
        patience: int,
        seed: int,
        warm: Sequence[Config] = (),
        prior: Mapping[Config, float] | None = None,
    ):
        self.candidates = list(candidates)
        # the learned cost model's scores (higher: predicted faster), where it ordered them;
        # a candidate it gave none (no row: it comes last in its order) takes the least
        self.prior: dict[Config, float] | None = None
        if prior:
            least = min(prior.values())
            self.prior = {c: prior.get(c, least) for c in self.candidates}
        self.index = {c: i for i, c in enumerate(self.candidates)}
        self.budget = budget
        self.patience = patience
        self.rng = random.Random(seed)
        self.warm = [c for c in dict.fromkeys(warm) if c in self.index]
        self.seen: dict[Config, float | None] = {}
        self.benchmarks = 0
        self.since_gain = 0
        self.best: tuple[float, Config] | None = None

    @property
    def done(self) -> bool:
        return (
            self.benchmarks >= self.budget
            or self.since_gain >= self.patience
            or len(self.seen) >= len(self.candidates)
        )

    def ask(self) -> Config | None:
        if self.done:
            return None
        for c in self.warm:
            if c not in self.seen:
                return c
        return self._next()

    def tell(self, config: Config, ms: float | None, *, benchmarked: bool = True) -> None:
        """Record a result; ``ms=None`` is a failure. Compile failures pass
        ``benchmarked=False`` and spend no budget."""
        if config in self.seen:
            return
        self.seen[config] = ms
        if benchmarked:
            self.benchmarks += 1
        if ms is not None and (self.best is None or ms < self.best[0] * (1 - GAIN)):
            self.since_gain = 0
        elif benchmarked:
            self.since_gain += 1
        if ms is not None and (self.best is None or ms < self.best[0]):
            self.best = (ms, config)
        self._observe(config, ms)

    def unseen(self) -> list[Config]:
        return [c for c in self.candidates if c not in self.seen]

    def _next(self) -> Config | None:
        raise NotImplementedError

    def _observe(self, config: Config, ms: float | None) -> None:
        pass


class Grid(Search):
    def _next(self) -> Config | None:
        rest = self.unseen()
        return rest[0] if rest else None


class RandomSearch(Search):
    def __init__(self, candidates: Sequence[Config], **kw: Any):
        super().__init__(candidates, **kw)
        self.order = list(self.candidates)
        self.rng.shuffle(self.order)

    def _next(self) -> Config | None:
        return next((c for c in self.order if c not in self.seen), None)


def neighbours(a: Config, b: Config) -> bool:
    """Configs that differ in exactly one parameter."""
    va, vb = a.values(), b.values()
    return sum(1 for k in va if va[k] != vb.get(k)) == 1


def additive_fit(observed: dict[Config, float]) -> dict[tuple[str, Any], float]:
    """Per (parameter, value), its effect on log time, fitted to the observations by a few
    rounds of backfitting: log t ≈ mean + Σ effect[p, v]. A cheap learned surrogate that
    tells which values of each parameter have been paying off."""
    return backfit([(c.values(), math.log(ms), 1.0) for c, ms in observed.items()])


def backfit(
    rows: Sequence[tuple[dict[str, Any], float, float]], shrink: float = 0.0
) -> dict[tuple[str, Any], float]:
    """Additive effects of each (parameter, value) on ``y``, backfitted over a few rounds
    to ``rows`` of (parameter values, y, weight): y ≈ mean + Σ effect[p, v], each effect
    the weighted mean of what the others leave, shrunk toward 0 by weight / (weight +
    ``shrink``) (0: not shrunk)."""
    total = sum(w for _, _, w in rows)
    mean = sum(y * w for _, y, w in rows) / total
    effect: dict[tuple[str, Any], float] = {}
    for _ in range(3):
        for p in rows[0][0]:
            sums: dict[Any, list[float]] = {}
            for values, y, w in rows:
                rest = sum(effect.get((q, values[q]), 0.0) for q in values if q != p)
                acc = sums.setdefault(values[p], [0.0, 0.0])
                acc[0] += w * (y - mean - rest)
                acc[1] += w
            for v, (res, weight) in sums.items():
                effect[(p, v)] = res / (weight + shrink)
    return effect


def refit(
    observed: dict[Config, float], prior: Mapping[Config, float]
) -> Callable[[Config], float]:
    """The learned cost model refitted to a bucket's measurements: log t ≈ a + b · score +
    Σ effect[p, v], where ``score`` is the model's (higher: predicted faster). a and b
    calibrate its scores, which say only an order, to this bucket's times by least squares
    (b ≤ 0: where the measurements run against the model's order, its score is dropped
    rather than inverted); the additive effects, backfitted to what that leaves, correct
    it per parameter value. Returns the predicted log time of any candidate."""
    cs = list(observed)
    xs = [prior[c] for c in cs]
    ys = [math.log(observed[c]) for c in cs]
    mx, my = sum(xs) / len(xs), sum(ys) / len(ys)
    sxx = sum((x - mx) ** 2 for x in xs)
    sxy = sum((x - mx) * (y - my) for x, y in zip(xs, ys, strict=True))
    b = min(0.0, sxy / sxx) if len(cs) >= 3 and sxx > 0 else 0.0
    a = my - b * mx
    effect = backfit([(c.values(), y - a - b * x, 1.0) for c, x, y in zip(cs, xs, ys, strict=True)])
    return lambda c: a + b * prior[c] + sum(effect.get(pv, 0.0) for pv in c.values().items())


class Model(Search):
    """Cost-model order, best first; then local moves around the best (one parameter
    changed), ordered by the learned model refitted to what was measured (``refit``)
    given its scores (``prior``), else by an additive surrogate fitted to it. Some seeded
    exploration."""

    EXPLORE = 0.15
    SEED_TOP = 8  # the model's top picks, benchmarked before any local move
    SEED_TOP_WARM = 4  # fewer when warm-started: the neighbour's best already seeds it
    # True: with the learned model's scores, the refit's best among every unseen candidate,
    # not only the best's neighbours. benchmarks/costmodel_refit.py measures both: that
    # gains where the scores are sure (every candidate compiled) and loses more where they
    # are not (an instance's first bucket, scored before its candidates compile), and lost
    # on the H100 for a kernel the model never saw (benchmarks/RESULTS.md, issue 19).
    GLOBAL_MOVES = False

    def _next(self) -> Config | None:
        rest = self.unseen()
        if not rest:
            return None
        top = self.candidates[: self.SEED_TOP_WARM if self.warm else self.SEED_TOP]
        pending = [c for c in top if c not in self.seen]
        if pending:
            return pending[0]
        if self.rng.random() < self.EXPLORE:
            return self.rng.choice(rest)
        if self.best is not None:
            best = self.best[1]
            # Failed configs mark their neighbourhood: moves toward them come last.
            failed = [c for c, ms in self.seen.items() if ms is None]
            predicted = self._surrogate({c: ms for c, ms in self.seen.items() if ms is not None})
            if self.prior is not None and self.GLOBAL_MOVES:
                moves = rest
            else:
                moves = [c for c in rest if neighbours(c, best)]
            if moves:
                return min(moves, key=lambda c: (sum(neighbours(c, f) for f in failed),
                                                 predicted(c), self.index[c]))  # fmt: skip
            return min(rest, key=lambda c: (predicted(c), self.index[c]))
        return rest[0]

    def _surrogate(self, observed: dict[Config, float]) -> Callable[[Config], float]:
        """Predicted log time (up to a constant): the learned model refitted to the
        bucket's measurements where it ordered the candidates, else the additive fit."""
        if self.prior is not None:
            return refit(observed, self.prior)
        effect = additive_fit(observed)
        return lambda c: sum(effect.get(pv, 0.0) for pv in c.values().items())


class Bayes(Search):
    """Optuna's TPE over categorical parameters; invalid suggestions never reach the GPU."""

    def __init__(self, candidates: Sequence[Config], **kw: Any):
        import optuna

        super().__init__(candidates, **kw)
        optuna.logging.set_verbosity(optuna.logging.WARNING)
        seed = kw["seed"]
        self._optuna = optuna
        self.params = sorted(self.candidates[0].values()) if self.candidates else []
        self.by_values = {tuple(sorted(c.values().items())): c for c in self.candidates}
        self.dists: dict[str, optuna.distributions.BaseDistribution] = {
            p: optuna.distributions.CategoricalDistribution(
                sorted({c.values()[p] for c in self.candidates}, key=sort_key)
            )
            for p in self.params
        }
        sampler = optuna.samplers.TPESampler(seed=seed, n_startup_trials=10, multivariate=True)
        self.study = optuna.create_study(direction="minimize", sampler=sampler)
        self.pending: dict[Config, Any] = {}
        self.worst = 0.0

    def _penalty(self) -> float:
        return 2 * self.worst if self.worst else 1e9

    def _next(self) -> Config | None:
        for _ in range(50):
            trial = self.study.ask(self.dists)
            values = tuple(sorted((p, trial.params[p]) for p in self.params))
            config = self.by_values.get(values)
            if config is None:  # pruned for this target: teach TPE, spend nothing
                self.study.tell(trial, self._penalty())
                continue
            if config in self.seen:
                ms = self.seen[config]
                self.study.tell(trial, self._penalty() if ms is None else ms)
                continue
            self.pending[config] = trial
            return config
        rest = self.unseen()  # TPE keeps repeating itself: fall back to a random candidate
        return self.rng.choice(rest) if rest else None

    def _observe(self, config: Config, ms: float | None) -> None:
        if ms is not None:
            self.worst = max(self.worst, ms)
        trial = self.pending.pop(config, None)
        if trial is None:  # a warm-start config: add it as a finished trial
            dist_values = {p: config.values()[p] for p in self.params}
            self.study.add_trial(
                self._optuna.trial.create_trial(
                    params=dist_values,
                    distributions=self.dists,
                    value=self._penalty() if ms is None else ms,
                )
            )
        else:
            self.study.tell(trial, self._penalty() if ms is None else ms)


STRATEGIES: dict[str, type[Search]] = {
    "grid": Grid,
    "random": RandomSearch,
    "bayes": Bayes,
    "model": Model,
}


def make(
    name: str,
    candidates: Sequence[Config],
    *,
    budget: int,
    patience: int,
    seed: int,
    warm: Sequence[Config] = (),
    prior: Mapping[Config, float] | None = None,
) -> Search:
    """A strategy over ``candidates``, which must be in the cost model's order; ``prior``:
    the learned model's scores behind that order, which the ``model`` strategy refits to
    the measurements (``refit``)."""
    return STRATEGIES[name](candidates, budget=budget, patience=patience, seed=seed, warm=warm,
                            prior=prior)  # fmt: skip
