"""Pack: every product's records and payloads into one bundle (format in
``loader/format.py``), and the kernel product's records: the selection and its cubins."""

from __future__ import annotations

import hashlib
import os
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from loader import manifest as mf
from loader.format import encode

from . import __version__
from .compile import Compiled
from .kernel_env import fixed_for
from .plan import Config, Instance, Plan, Variant
from .plan_checks import call_dependent
from .product import Contribution
from .recipe import KernelRecipe, Recipe
from .recipe.kernel_call import CallValue
from .select import Selection
from .targets import resolve


def make_manifest(recipe: Recipe, parts: Iterable[Contribution]) -> mf.Manifest:
    """The bundle's manifest: the recipe's name, version and targets, what every product
    was built from, and the fields each product fills (each field by one product)."""
    parts = list(parts)
    records: dict[str, Any] = {}
    for part in parts:
        clash = records.keys() & part.records.keys()
        if clash:
            raise ValueError(f"two products fill the manifest's {', '.join(sorted(clash))}")
        records.update(part.records)
    return mf.Manifest(
        name=recipe.name,
        version=recipe.version,
        provenance=provenance(recipe, parts),
        targets=tuple(t.to_target() for t in recipe.targets),
        **records,
    )


def provenance(recipe: Recipe, parts: Iterable[Contribution]) -> dict[str, Any]:
    """aotc's version, the recipe, and each product's tools and sources."""
    tools: dict[str, str] = {}
    sources: dict[str, str] = {}
    for part in parts:
        tools.update(part.provenance.tools)
        sources.update(part.provenance.sources)
    return {"aotc": __version__, **tools, "recipe": recipe.path.name,
            "recipe_sha256": recipe.sha256, "sources": sources}  # fmt: skip


def bundle_payloads(parts: Iterable[Contribution]) -> dict[str, bytes]:
    """Every product's entries; a name two products both give must hold the same bytes."""
    payloads: dict[str, bytes] = {}
    for part in parts:
        for name, data in part.payloads.items():
            if payloads.setdefault(name, data) != data:
                raise ValueError(f"two products give the entry {name} different bytes")
    return payloads


def encode_bundle(manifest: mf.Manifest, payloads: Mapping[str, bytes]) -> bytes:
    return encode(manifest.to_json(), payloads)


# --- the kernel product's records ------------------------------------------------------


def variant_id(config_id: str, spec_label: str, derived: tuple[tuple[str, Any], ...] = ()) -> str:
    """The config's id, and a hash of what else tells its variants apart: the
    specialization, and the derived values (only where there are any)."""
    what = spec_label + "".join(f" {n}={x!r}" for n, x in derived)
    return f"{config_id}-{hashlib.sha256(what.encode()).hexdigest()[:6]}"


def variant_ids(inst: Instance, config: Config) -> frozenset[str]:
    """The ids of every variant ``inst`` compiles ``config`` to: what a tuning record's
    ``extra.variant`` names when it ran one of them."""
    return frozenset(variant_id(config.id, v.spec.label, v.derived)
                     for v in inst.variants((config,)))  # fmt: skip


def entry_name(cubin: bytes) -> str:
    return f"cubin/{hashlib.sha256(cubin).hexdigest()}"


def variant_record(kr: KernelRecipe, config: Config, c: Compiled) -> mf.VariantSpec:
    """The manifest's description of one compiled variant: all a launch needs."""
    return mf.VariantSpec(
        id=variant_id(config.id, c.variant.spec.label, c.variant.derived),
        entry=entry_name(c.cubin),
        function=c.function,
        num_warps=c.num_warps or config.num_warps,  # more where Triton warp-specialised
        num_stages=config.num_stages,
        shared=c.shared,
        regs=c.regs,
        meta={
            **fixed_for(kr, dict(c.variant.dtypes), resolve(c.variant.target).sms),
            **dict(config.meta),
            **dict(c.variant.derived),
        },
        assume=_assumed(kr, c.variant),
        abi=c.abi,
        descriptors=c.descriptors,
        global_scratch=c.global_scratch,
        global_scratch_align=c.global_scratch_align,
    )


def _assumed(kr: KernelRecipe, variant: Variant) -> dict[str, int]:
    """The variant's assumptions, less those on a scalar compiled in as None: it has no
    value to test (a pointer passed None reads as 0, which is divisible by 16)."""
    return {n: x for n, x in variant.spec.assume
            if n not in variant.nones or kr.signature[n].startswith("*")}  # fmt: skip


def kernel_record(kr: KernelRecipe, instances: tuple[mf.InstanceSpec, ...]) -> mf.KernelSpec:
    return mf.KernelSpec(
        name=kr.name,
        params=tuple(mf.Param(n, t) for n, t in kr.signature.items()),
        dtype_vars=dict(kr.dtypes),
        grid=(kr.grid[0].text, kr.grid[1].text, kr.grid[2].text),
        bucket_keys=tuple(kr.buckets),
        buckets=tuple(kr.buckets.values()),
        instances=instances,
        call=tuple(_call_value(c) for c in kr.call.values()),
        derived=tuple(mf.Derived(n, e.text) for n, e in kr.derived.items()),
        checks=tuple(c.text for c in kr.constraints if call_dependent(kr, c)),
        optional=tuple(sorted(kr.optional)),
        always_none=tuple(sorted(kr.always_none)),
        host=kr.host,
        descriptors=tuple(n for n in kr.signature if n in kr.descriptors),
    )


def _call_value(c: CallValue) -> mf.CallValue:
    """A stride is recorded under its own key (``stride_of``; see loader/manifest.py)."""
    if c.of == "stride":
        return mf.CallValue(c.name, None, c.dim, c.rank, stride_of=c.arg)
    return mf.CallValue(c.name, c.arg, c.dim, c.rank)


def kernel_records(
    plan: Plan, selection: Selection
) -> tuple[tuple[mf.KernelSpec, ...], dict[str, bytes]]:
    """Every kernel of the recipe with the plan's instances of it, and their cubins."""
    payloads: dict[str, bytes] = {}
    kernels: list[mf.KernelSpec] = []
    for kr in plan.recipe.kernels:
        instances: list[mf.InstanceSpec] = []
        for inst in plan.instances:
            if inst.kernel.name != kr.name:
                continue
            variants: dict[str, mf.VariantSpec] = {}
            choices: list[mf.ChoiceSpec] = []
            for bc in selection.choices[inst.key]:
                ids = []
                for c in bc.variants:
                    record = variant_record(kr, bc.config, c)
                    payloads[record.entry] = c.cubin
                    variants[record.id] = record
                    ids.append(record.id)
                choices.append(
                    mf.ChoiceSpec(bc.bucket, bc.config.id, bc.how, tuple(ids), bc.metrics)
                )
            instances.append(
                mf.InstanceSpec(inst.target.name, dict(inst.dtypes), variants, tuple(choices))
            )
        kernels.append(kernel_record(kr, tuple(instances)))
    return tuple(kernels), payloads


def kernel_sources(plan: Plan) -> dict[str, str]:
    """Each kernel's source file (as provenance names it) -> its sha256."""
    root = plan.recipe.root
    return {rel_path(kr.source, root): plan.sources[kr.name].file_sha256
            for kr in plan.recipe.kernels}  # fmt: skip


def rel_path(path: Path, root: Path) -> str:
    """``path`` relative to ``root`` as the manifest's provenance writes it (POSIX), with
    ``..`` where it lies outside (a held-out library's file beside the recipe's folder):
    never the build machine's own directories, so the same tree writes the same bytes
    wherever it is checked out."""
    return Path(os.path.relpath(path, root)).as_posix()


def failures(compiled: Mapping[Variant, Compiled]) -> list[dict[str, Any]]:
    """The manifest's ``build.failed``: every variant that failed to compile, and why."""
    rows = [
        {
            "kernel": v.kernel,
            "target": v.target,
            "dtypes": dict(v.dtypes),
            "config": v.config.label,
            "spec": v.spec.label,
            "reason": c.reason,
        }
        for v, c in compiled.items()
        if not c.ok
    ]
    return sorted(rows, key=failure_order)


def failure_order(row: Mapping[str, Any]) -> tuple[str, str, str, str, str]:
    """The order of ``build.failed`` (also used by ``aotc merge``)."""
    return (row["kernel"], row["target"], str(row["dtypes"]), row["config"], row["spec"])
