"""Search strategies over a bucket's candidate configs, driven by ask/tell.

Every strategy is reproducible from its seed and the results it is told, never proposes a
config twice, learns from failures (a failed config counts against its neighbourhood or,
for TPE, as a bad observation), and stops at its budget or after ``patience`` benchmarks
without a gain above 1%.

- ``grid``: every candidate, in the cost model's order.
- ``random``: a seeded shuffle.
- ``bayes``: Optuna's TPE sampler over the meta-parameters as categorical choices.
- ``model``: the analytical cost model's top picks first, then local moves around the
  best config found so far (one parameter changed at a time), ordered by an additive
  surrogate fitted to the measurements, with seeded exploration; the default.
"""

from __future__ import annotations

import math
import random
from collections.abc import Sequence
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
    ):
        self.candidates = list(candidates)
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
    rows = [(c.values(), math.log(ms)) for c, ms in observed.items()]
    mean = sum(y for _, y in rows) / len(rows)
    effect: dict[tuple[str, Any], float] = {}
    for _ in range(3):
        for p in rows[0][0]:
            sums: dict[Any, list[float]] = {}
            for values, y in rows:
                rest = sum(effect.get((q, values[q]), 0.0) for q in values if q != p)
                sums.setdefault(values[p], []).append(y - mean - rest)
            for v, res in sums.items():
                effect[(p, v)] = sum(res) / len(res)
    return effect


class Model(Search):
    """Cost-model order, best first; then local moves around the best, ordered by an
    additive surrogate fitted to what was measured; some seeded exploration."""

    EXPLORE = 0.15
    SEED_TOP = 8  # the model's top picks, benchmarked before any local move
    SEED_TOP_WARM = 4  # fewer when warm-started: the neighbour's best already seeds it

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
            effect = additive_fit({c: ms for c, ms in self.seen.items() if ms is not None})

            def predicted(c: Config) -> float:
                return sum(effect.get(pv, 0.0) for pv in c.values().items())

            local = [c for c in rest if neighbours(c, best)]
            local.sort(key=lambda c: (sum(neighbours(c, f) for f in failed), predicted(c),
                                      self.index[c]))  # fmt: skip
            if local:
                return local[0]
            return min(rest, key=lambda c: (predicted(c), self.index[c]))
        return rest[0]


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
) -> Search:
    """A strategy over ``candidates``, which must be in the cost model's order."""
    return STRATEGIES[name](candidates, budget=budget, patience=patience, seed=seed, warm=warm)
