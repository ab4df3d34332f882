"""The cost model in the build: a chooser for buckets no GPU measured, and the order in
which the tuner measures candidates.

Opt-in per kernel (``[kernel.tune] predict = "cost-model"``) while the model's CPU-only
picks are being checked on GPUs; the default stays the analytical heuristic, so bundles
of recipes that do not ask are unchanged byte for byte.

Scoring a bucket needs every candidate's compiled facts (registers, spills, shared
memory), so the first bucket of an instance compiles, for each of its candidates, the
variant a call there normally runs: the most specialized one, or the generic one where
that fails (``table.py``; through the compile cache, which the build's selection then
reads back). The bucket's choices are its candidates in the model's order, those that
compile without spilling first: a spilling config is shipped only when every candidate
spills. Where the model cannot be used (lightgbm missing, a model file this aotc cannot
read, no candidate compiling), the heuristic's order is used and the reason is recorded
in how the bucket was chosen.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Mapping
from pathlib import Path

from ..compile import Compiled
from ..env import Environment
from ..errors import UsageError
from ..plan import Config, Instance, Plan, Variant
from ..select import HEURISTIC, Chooser, Pick
from .model import VERSION, CostModelUnavailable, Model, best_first, load_file
from .table import compile_for, compiled_for, rows

COST_MODEL = "cost-model"
PREDICTED = f"predicted (cost model v{VERSION})"
SHIPPED = Path(__file__).parent / "data" / f"model-v{VERSION}.txt"


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


def predicted(path: Path | None) -> str:
    """How a bucket the model chose is recorded: the shipped model's version, or the file."""
    return PREDICTED if path is None else f"predicted (cost model v{VERSION}: {path.name})"


def wants(inst: Instance, override: str | None = None) -> bool:
    """Whether the model picks ``inst``'s configs: ``override`` (``aotc build --predict``,
    for the buckets no GPU measured) where given, else the kernel's ``tune.predict``."""
    return (override or getattr(inst.kernel.tune, "predict", "heuristic")) == COST_MODEL


def unavailable(reason: str) -> str:
    """How a bucket is recorded when the model was asked for and could not be used."""
    return f"{HEURISTIC.removesuffix(')')}; cost model unavailable: {reason})"


def ordered(
    model: Model,
    inst: Instance,
    bucket: tuple[int, ...],
    compiled: Mapping[Variant, Compiled],
    *,
    spills_last: bool = True,
) -> list[Config]:
    """The bucket's candidates that compiled, best predicted first; with ``spills_last``
    (what ships without a GPU), the spilling ones after every one that does not spill."""
    rw = rows(inst, bucket, inst.target, inst.candidates(bucket), compiled)
    if not rw.configs:
        return []
    demote = rw.spills if spills_last else (False,) * len(rw.configs)
    return [rw.configs[i] for i in best_first(model.score(rw.matrix), demote)]


def chooser(plan: Plan, env: Environment, fallback: Chooser) -> Chooser:
    """``fallback`` for kernels that do not ask for the model (``env.predict`` overrides
    what each asks); the model's order for those that do, compiling each such instance's
    candidates on first use."""
    if not any(wants(inst, env.predict) for inst in plan.instances):
        return fallback
    orders: dict[tuple[object, ...], list[Config] | str] = {}
    how = predicted(env.cost_model)

    def prepare(inst: Instance) -> None:
        try:
            model = model_for(env.cost_model)
        except CostModelUnavailable as exc:
            orders.update({(inst.key, b): str(exc) for b in inst.buckets})
            return
        wanted = [(inst, c, b) for b in inst.buckets for c in inst.candidates(b)]
        compiled = compile_for(plan, wanted, env)
        for b in inst.buckets:
            configs = ordered(model, inst, b, compiled)
            orders[(inst.key, b)] = configs or "no candidate compiled"

    def choose(inst: Instance, bucket: tuple[int, ...]) -> list[Pick]:
        if not wants(inst, env.predict):
            return fallback(inst, bucket)
        if (inst.key, bucket) not in orders:
            prepare(inst)
        found = orders[(inst.key, bucket)]
        if isinstance(found, str):
            return [Pick(p.config, unavailable(found), p.metrics) for p in fallback(inst, bucket)]
        return [Pick(c, how) for c in found]

    return choose


def tuning_order(
    inst: Instance,
    bucket: tuple[int, ...],
    result: Callable[[Variant], Compiled],
    model_path: Path | None = None,
) -> list[Config] | None:
    """For the tuner: the bucket's candidates that compiled, in the model's order, or None
    where the model cannot be used (the tuner keeps the heuristic's order). Spilling
    candidates are not demoted here: the GPU measures them, and what it measures decides.
    ``result`` compiles a variant, or waits for its compile; ``model_path`` as in
    ``model_for``."""
    if not wants(inst):
        return None
    try:
        model = model_for(model_path)
    except CostModelUnavailable:
        return None
    compiled: dict[Variant, Compiled] = {}
    for c in inst.candidates(bucket):
        compiled.update(compiled_for(inst, c, bucket, result))
    return ordered(model, inst, bucket, compiled, spills_last=False) or None
