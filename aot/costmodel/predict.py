"""The cost model in the build: a chooser for buckets no GPU measured, and the order in
which the tuner measures candidates.

The default for every kernel; a recipe opts a kernel out with ``[kernel.tune] predict =
"heuristic"`` (the analytical heuristic, ``aot/heuristic.py``), and ``aotc build
--predict`` or ``AOTC_PREDICT`` sets it for every kernel of a build.

Scoring a bucket needs its candidates' compiled facts (registers, spills, shared memory),
and compiling every candidate of every bucket was most of a build's time. So when the
first bucket of an instance is asked for, the model scores the instance's buckets in two
passes. First, each bucket's candidates with their cubins' features unknown
(``features.FROM_CUBIN``), by the model's compile-free rankers, which were trained on
such rows: the ``PREFILTER`` best of every bucket are compiled at once,
each the variant a call there normally runs (the most specialized one, or the generic
one where that fails: ``table.py``; through the compile cache, which the build's
selection then reads back). A bucket whose compiled candidates all spill or failed
compiles its next ``PREFILTER``, until one does not spill or none is left. Then each
bucket's candidates are scored again, with the facts of every one compiled (for this
bucket or another): its choices are those compiled without spilling in that order, then
those not compiled, then the spilling ones. A spilling config is shipped only when every
candidate compiled spills. Where the model cannot be used (lightgbm missing, a model
file this aotc cannot read, no candidate compiling), the heuristic's order is used and
the reason is recorded in how the bucket was chosen.

Where the tuning database measured some of an instance's buckets and not this one, both
passes' scores are first calibrated on those measurements (``calibrate.py``), and the
bucket is recorded as chosen so ("calibrated on N measured buckets").
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path

from ..compile import Compiled
from ..env import Environment
from ..errors import UsageError
from ..plan import Config, Instance, Plan, Variant
from ..select import HEURISTIC, Chooser, InstanceKey, Pick
from ..tune.decide import Found, problem
from .calibrate import Measured, calibrated
from .model import VERSION, CostModelUnavailable, Model, best_first, load_file
from .table import Rows, compile_for, rows, variant_for, variants_for

COST_MODEL = "cost-model"
PREDICTED = f"predicted (cost model v{VERSION})"
SHIPPED = Path(__file__).parent / "data" / f"model-v{VERSION}.txt"
# candidates per bucket compiled after the compile-free pass, and per widening where all
# of them spill: in a leave-one-kernel-out replay 12 picked about as well as compiling
# every candidate, 8 and fewer worse (the figures: the commit that brought it)
PREFILTER = 12
Bucket = tuple[int, ...]
Results = Mapping[Variant, Compiled]


@functools.cache
def shipped() -> Model:
    """The model aotc ships (package data), loaded once per process."""
    return load_file(SHIPPED)


@functools.cache
def _user_model(path: Path) -> Model:
    try:
        return load_file(path)
    except CostModelUnavailable as exc:  # asked for by name: never a silent fallback
        raise UsageError(f"--cost-model / AOTC_COST_MODEL: {exc}") from None


def model_for(path: Path | None) -> Model:
    """The model a build uses: the file given (``aotc build --cost-model``, AOTC_COST_MODEL;
    a UsageError if it cannot be used), else the one aotc ships."""
    return shipped() if path is None else _user_model(path)


def predicted(path: Path | None, calibrated_on: int = 0) -> str:
    """How a bucket the model chose is recorded: the shipped model's version, or the file;
    and the number of measured buckets its scores were calibrated on, if any."""
    how = PREDICTED if path is None else f"predicted (cost model v{VERSION}: {path.name})"
    if calibrated_on:
        s = "s" if calibrated_on > 1 else ""
        how = f"{how.removesuffix(')')}; calibrated on {calibrated_on} measured bucket{s})"
    return how


def wants(inst: Instance, override: str | None = None) -> bool:
    """Whether the model picks ``inst``'s configs where no GPU measured them and orders its
    tuning: ``override`` (``aotc build --predict``, ``AOTC_PREDICT``) where given, else the
    kernel's ``tune.predict`` (the cost model unless its recipe says "heuristic")."""
    return (override or getattr(inst.kernel.tune, "predict", COST_MODEL)) == COST_MODEL


def unavailable(reason: str) -> str:
    """How a bucket is recorded when the model was asked for and could not be used."""
    return f"{HEURISTIC.removesuffix(')')}; cost model unavailable: {reason})"


def shortlist(model: Model, inst: Instance, bucket: Bucket) -> list[Config]:
    """Every candidate of the bucket, best predicted first from what is known before
    compiling (what each cubin would say unknown), by the compile-free rankers."""
    return _best(first_scores(model, inst, bucket))


def first_scores(model: Model, inst: Instance, bucket: Bucket) -> dict[Config, float]:
    """The compile-free rankers' score of each candidate of the bucket (higher: faster)."""
    rw = rows(inst, bucket, inst.target, inst.candidates(bucket), {}, pending=True)
    return dict(zip(rw.configs, model.score_pending(rw.matrix), strict=True))


def full_scores(
    model: Model, inst: Instance, bucket: Bucket, compiled: Results
) -> tuple[Rows, dict[Config, float]]:
    """The bucket's candidates' rows with the facts of those ``compiled`` (the rest's
    unknown), and the full rankers' score of each."""
    rw = rows(inst, bucket, inst.target, inst.candidates(bucket), compiled, pending=True)
    return rw, dict(zip(rw.configs, model.score(rw.matrix), strict=True))


def _best(scores: Mapping[Config, float]) -> list[Config]:
    """The configs best-scored first (ties keep their order)."""
    configs = list(scores)
    return [configs[i] for i in best_first(list(scores.values()), [False] * len(configs))]


def calibrated_at(
    inst: Instance, bucket: Bucket, scores: Mapping[Bucket, Mapping[Config, float]],
    timed: Mapping[Bucket, Mapping[Config, float]],
) -> dict[Config, float]:  # fmt: skip
    """The bucket's ``scores``, calibrated on the instance's measured buckets (``timed``:
    each one's timed configs, ms; their ``scores`` scored as this bucket's are); as given
    for a bucket measured itself."""
    if bucket in timed:
        return dict(scores[bucket])
    measured = [Measured(problem(inst, b), t, scores[b]) for b, t in timed.items()]
    return calibrated(problem(inst, bucket), scores[bucket], measured)


def first_pass(plan: Plan) -> int | None:
    """How many variants a CPU-only build compiles for the model to choose from, before
    any bucket whose compiled candidates all spill widens its shortlist: the most
    specialized variant of each bucket's ``PREFILTER`` best, over the kernels the model
    picks for. None where the model cannot be used (``aotc plan`` says so)."""
    try:
        model = shipped()
    except CostModelUnavailable:
        return None
    return len({variant_for(inst, c, b) for inst in plan.instances if wants(inst)
                for b in inst.buckets for c in shortlist(model, inst, b)[:PREFILTER]})  # fmt: skip


def _settled(inst: Instance, bucket: Bucket, kept: list[Config], compiled: Results) -> bool:
    """Whether one of ``kept`` compiled without spilling."""
    return not all(rows(inst, bucket, inst.target, kept, compiled).spills)


def compile_shortlists(
    plan: Plan, inst: Instance, short: Mapping[Bucket, list[Config]], env: Environment
) -> Results:
    """Compile the first ``PREFILTER`` of each bucket's shortlist, all buckets' at once,
    and ``PREFILTER`` more for each bucket whose compiled ones all spill or failed, until
    one does not or its shortlist is spent."""
    compiled: dict[Variant, Compiled] = {}
    todo, k = list(short), 0
    while todo:
        wanted = [(inst, c, b) for b in todo for c in short[b][k : k + PREFILTER]]
        what = f"cost model: compile {inst.label}'s {'next ' if k else ''}shortlists"
        compiled.update(compile_for(plan, wanted, env, what))
        k += PREFILTER
        todo = [b for b in todo
                if k < len(short[b]) and not _settled(inst, b, short[b][:k], compiled)]  # fmt: skip
    return compiled


def rescored(
    inst: Instance, bucket: Bucket, rw: Rows, scores: Mapping[Config, float], compiled: Results
) -> list[Config]:
    """The bucket's candidates (``rw``, ``full_scores``'s rows) by ``scores``: those
    compiled without spilling first, then those not compiled, then the spilling ones; none
    where no candidate compiled."""
    known = {c for c in rw.configs if variant_for(inst, c, bucket) in compiled}
    if not known:
        return []

    def rank(i: int) -> tuple[int, float, int]:
        c = rw.configs[i]
        return (1 if c not in known else 2 if rw.spills[i] else 0), -scores[c], i

    return [rw.configs[i] for i in sorted(range(len(rw.configs)), key=rank)]


def _timed(inst: Instance, found: Found) -> dict[Bucket, dict[Config, float]]:
    """What the database timed at the instance's measured buckets, config by config."""
    by_id = {c.id: c for c in inst.configs}
    return {b: {by_id[i]: ms for i, ms in o.timed.items() if i in by_id}
            for b, o in found.get(inst.key, {}).items()}  # fmt: skip


def chooser(plan: Plan, env: Environment, fallback: Chooser, found: Found | None = None) -> Chooser:
    """``fallback`` for kernels that do not ask for the model (``env.predict`` overrides
    what each asks); the model's order for those that do, compiling each such instance's
    shortlists on first use. ``found``: what the tuning database decided
    (``decide.outcomes``); a bucket it did not measure, of an instance it measured at
    others, takes the model's scores calibrated on those measurements."""
    if not any(wants(inst, env.predict) for inst in plan.instances):
        return fallback
    orders: dict[tuple[InstanceKey, Bucket], list[Pick] | str] = {}

    def prepare(inst: Instance) -> None:
        try:
            model = model_for(env.cost_model)
        except CostModelUnavailable as exc:
            orders.update({(inst.key, b): str(exc) for b in inst.buckets})
            return
        timed = _timed(inst, found or {})
        if all(b in timed for b in inst.buckets):  # every bucket measured: none to calibrate
            timed = {}
        # each bucket scored once per pass; a bucket the database did not measure is
        # calibrated on those it did, scored alike
        first = {b: first_scores(model, inst, b) for b in inst.buckets}
        short = {b: _best(calibrated_at(inst, b, first, timed)) for b in inst.buckets}
        compiled = compile_shortlists(plan, inst, short, env)
        full = {b: full_scores(model, inst, b, compiled) for b in inst.buckets}
        # the full rankers' scores are on the same footing only where a cubin's facts are
        # known: their calibration takes the timed configs this build compiled
        known = {b: {c: ms for c, ms in t.items() if variant_for(inst, c, b) in compiled}
                 for b, t in timed.items()}  # fmt: skip
        calibrated_on = sum(len(t) >= 2 for t in timed.values())  # calibrate skips the rest
        scored = {b: sc for b, (_, sc) in full.items()}
        for b in inst.buckets:
            how = predicted(env.cost_model, 0 if b in timed else calibrated_on)
            scores = calibrated_at(inst, b, scored, known)
            order = rescored(inst, b, full[b][0], scores, compiled)
            orders[(inst.key, b)] = [Pick(c, how) for c in order] or "no candidate compiled"

    def choose(inst: Instance, bucket: Bucket) -> list[Pick]:
        if not wants(inst, env.predict):
            return fallback(inst, bucket)
        if (inst.key, bucket) not in orders:
            prepare(inst)
        picks = orders[(inst.key, bucket)]
        if isinstance(picks, str):
            return [Pick(p.config, unavailable(picks), p.metrics) for p in fallback(inst, bucket)]
        return picks

    return choose


@dataclass(frozen=True)
class Ordered:
    """A bucket's candidates in the model's order, best first, and the scores behind it
    (higher: predicted faster; none for a candidate without a row, which comes last)."""

    configs: list[Config]
    scores: dict[Config, float]


def tuning_order(
    inst: Instance,
    bucket: tuple[int, ...],
    ready: Callable[[Variant], Compiled | None],
    model_path: Path | None = None,
    override: str | None = None,
) -> Ordered | None:
    """For the tuner: the bucket's candidates in the model's order, with their scores, or
    None where the model cannot be used (the tuner keeps the heuristic's order). It never
    waits for a compile: ``ready`` gives a variant's result if its compile has finished,
    else None, and a candidate not compiled yet is scored with its cubin's features
    unknown (the first bucket of an instance, measured while the rest compiles, mostly
    so): with none compiled, by the compile-free rankers, as the build's first pass; with
    some, by the full ones. A candidate with no row (its specialized variant failed,
    its generic one still compiling) comes last. Spilling candidates are not demoted:
    the GPU measures them, and what it measures decides. ``model_path`` as in
    ``model_for``; ``override`` as in ``wants``."""
    if not wants(inst, override):
        return None
    try:
        model = model_for(model_path)
    except CostModelUnavailable:
        return None
    candidates = list(inst.candidates(bucket))
    compiled: dict[Variant, Compiled] = {}
    for c in candidates:
        for v in dict.fromkeys(variants_for(inst, c, bucket)):
            if (r := ready(v)) is not None:
                compiled[v] = r
    rw = rows(inst, bucket, inst.target, candidates, compiled, pending=True)
    score = model.score if compiled else model.score_pending
    scores = dict(zip(rw.configs, score(rw.matrix), strict=True))
    first = _best(scores)
    order = first + [c for c in candidates if c not in scores]
    return Ordered(order, scores) if order else None
