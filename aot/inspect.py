"""``aotc inspect`` and ``aotc verify``: read a bundle without a GPU."""

from __future__ import annotations

import hashlib
import itertools
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

from loader.errors import BundleError
from loader.format import BundleFile
from loader.manifest import (
    Manifest,
    ModelSpec,
    PipelineSpec,
    VariantSpec,
    describe_shard,
    serving_label,
)
from loader.op import OpSpec

from .errors import BadBundle
from .sign import signed_line
from .targets import label


def _open(path: Path) -> tuple[BundleFile, Manifest]:
    """The archive layer opens, checks and decodes it (loader/format.py)."""
    try:
        bf = BundleFile(path)
    except BundleError as exc:
        raise BadBundle(str(exc)) from None
    return bf, bf.spec


def verify(path: Path) -> str:
    """Check the header, the manifest (typed, every entry it names present) and every
    entry's hashes; the summary line on success."""
    bf, manifest = _open(path)
    with bf:
        try:
            names = bf.verify()
        except BundleError as exc:
            raise BadBundle(str(exc)) from None
    digest = hashlib.sha256(path.read_bytes()).hexdigest()
    partial = f" (partial: {describe_shard(manifest.shard)})" if manifest.shard else ""
    return f"OK {path}: {len(names)} entries verified, sha256 {digest}{partial}"


def inspect(path: Path) -> str:
    bf, m = _open(path)
    with bf:
        stored = sum(e.size for e in bf.entries.values())
        raw = sum(e.raw_size for e in bf.entries.values())
        size = path.stat().st_size
        signed = signed_line(bf)
    p = m.provenance
    out = [
        f"{m.name} {m.version}  ({path.name}, {size / 1024:.1f} KiB)",
        f"  built by aotc {p.get('aotc')} with Triton {p.get('triton')} from {p.get('recipe')} "
        f"(sha256 {str(p.get('recipe_sha256'))[:12]})",
        f"  payload: {_entries(bf.entries)}, {raw / 1024:.1f} KiB raw, "
        f"{stored / 1024:.1f} KiB compressed, manifest {bf.manifest_bytes_len / 1024:.1f} KiB",
        "  targets: " + ", ".join(label(t.name, t.arch, t.sms) for t in m.targets),
        signed,
    ]
    if m.shard is not None:
        out.append(f"  partial bundle ({describe_shard(m.shard)}): combine with `aotc merge`")
    out.append("")
    for k in m.kernels:
        sig = ", ".join(f"{p.name}: {p.type}" for p in k.params)
        out.append(f"kernel {k.name}({sig})")
        if k.dtype_vars:
            out.append(
                "  dtypes: " + ", ".join(f"{v} ∈ {list(t)}" for v, t in k.dtype_vars.items())
            )
        grid = ", ".join(g for g in k.grid if g != "1") or "1"
        out.append(f"  grid: ({grid})")
        if k.call:
            out.append("  call values: " + ", ".join(f"{c.name} = {c.text}" for c in k.call))
        out += [f"  per call: {d.name} = {d.expr}" for d in k.derived]
        for key, bounds in zip(k.bucket_keys, k.buckets, strict=True):
            out.append(f"  buckets on {key}: {list(bounds)}")
        for inst in k.instances:
            dt = ", ".join(f"{a}={b}" for a, b in inst.dtypes.items())
            how = Counter(c.how for c in inst.choices)
            out.append(
                f"  {inst.target}{' [' + dt + ']' if dt else ''}: {len(inst.variants)} variants; "
                + ", ".join(f"{n} buckets {h}" for h, n in sorted(how.items()))
            )
            for c in inst.choices:
                bound = "≤" + f"{','.join(str(x) for x in c.bucket) or '*':>6}"
                for j, line in enumerate(_configs([inst.variants[i] for i in c.variants])):
                    out.append(f"    {bound if j == 0 else ' ' * len(bound)}  {line}")
        out.append("")
    for pipe in m.pipelines:
        out.extend(_pipeline(pipe))
    for op in m.ops:
        out.extend(_op(op))
    if m.model is not None:
        out.extend(_model(m.model))
    out.extend(_failed(m.build.get("failed", [])))
    return "\n".join(out).rstrip() + "\n"


def _failed(failed: Sequence[Mapping[str, Any]]) -> list[str]:
    if not failed:
        return []
    out = [f"{len(failed)} variants failed to compile or fit:"]
    out += [f"  {f['kernel']} {f['target']} {f['config']} ({f['spec']}): {f['reason']}"
            for f in failed[:20]]  # fmt: skip
    if len(failed) > 20:
        out.append(f"  ... and {len(failed) - 20} more (see the build report)")
    return out


def _entries(entries: Mapping[str, object]) -> str:
    models = sum(1 for n in entries if n.startswith("model/"))
    text = f"{len(entries) - models} cubins"
    return text + (f" + {models} model artifacts" if models else "")


def model_buckets(dims: Sequence[str], buckets: Sequence[Sequence[int]], pad: Sequence[str]) -> str:
    """A model's bucket bounds per dimension and which dimensions pad, as ``aotc inspect``
    and ``aotc plan`` show them: ``batch ≤ [1, 4], seq ≤ [128]; padded: batch``."""
    bounds = ", ".join(f"{d} ≤ {list(b)}" for d, b in zip(dims, buckets, strict=True))
    return f"{bounds}; padded: {', '.join(pad) or 'none'}"


def _model(spec: ModelSpec) -> list[str]:
    ins = ", ".join(f"{i.name}: {i.dtype}{list(i.shape)}" for i in spec.inputs)
    out = [
        f"model {spec.name} ({spec.source}): {ins} -> {len(spec.outputs) or '?'} outputs",
        f"  buckets: {model_buckets(spec.dims, spec.buckets, spec.pad)}; "
        f"{len(spec.weights)} weights bound at load",
    ]
    for a in spec.artifacts:
        out.append(f"  {a.target} ({a.device}, {a.device_name}, torch {a.torch}, "
                   f"{a.mode}, {a.backend}):")  # fmt: skip
        for b in a.buckets:
            where = ",".join(f"{d}={x}" for d, x in zip(spec.dims, b.bucket, strict=True))
            err = b.metrics.get("rel_err")
            shown = f"rel err {err:.1e}" if isinstance(err, float) else ""
            what = b.entry if b.impl == "compiled" else "the service's module"
            served = f"{serving_label(b.impl, b.graph, b.mode)}: {what}"
            # metrics are free-form: show what has the expected shape, skip the rest
            timed = b.metrics.get("timed_us")
            if isinstance(timed, dict) and timed:
                shown += ", timed " + ", ".join(f"{k} {v} µs" for k, v in timed.items())
            not_servable = b.metrics.get("not_servable")
            for k in not_servable if isinstance(not_servable, dict | list) else ():
                shown += f", {k} not servable"
            out.append(f"    {where:<24} {served}  {shown}")
    out.append("")
    return out


def _op(op: OpSpec) -> list[str]:
    lines = [f"op {op.name}: {', '.join(op.kernels)}"]
    for r in op.routes:  # each kernel's buckets, as runs of the route
        runs = ", ".join(f"{k} ×{len(list(g))}" for k, g in itertools.groupby(r.kernels))
        lines.append(f"  {r.target} [{' '.join(f'{k}={v}' for k, v in r.dtypes.items())}]: "
                     f"{runs} (buckets in order)")  # fmt: skip
    return [*lines, ""]


def _pipeline(p: PipelineSpec) -> list[str]:
    def tensors(role: str) -> str:
        return ", ".join(
            f"{t.name}[{', '.join(t.shape)}] {t.dtype}" + ("" if t.pad is None else f" pad {t.pad}")
            for t in p.tensors
            if t.role == role
        )

    lines = [f"pipeline {p.name}({tensors('input')}) -> {tensors('output')}"]
    for dim, bounds in zip(p.dims, p.buckets, strict=True):
        lines.append(f"  one CUDA graph per bucket of {dim}: {list(bounds)}")
    for role, title in (("weight", "weights"), ("state", "state (read and written)"),
                        ("scratch", "scratch")):  # fmt: skip
        if any(t.role == role for t in p.tensors):
            lines.append(f"  {title}: {tensors(role)}")
    for i, step in enumerate(p.steps):
        when = "" if step.when is None else f"  when {step.when}"
        lines.append(f"  {i}. {step.kernel}({', '.join(map(str, step.args))}){when}")
    return [*lines, ""]


def _configs(variants: Sequence[VariantSpec]) -> list[str]:
    """A bucket's variants, one line per config (its meta-parameters, derived ones included,
    and launch options) with the specializations compiled of it: a bucket over a listed
    size holds a config per derived value, and the loader picks among them per call."""
    by: dict[str, list[VariantSpec]] = {}
    for v in variants:
        meta = " ".join(f"{a}={b}" for a, b in sorted(v.meta.items()))
        by.setdefault(f"{meta} warps={v.num_warps} stages={v.num_stages}", []).append(v)
    return [
        f"{config} smem={_span(v.shared for v in vs)} regs={_span(v.regs for v in vs)}  "
        f"[{' | '.join(_spec(v.assume) for v in vs)}]"
        for config, vs in by.items()
    ]


def _span(values: Iterable[int]) -> str:
    ordered = sorted(values)
    low, high = ordered[0], ordered[-1]
    return str(low) if low == high else f"{low}-{high}"


def _spec(assume: Mapping[str, int]) -> str:
    items = assume.items()
    if not items:
        return "generic"
    return " ".join(f"{n}%16" if k == 16 else f"{n}==1" for n, k in sorted(items))
