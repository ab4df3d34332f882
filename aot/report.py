"""The build report: a Markdown file next to the bundle that a person can read."""

from __future__ import annotations

from collections.abc import Mapping

from .compile import Compiled
from .plan import Plan, Variant
from .select import Selection
from .targets import label


def render(
    plan: Plan, selection: Selection, compiled: Mapping[Variant, Compiled], bundle_name: str
) -> str:
    r = plan.recipe
    ok = sum(1 for c in compiled.values() if c.ok)
    failed = [c for c in compiled.values() if not c.ok]
    lines = [
        f"# Build report: {r.name} {r.version}",
        "",
        f"- bundle: `{bundle_name}`",
        f"- recipe: `{r.path.name}` (sha256 `{r.sha256[:16]}…`)",
        f"- targets: {', '.join(label(t.name, t.arch, t.sms) for t in r.targets)}",
        f"- plan: {plan.size} variants possible; compiled {len(compiled)}: {ok} ok, "
        f"{len(failed)} failed",
        "",
    ]
    for inst in plan.instances:
        choices = selection.choices[inst.key]
        keys = list(inst.kernel.buckets)
        lines += [
            f"## {inst.label}",
            "",
            f"{len(inst.configs)} candidate configs fit, {len(inst.pruned)} pruned; "
            "variants per config, most specialized first: "
            + "; ".join(f"`{s.label}`" for s in inst.specs),
            "",
            "| bucket | config | variants | how |",
            "|---|---|---|---|",
        ]
        for bc in choices:
            b = ", ".join(f"{k}≤{v}" for k, v in zip(keys, bc.bucket, strict=True)) or "all"
            specs = f"{len(bc.variants)} of {len(inst.specs)}"
            lines.append(f"| {b} | {bc.config.label} | {specs} | {bc.how} |")
        lines.append("")
    if failed:
        lines += ["## Failed variants", "", "| variant | reason |", "|---|---|"]
        for c in sorted(failed, key=lambda c: c.variant.label):
            lines.append(f"| {c.variant.label} | {c.reason.replace('|', '/')} |")
        lines.append("")
    pruned = [(i, c, why) for i in plan.instances for c, why in i.pruned]
    if pruned:
        lines += ["## Pruned before compiling", "", "| kernel | config | reason |", "|---|---|---|"]
        for inst, config, why in pruned[:200]:
            lines.append(f"| {inst.label} | {config.label} | {why} |")
        if len(pruned) > 200:
            lines.append(f"| … | {len(pruned) - 200} more | |")
        lines.append("")
    return "\n".join(lines)
