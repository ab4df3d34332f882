"""The build report: a Markdown file next to the bundle that a person can read, with
heatmap images beside it when kernels were tuned."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from .compile import Compiled
from .plan import Plan, Variant
from .select import Selection
from .targets import label
from .tune.db import TuningDB
from .tune.decide import BENCH, problem
from .tune.heatmap import svg


def render(
    plan: Plan,
    selection: Selection,
    compiled: Mapping[Variant, Compiled],
    bundle_name: str,
    db: TuningDB | None = None,
    images: Path | None = None,
) -> tuple[str, dict[Path, str]]:
    """The report's Markdown, and the heatmap files (path -> SVG text) it links to."""
    r = plan.recipe
    ok = sum(1 for c in compiled.values() if c.ok)
    failed = [c for c in compiled.values() if not c.ok]
    files: dict[Path, str] = {}
    lines = [
        f"# Build report: {r.name} {r.version}",
        "",
        f"- bundle: `{bundle_name}`",
        f"- recipe: `{r.path.name}` (sha256 `{r.sha256[:16]}…`)",
        f"- targets: {', '.join(label(t.name, t.arch, t.sms) for t in r.targets)}",
        f"- plan: {plan.size} variants possible; compiled for the bundle {len(compiled)}: "
        f"{ok} ok, {len(failed)} failed",
        "",
    ]
    for inst in plan.instances:
        choices = selection.choices[inst.key]
        keys = list(inst.kernel.buckets)
        tuned = any(bc.metrics.get("ms") for bc in choices)
        lines += [
            f"## {inst.label}",
            "",
            f"{len(inst.configs)} candidate configs fit, {len(inst.pruned)} pruned. "
            "Variants per config, most specialized first: "
            + "; ".join(f"`{s.label}`" for s in inst.specs),
            "",
        ]
        if tuned:
            lines += [
                "| bucket | config | time | throughput | % of ceiling | vs untuned | "
                "vs baseline | error (tol.) | benchmarks | how |",
                "|---|---|---|---|---|---|---|---|---|---|",
            ]
        else:
            lines += ["| bucket | config | variants | how |", "|---|---|---|---|"]
        for bc in choices:
            b = ", ".join(f"{k}≤{v}" for k, v in zip(keys, bc.bucket, strict=True)) or "all"
            if tuned:
                lines.append(_tuned_row(b, bc.config.label, bc.metrics, bc.how))
            else:
                specs = f"{len(bc.variants)} of {len(inst.specs)}"
                lines.append(f"| {b} | {bc.config.label} | {specs} | {bc.how} |")
        lines.append("")
        if tuned and db is not None and images is not None:
            picture = _heatmap(plan, inst, choices, db)
            if picture is not None:
                dt = "-".join(v for _, v in inst.dtypes)
                name = f"heatmap-{inst.kernel.name}-{inst.target.name}{'-' + dt if dt else ''}.svg"
                files[images / name] = picture
                lines += [f"![time heatmap]({images.name}/{name})", ""]
    if failed:
        lines += ["## Failed variants", "", "| variant | reason |", "|---|---|"]
        for c in sorted(failed, key=lambda c: c.variant.label):
            lines.append(f"| {c.variant.label} | {c.reason.replace('|', '/')} |")
        lines.append("")
    if db is not None:
        fails = [r for r in db if not r.ok]
        if fails:
            lines += ["## Candidates rejected while tuning", "",
                      "| kernel | dtypes | problem | config | kind | reason |",
                      "|---|---|---|---|---|---|"]  # fmt: skip
            for rec in sorted(fails, key=lambda r: r.key)[:200]:
                cfg = " ".join(f"{k}={v}" for k, v in sorted(rec.values.items()))
                lines.append(f"| {rec.kernel} | {dict(rec.dtypes)} | {dict(rec.problem)} | "
                             f"{cfg} | {rec.kind} | {rec.reason.replace('|', '/')} |")  # fmt: skip
            lines.append("")
    pruned = [(i, c, why) for i in plan.instances for c, why in i.pruned]
    if pruned:
        lines += ["## Pruned before compiling", "", "| kernel | config | reason |", "|---|---|---|"]
        for inst, config, why in pruned[:200]:
            lines.append(f"| {inst.label} | {config.label} | {why} |")
        if len(pruned) > 200:
            lines.append(f"| … | {len(pruned) - 200} more | |")
        lines.append("")
    return "\n".join(lines), files


def _fmt(metrics: Mapping[str, Any], key: str, spec: str, suffix: str = "") -> str:
    value = metrics.get(key)
    return "–" if value is None else f"{value:{spec}}{suffix}"


def _tuned_row(bucket: str, config: str, m: Mapping[str, Any], how: str) -> str:
    if not m.get("ms"):
        return f"| {bucket} | {config} | – | – | – | – | – | – | – | {how} |"
    if "tflops" in m:
        thr, pct = f"{m['tflops']:.1f} TFLOP/s", _fmt(m, "pct_peak_flops", ".0f", "%")
    elif "gbps" in m:
        thr, pct = f"{m['gbps']:.0f} GB/s", _fmt(m, "pct_peak_bw", ".0f", "%")
    else:
        thr, pct = "–", "–"
    err = f"{m['error']:.1e} ({m['tolerance']:.0e})" if "error" in m else "unverified"
    return (
        f"| {bucket} | {config} | {m['ms'] * 1000:.1f} µs | {thr} | {pct} | "
        f"{_fmt(m, 'vs_default', '.2f', '×')} | {_fmt(m, 'vs_baseline', '.2f', '×')} | {err} | "
        f"{m.get('benchmarks', '–')} | {how} |"
    )


def _heatmap(plan: Plan, inst: Any, choices: Any, db: TuningDB) -> str | None:
    tuned = [bc for bc in choices if bc.metrics.get("ms")]
    if not tuned:
        return None
    bc = tuned[-1]  # the largest tuned bucket: where configs differ most
    prob = problem(inst, bc.bucket)
    recs = [
        r
        for r in db.select(kernel=inst.kernel.name, dtypes=dict(inst.dtypes), kind=BENCH)
        if dict(r.problem) == prob and r.device == bc.metrics.get("device")
    ]
    title = f"{inst.label}, {dict(zip(inst.kernel.buckets, bc.bucket, strict=True))}"
    return svg(recs, title)
