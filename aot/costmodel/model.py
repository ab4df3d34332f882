"""The learned cost model: a LightGBM ranker over ``features.NAMES``.

LightGBM because its wheel is small and self-contained (numpy and scipy aside), it has a
native ranking objective (lambdarank: what matters is the order of configs within a
bucket, not their absolute times, which vary between machines of one kind by tens of
percent), and it saves a model as portable, diffable text that any version reads. It is
in the ``build`` extra, never the loader's dependencies, and imported only when a model
is trained or used.

A group is one bucket of one (kernel, target, dtypes); a row's label is its relevance:
``LEVELS`` for a config within ``STEP`` of the bucket's best, one less per further factor
of ``1 + STEP``, 0 from about 2.7× on. Training is deterministic: seeded, one thread,
LightGBM's deterministic mode; the same rows give the same model text.

A model is ``MEMBERS`` rankers trained on the same rows with different seeds (bagging and
feature sampling draw differently), and its score is their mean. One seed's picks for a
kernel it never saw swing widely with the seed, most at the worst buckets; the mean of
several is steadier (benchmarks/RESULTS.md, issue 19).

Beside them, ``MEMBERS`` compile-free rankers: trained on the same configs' rows with
their cubins' features unknown (``features.FROM_CUBIN``), as a build without a GPU first
scores every candidate, to pick the few it compiles (``predict.shortlist``). The full
rankers, asked to order rows they never saw the like of, left out of a stencil's dozen
every config they rate best once compiled, and a build shipped it 3.4× slower than its best
(1.6× with every config compiled); with the compile-free rankers' dozen it ships 1.5×
(benchmarks/RESULTS.md, 2026-12-05).

The model text is the members' LightGBM texts, one after another, each after a
``MEMBER`` line (a full ranker) or a ``PENDING`` line (a compile-free one); a text
without either line is one full member, and a model without compile-free members
scores rows of unknown cubins with its full ones (cost model v1 did).
"""

from __future__ import annotations

import math
import re
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..errors import AotcError
from .features import NAMES

VERSION = 2
LEVELS = 20
STEP = 0.05
ROUNDS = 300  # boosting rounds
MEMBERS = 5  # rankers averaged, seeded seed, seed + 1, ...
MEMBER = "# aotc cost model: ensemble member"
PENDING = "# aotc cost model: compile-free member"
_MARKERS = re.compile(f"^({re.escape(MEMBER)}|{re.escape(PENDING)})\n", re.MULTILINE)
PARAMS: dict[str, Any] = {
    "objective": "lambdarank",
    "learning_rate": 0.05,
    "num_leaves": 15,
    # leaves of at least 100 rows (several buckets' worth): fewer splits on one kernel's quirks
    "min_data_in_leaf": 100,
    "feature_fraction": 0.8,
    "bagging_fraction": 0.8,
    "bagging_freq": 1,
    "lambdarank_truncation_level": 20,
    "label_gain": [float(i) for i in range(LEVELS + 1)],
    "seed": 0,
    "num_threads": 1,
    "deterministic": True,
    "force_row_wise": True,
    "verbose": -1,
}


class CostModelUnavailable(AotcError):
    """The cost model cannot be used here: lightgbm is missing, or the model file is not
    one this aotc reads. The message says which and what to do."""

    exit_code = 2


def _lightgbm() -> Any:
    try:
        import lightgbm
    except ImportError:
        raise CostModelUnavailable(
            "lightgbm is not installed: pip install 'aotc[build]' (or pip install lightgbm)"
        ) from None
    return lightgbm


def relevance(ms: float, best: float) -> int:
    """A config's label within its bucket: LEVELS at the best, 0 far from it."""
    steps = math.floor(math.log(max(ms / best, 1.0)) / math.log(1 + STEP))
    return max(0, LEVELS - steps)


@dataclass(frozen=True)
class Model:
    """Trained rankers: higher scores are predicted faster. ``pending``: the compile-free
    ones, for rows whose cubins' features are unknown (none in a model without them)."""

    boosters: tuple[Any, ...]
    text: str
    version: int = VERSION
    pending: tuple[Any, ...] = ()

    def score(self, matrix: Sequence[Sequence[float]]) -> list[float]:
        return _mean(self.boosters, matrix)

    def score_pending(self, matrix: Sequence[Sequence[float]]) -> list[float]:
        """Scores for rows with every cubin's features unknown (``table.rows`` with
        nothing compiled): the compile-free rankers', or the full ones' without them."""
        return _mean(self.pending or self.boosters, matrix)


def _mean(boosters: Sequence[Any], matrix: Sequence[Sequence[float]]) -> list[float]:
    if not matrix:
        return []
    import numpy as np

    x = np.asarray(matrix, dtype=np.float64)
    each = np.asarray([b.predict(x, num_threads=1) for b in boosters])
    return [float(s) for s in each.mean(axis=0)]


def with_pending(full: Model, pending: Model) -> Model:
    """One model of ``full``'s rankers and ``pending``'s, as compile-free ones."""
    text = full.text + pending.text.replace(f"{MEMBER}\n", f"{PENDING}\n")
    return Model(full.boosters, text, full.version, pending.boosters)


def best_first(scores: Sequence[float], spills: Sequence[bool]) -> list[int]:
    """Row indices, the best-scored first, every spilling row after every one that does not
    spill (ties keep the rows' order)."""
    return sorted(range(len(scores)), key=lambda i: (spills[i], -scores[i], i))


def train(
    groups: Sequence[tuple[Sequence[Sequence[float]], Sequence[float]]],
    params: dict[str, Any] | None = None,
    names: Sequence[str] = NAMES,
    weights: Sequence[float] | None = None,
) -> Model:
    """A model from groups of (feature rows, times in ms); ``names``: the rows' columns
    (``features.NAMES`` but for an experiment with more); ``weights``: each group's weight
    in the ranking loss (``dataset.kernel_weights``: every kernel alike), 1 by default."""
    lgb = _lightgbm()
    import numpy as np

    xs: list[Sequence[float]] = []
    ys: list[int] = []
    ws: list[float] = []
    sizes: list[int] = []
    each = weights if weights is not None else [1.0] * len(groups)
    for (rows, times), weight in zip(groups, each, strict=True):
        best = min(times)
        xs += rows
        ys += [relevance(t, best) for t in times]
        ws += [weight] * len(rows)
        sizes.append(len(rows))
    if not sizes:
        raise CostModelUnavailable("no measured bucket to train on (each needs two configs)")
    settings = {**PARAMS, **(params or {})}
    rounds = int(settings.pop("rounds", ROUNDS))
    members = int(settings.pop("members", MEMBERS))
    data = lgb.Dataset(np.asarray(xs, dtype=np.float64), label=np.asarray(ys), group=sizes,
                       weight=np.asarray(ws, dtype=np.float64), feature_name=list(names),
                       params={"verbose": -1})  # fmt: skip
    boosters = tuple(lgb.train({**settings, "seed": int(settings["seed"]) + k}, data,
                               num_boost_round=rounds) for k in range(members))  # fmt: skip
    text = "".join(f"{MEMBER}\n" + b.model_to_string(num_iteration=-1) for b in boosters)
    return Model(boosters, text)


def loads(text: str, where: str) -> Model:
    """A model from its text; refused when its features are not this aotc's, or when it
    has compile-free rankers but no full one."""
    lgb = _lightgbm()
    found: dict[str, list[Any]] = {MEMBER: [], PENDING: []}
    pieces = _MARKERS.split(text)  # [before the first marker, marker, text, marker, ...]
    parts = list(zip(pieces[1::2], pieces[2::2], strict=True))
    if not parts or pieces[0].strip():
        parts.insert(0, (MEMBER, pieces[0]))
    for marker, part in parts:
        try:
            booster = lgb.Booster(model_str=part)
        except Exception as exc:  # LightGBM raises its own LightGBMError on a damaged text
            raise CostModelUnavailable(f"{where}: not a LightGBM model ({exc})") from None
        names = tuple(booster.feature_name())
        if names != NAMES:
            raise CostModelUnavailable(
                f"{where}: its features ({len(names)}) are not this aotc's ({len(NAMES)}); "
                "train it again with `aotc cost-model train`"
            )
        found[marker].append(booster)
    if not found[MEMBER]:
        raise CostModelUnavailable(
            f"{where}: only compile-free rankers, no full one; train it again with "
            "`aotc cost-model train`"
        )
    return Model(tuple(found[MEMBER]), text, pending=tuple(found[PENDING]))


def load_file(path: Path) -> Model:
    try:
        text = path.read_text()
    except OSError as exc:
        raise CostModelUnavailable(f"{path}: cannot read the model ({exc.strerror})") from None
    return loads(text, str(path))
