"""``aotc plan``: the build matrix in words, before anything is compiled."""

from __future__ import annotations

from collections import defaultdict

from .inspect import model_buckets
from .kernels import cached_ranker
from .plan import Instance, Plan, plan_size
from .recipe import ModelRecipe
from .select import heuristic_chooser, wanted_variants
from .targets import label


def describe_plan(plan: Plan) -> str:
    r = plan.recipe
    out = [
        f"recipe {r.name} {r.version} ({r.path})",
        "targets: " + ", ".join(label(t.name, t.arch, t.sms) for t in r.targets),
        "",
    ]
    by_kernel: dict[str, list[Instance]] = defaultdict(list)
    for inst in plan.instances:
        by_kernel[inst.kernel.name].append(inst)
    for name, insts in by_kernel.items():
        kr = insts[0].kernel
        n_buckets = len(insts[0].buckets)
        space = 1
        for values in kr.space.values():
            space *= len(values)
        out.append(f"kernel {name} ({kr.source_text})")
        if kr.dtypes:
            out.append("  dtypes: " + ", ".join(f"{k} ∈ {list(v)}" for k, v in kr.dtypes.items()))
        keys = ", ".join(f"{k}: {list(v)}" for k, v in kr.buckets.items()) or "none"
        out.append(f"  buckets ({n_buckets}): {keys}")
        out.append(f"  search space: {space} configs")
        seen_targets: set[str] = set()
        for inst in insts:
            if inst.target.name in seen_targets:
                continue
            seen_targets.add(inst.target.name)
            reasons: dict[str, int] = defaultdict(int)
            for _, why in inst.pruned:
                reasons[why.split(" on ")[0]] += 1
            detail = "; ".join(f"{n}× {w}" for w, n in sorted(reasons.items()))
            out.append(
                f"  {inst.target.name}: {len(inst.configs)} fit, {len(inst.pruned)} pruned"
                + (f" ({detail})" if detail else "")
            )
        specs = insts[0].specs
        out.append(f"  specializations: {' | '.join(s.label for s in specs)}")
        total = sum(len(i.configs) * len(i.specs) for i in insts)
        out.append(
            f"  variants: {total} = Σ over {len(insts)} (target, dtypes) of configs × "
            f"{len(specs)} specializations"
        )
        out.append("")
    if r.model is not None:
        out += _describe_model(r.model, [t.name for t in r.targets])
    cap = (f"plan size: {sum(n for n, _ in plan_size(r).values()):,} (bucket, variant) pairs, "
           f"of a cap of {r.max_plan_size:,} ([bundle].max_plan_size)")  # fmt: skip
    if not plan.instances and r.model is not None:
        return "\n".join([*out, cap])  # no kernels: no kernel matrix
    heuristic = len(wanted_variants(plan, heuristic_chooser(cached_ranker(plan)), {}))
    out.append(f"matrix: {plan.size} variants in all (what a tuner compiles)")
    out.append(
        f"without a GPU: {heuristic} variants (the heuristic's pick per bucket, before any "
        "fallback for failures)"
    )
    out.append(cap)
    return "\n".join(out)


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
