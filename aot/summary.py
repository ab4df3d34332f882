"""``aotc plan``: the build matrix in words, before anything is compiled."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence

from .costmodel.predict import PREFILTER, first_pass, wants
from .inspect import model_buckets
from .kernels import cached_ranker
from .plan import Instance, Plan, Spec, configs_of, plan_size
from .recipe import KernelRecipe, ModelRecipe
from .select import heuristic_chooser, wanted_variants
from .targets import label


def describe_plan(plan: Plan) -> str:
    r = plan.recipe
    out = [
        f"recipe {r.name} {r.version} ({r.shown})",
        "targets: " + ", ".join(label(t.name, t.arch, t.sms) for t in r.targets),
        "",
    ]
    by_kernel: dict[str, list[Instance]] = defaultdict(list)
    for inst in plan.instances:
        by_kernel[inst.kernel.name].append(inst)
    for insts in by_kernel.values():
        out += describe_kernel(insts)
    if r.model is not None:
        out += _describe_model(r.model, [t.name for t in r.targets])
    for op in r.ops:
        out += [f"op {op.name}: each bucket routed to the fastest of {', '.join(op.kernels)} "
                f"where a GPU measured them all, else to {op.kernels[0]}", ""]  # fmt: skip
    cap = (f"plan size: {sum(n for n, _ in plan_size(r).values()):,} (bucket, variant) pairs, "
           f"of a cap of {r.max_plan_size:,} ([bundle].max_plan_size)")  # fmt: skip
    if not plan.instances and r.model is not None:
        return "\n".join([*out, cap])  # no kernels: no kernel matrix
    heuristic = len(wanted_variants(plan, heuristic_chooser(cached_ranker(plan)), {}))
    out.append(f"matrix: {plan.size} variants in all (what a tuner compiles)")
    out.append(f"without a GPU: {_predicting(plan)}; with --predict heuristic, {heuristic} "
               "(the heuristic's pick per bucket, before any fallback for failures)")  # fmt: skip
    out.append(cap)
    return "\n".join(out)


def _predicting(plan: Plan) -> str:
    """What a CPU-only build compiles for the cost model, for the kernels it picks for."""
    if not any(wants(inst) for inst in plan.instances):
        return "every kernel's recipe asks for the heuristic (predict)"
    scored = first_pass(plan)
    if scored is None:
        return "the learned cost model cannot be used here (lightgbm not installed)"
    return (f"{scored} variants compiled for the learned cost model to choose from (the "
            f"{PREFILTER} candidates of each bucket it rates best before compiling), then "
            "those it picks packed")  # fmt: skip


def describe_kernel(insts: list[Instance]) -> list[str]:
    """One kernel's part of the matrix: what the recipe and the kernel's own decorators
    gave (inferred types, autotune's configs, heuristics as derived values), then per
    target what fits, and the variants."""
    kr = insts[0].kernel
    layers = " ".join(f"@triton.{x}" for x in _layers(kr))
    out = [f"kernel {kr.name} ({kr.source_text}{', ' + layers if layers else ''})"]
    inferred = set(kr.inferred)
    sig = ", ".join(f"{p}: {t}{'*' if p in inferred else ''}" for p, t in kr.signature.items())
    note = " (* inferred from inputs)" if inferred else ""
    out.append(f"  signature: {sig}{note}")
    if kr.dtypes:
        out.append("  dtypes: " + ", ".join(f"{k} ∈ {list(v)}" for k, v in kr.dtypes.items()))
    if kr.optional:
        out.append("  optional (built as passed and as None): " + ", ".join(kr.optional))
    if kr.always_none:
        out.append("  arguments inputs always passes as None (compiled in as None; a call "
                   "must pass None): " + ", ".join(kr.always_none))  # fmt: skip
    if kr.descriptors:
        out.append(
            "  TMA descriptors (block shapes): "
            + ", ".join(
                f"{n} [{', '.join(e.text for e in block)}]" for n, block in kr.descriptors.items()
            )
        )
    if kr.call:
        out.append("  call values: " + ", ".join(f"{n} = {c.text}" for n, c in kr.call.items()))
    keys = ", ".join(f"{k}: {list(v)}{' (listed size)' if k in kr.listed else ''}"
                     for k, v in kr.buckets.items()) or "none"  # fmt: skip
    out.append(f"  buckets ({len(insts[0].buckets)}): {keys}")
    where = "@triton.autotune's configs" if kr.configs else "the product of space"
    out.append(f"  search space: {len(configs_of(kr))} configs ({where})")
    if kr.tune.first:
        out.append(f"  measured first in every bucket: {len(kr.tune.first)} configs (tune.first)")
    if kr.tune.draws > 1:
        out.append(f"  each config timed over {kr.tune.draws} draws of inputs (tune.draws)")
    for name, e in kr.derived.items():
        how = "@triton.heuristics" if name in kr.heuristics else "derived"
        out.append(f"  per call: {name} = {e.text} ({how})")
    seen: set[str] = set()
    for inst in insts:
        if inst.target.name not in seen:
            seen.add(inst.target.name)
            out.append(_fit_line(inst))
    specs = insts[0].specs
    out.append(f"  specializations: {' | '.join(s.label for s in specs)}")
    out += _notes(kr, specs)
    total = sum(len(list(i.variants())) for i in insts)
    extra = " × derived values" if kr.derived else ""
    out.append(f"  variants: {total} = Σ over {len(insts)} (target, binding) of configs{extra} × "
               f"{len(specs)} specializations")  # fmt: skip
    out.append("")
    return out


def _notes(kr: KernelRecipe, specs: Sequence[Spec]) -> list[str]:
    """What the recipe leaves slower than it could be, silently: said at plan time."""
    out = []
    unaligned = unaligned_strides(kr, specs)
    if unaligned:
        out.append(f"  note: no variant assumes {', '.join(unaligned)} divisible by 16, so loads "
                   "that step over them are not vectorised; give them 16 in specializations "
                   "unless callers pass other strides")  # fmt: skip
    once = sizes_tuned_once(kr)
    if once:
        values = ", ".join(f"{n} = {kr.sizes[n]}" for n in once)
        out.append(f"  note: the grid reads {values} per call, tuned at that value alone; a "
                   "call with another runs the configs chosen for it (correctly, not always "
                   "the fastest): make it a bucket key, or list its values in sizes")  # fmt: skip
    return out


def sizes_tuned_once(kr: KernelRecipe) -> list[str]:
    """Call values the grid reads (a batch read off a tensor's shape: what varies from
    call to call) that are no bucket key and have one value in ``sizes``: the build tunes
    every bucket at that value, while a call may bring any other (mamba's bmm_chunk reads
    its batch so). Kernel arguments with one size (a weight's N) are left out: they are
    usually fixed by the model."""
    read = set().union(*(g.names for g in kr.grid))
    return sorted(n for n in read & kr.sizes.keys() & kr.call.keys() if n not in kr.buckets)


def unaligned_strides(kr: KernelRecipe, specs: Sequence[Spec]) -> list[str]:
    """Integer parameters the recipe's ``strides`` name as a stride of some tensor and that
    no variant assumes divisible by 16 (or equal to 1). Triton vectorises a tile's loads
    only when it knows each row starts aligned, so such a stride costs the kernel's loads
    their width (several times the time of a memory-bound kernel), silently. Bucket keys
    are left out: they vary by design."""
    ints = {p for p, t in kr.signature.items() if not t.startswith("*")}
    named = {e.text for dims in kr.strides.values() for e in dims if e is not None}
    assumed = {arg for spec in specs for arg, _ in spec.assume}
    return sorted((named & ints) - assumed - set(kr.buckets))


def _layers(kr: KernelRecipe) -> list[str]:
    layers = ["autotune"] if kr.autotune is not None else []
    return layers + (["heuristics"] if kr.heuristics else [])


def _fit_line(inst: Instance) -> str:
    reasons: dict[str, int] = defaultdict(int)
    for _, why in inst.pruned:
        reasons[why.split(" on ")[0]] += 1
    detail = "; ".join(f"{n}× {w}" for w, n in sorted(reasons.items()))
    line = f"  {inst.target.name}: {len(inst.configs)} fit, {len(inst.pruned)} pruned"
    line += f" ({detail})" if detail else ""
    if inst.allowed:
        line += (f"; {len(inst.allowed)} buckets allow fewer (constraints on sizes, "
                 "prune_configs_by)")  # fmt: skip
    return line


def _describe_model(mr: ModelRecipe, targets: list[str]) -> list[str]:
    """The ``[model]``'s compilations: one per (bucket, mode), on each target whose GPU
    kind the build machine has."""
    n = len(mr.bucket_grid)
    return [
        f"model {mr.name} ({mr.source_text}, {mr.dtype}, backend {mr.backend}, select {mr.select})",
        f"  buckets ({n}): {model_buckets(mr.dims, mr.buckets, mr.pad)}",
        f"  modes: {', '.join(mr.modes)}",
        f"  compilations: {n * len(mr.modes)} = {n} buckets × {len(mr.modes)} modes, on each "
        f"target whose GPU kind the build machine has ({', '.join(targets)})",
        "",
    ]
