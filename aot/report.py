"""The build report: a Markdown file next to the bundle that a person can read. It opens
with the recipe and a line or so from each product, then each product's section; the
kernel product's section (here) has a table per instance, with heatmap images beside the
report when kernels were tuned."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from .compile import Compiled
from .plan import Instance, Plan, Variant
from .product import ReportSection
from .recipe import Recipe
from .select import Chosen, Selection
from .targets import label
from .tune.db import TuningDB
from .tune.decide import BENCH, problem
from .tune.heatmap import svg

LISTED = 200  # rows at most in the tables of failures and pruned configs


def document(recipe: Recipe, bundle_name: str, sections: Sequence[ReportSection]) -> str:
    """The report: its opening list, then each product's section."""
    r = recipe
    lines = [
        f"# Build report: {r.name} {r.version}",
        "",
        f"- bundle: `{bundle_name}`",
        f"- recipe: `{r.path.name}` (sha256 `{r.sha256[:16]}…`)",
        f"- targets: {', '.join(label(t.name, t.arch, t.sms) for t in r.targets)}",
        *(f"- {line}" for s in sections for line in s.summary),
        "",
    ]
    text = "\n".join(lines)
    for s in sections:
        if s.body:
            text = text.rstrip("\n") + "\n\n" + s.body
    return text


def kernel_section(
    plan: Plan,
    selection: Selection,
    compiled: Mapping[Variant, Compiled],
    db: TuningDB | None = None,
    images: Path | None = None,
    ops: Sequence[str] = (),
) -> ReportSection:
    """The kernels' section, and the heatmap files (path -> SVG text) it links to
    (``ops``: the ops' tables, aot/ops.py ``report_lines``, after the kernels)."""
    ok = sum(1 for c in compiled.values() if c.ok)
    failed = [c for c in compiled.values() if not c.ok]
    files: dict[Path, str] = {}
    lines: list[str] = []
    for inst in plan.instances:
        lines += _instance(plan, inst, selection.choices[inst.key], db, images, files)
    lines += ops
    lines += _failed(failed)
    lines += _rejected(db)
    lines += _pruned(plan)
    summary = (f"plan: {plan.size} variants possible; compiled for the bundle {len(compiled)}: "
               f"{ok} ok, {len(failed)} failed")  # fmt: skip
    return ReportSection((summary,), "\n".join(lines), files)


def _instance(
    plan: Plan, inst: Instance, choices: Sequence[Chosen], db: TuningDB | None,
    images: Path | None, files: dict[Path, str],
) -> list[str]:  # fmt: skip
    """An instance's table of buckets, and its heatmap when it was tuned."""
    keys = list(inst.kernel.buckets)
    tuned = any(bc.metrics.get("ms") for bc in choices)
    lines = [
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
            specs = f"{len(bc.variants)} of {len(list(inst.variants((bc.config,))))}"
            lines.append(f"| {b} | {bc.config.label} | {specs} | {bc.how} |")
    lines.append("")
    if tuned and db is not None and images is not None:
        picture = _heatmap(plan, inst, choices, db)
        if picture is not None:
            dt = "-".join(v for _, v in inst.dtypes)
            name = f"heatmap-{inst.kernel.name}-{inst.target.name}{'-' + dt if dt else ''}.svg"
            files[images / name] = picture
            lines += [f"![time heatmap]({images.name}/{name})", ""]
    return lines


def _failed(failed: Sequence[Compiled]) -> list[str]:
    if not failed:
        return []
    lines = ["## Failed variants", "", "| variant | reason |", "|---|---|"]
    for c in sorted(failed, key=lambda c: c.variant.label):
        lines.append(f"| {c.variant.label} | {c.reason.replace('|', '/')} |")
    return [*lines, ""]


def _rejected(db: TuningDB | None) -> list[str]:
    fails = [r for r in db if not r.ok] if db is not None else []
    if not fails:
        return []
    lines = ["## Candidates rejected while tuning", "",
             "| kernel | dtypes | problem | config | kind | reason |",
             "|---|---|---|---|---|---|"]  # fmt: skip
    for rec in sorted(fails, key=lambda r: r.key)[:LISTED]:
        cfg = " ".join(f"{k}={v}" for k, v in sorted(rec.values.items()))
        lines.append(f"| {rec.kernel} | {dict(rec.dtypes)} | {dict(rec.problem)} | "
                     f"{cfg} | {rec.kind} | {rec.reason.replace('|', '/')} |")  # fmt: skip
    return [*lines, ""]


def _pruned(plan: Plan) -> list[str]:
    pruned = [(i, c, why) for i in plan.instances for c, why in i.pruned]
    if not pruned:
        return []
    lines = ["## Pruned before compiling", "", "| kernel | config | reason |", "|---|---|---|"]
    for inst, config, why in pruned[:LISTED]:
        lines.append(f"| {inst.label} | {config.label} | {why} |")
    if len(pruned) > LISTED:
        lines.append(f"| … | {len(pruned) - LISTED} more | |")
    return [*lines, ""]


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


def _heatmap(plan: Plan, inst: Instance, choices: Sequence[Chosen], db: TuningDB) -> str | None:
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
