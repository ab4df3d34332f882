"""Merge: combine partial bundles (``aotc build --shard I/N --targets ...``) into one.

The result is byte-identical to a full build of the same recipe: the inputs must agree on
everything but their instances (bundle name and version, provenance — recipe sha256,
sources, Triton and aotc versions —, targets, kernel descriptions); the instances are put
back in plan order, which the manifest itself determines (kernels in manifest order, then
targets in manifest order, then dtype bindings in ``itertools.product`` order of the
sorted dtype variables; see ``aot/plan.py``); ``build.failed`` is the sorted union;
``build.shard`` is dropped; the payloads are re-encoded by the same deterministic encoder.
Every instance of the plan must be present exactly once, or twice with identical content
(so a part may overlap another, e.g. a full bundle given with its shards); anything else
is refused with a message naming the files and the conflict.

Inputs are grouped by kind, recognised from their first bytes (``KINDS``). Bundles are the
only kind today; tuning databases are merged by ``aotc merge-db`` (``aot/tune/db.py``), and
``KINDS`` is where they would be registered to become a second kind of input here.
"""

from __future__ import annotations

import dataclasses
import hashlib
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from loader import manifest as mf
from loader.errors import BundleError
from loader.format import MAGIC, BundleFile, canonical_json, encode, write_atomic

from .errors import BadBundle, MergeError, UsageError
from .ops import op_records
from .pack import failure_order
from .plan import binding_order
from .select import InstanceKey

# Top-level manifest keys this merge understands; anything else is refused, not dropped.
_KNOWN_KEYS = frozenset(
    {
        "bundle",
        "provenance",
        "targets",
        "kernels",
        "pipelines",
        "build",
        "entries",
        "payload_size",
        "ops",
    }
)
# build.* keys with their own merge rule; any other must be equal in every part.
_BUILD_RULES = frozenset({"failed", "shard"})


@dataclass(frozen=True)
class MergeResult:
    output: Path
    kind: str
    size: int
    sha256: str
    inputs: int
    instances: int
    seconds: float
    # Inputs that carried a signature: the output never does (a signature covers one
    # bundle's bytes, and signing is the step after merge).
    signed_inputs: tuple[Path, ...] = ()


@dataclass(frozen=True)
class _Part:
    path: Path
    file: BundleFile
    manifest: mf.Manifest


def merge(inputs: Sequence[Path], output: Path) -> MergeResult:
    """Merge ``inputs`` (all of one kind) into ``output``, written atomically."""
    if not inputs:
        raise UsageError("aotc merge: give the partial bundles to merge")
    kinds = {path: _kind(path) for path in inputs}
    found = sorted(set(kinds.values()))
    if len(found) > 1:
        listing = "; ".join(f"{p.name}: {k}" for p, k in kinds.items())
        raise UsageError(f"aotc merge: inputs of different kinds ({listing}); merge one kind")
    start = time.monotonic()
    kind = found[0]
    size, digest, instances, signed = KINDS[kind][1](list(inputs), output)
    return MergeResult(output, kind, size, digest, len(inputs), instances,
                       time.monotonic() - start, signed)  # fmt: skip


def _kind(path: Path) -> str:
    try:
        with path.open("rb") as f:
            head = f.read(64)
    except FileNotFoundError:
        raise BadBundle(f"{path}: no such file") from None
    except OSError as exc:
        raise BadBundle(f"{path}: cannot read it ({exc})") from None
    for kind, (recognise, _) in KINDS.items():
        if recognise(head):
            return kind
    raise UsageError(
        f"{path}: not an aotc bundle (bad magic bytes); aotc merge combines bundles "
        "(tuning databases are merged with `aotc merge-db`)"
    )


def merge_bundles(paths: list[Path], output: Path) -> tuple[int, str, int, tuple[Path, ...]]:
    parts: list[_Part] = []
    try:
        for path in paths:
            parts.append(_open(path))
        first = parts[0]
        for other in parts[1:]:
            _check_same(first, other)
        table = _instances(parts)
        order = list(plan_order(first.manifest))
        _check_complete(parts, table, order)
        kernels = tuple(
            dataclasses.replace(
                k, instances=tuple(table[key][0] for key in order if key[0] == k.name)
            )
            for k in first.manifest.kernels
        )
        failed: dict[bytes, Mapping[str, Any]] = {}
        for part in parts:
            for row in part.manifest.build.get("failed", []):
                failed[canonical_json(row)] = row
        build = {k: v for k, v in first.manifest.build.items() if k not in _BUILD_RULES}
        build["failed"] = sorted(failed.values(), key=failure_order)
        # each part routed its ops over its own instances: route again over all of them
        ops = op_records(first.manifest.ops, kernels)
        manifest = dataclasses.replace(first.manifest, kernels=kernels, build=build, ops=ops)
        payloads: dict[str, bytes] = {}
        for key in order:
            inst, part = table[key]
            for v in inst.variants.values():
                if v.entry not in payloads:
                    payloads[v.entry] = part.file.read_entry(v.entry)  # both hashes checked
    except BundleError as exc:
        raise BadBundle(str(exc)) from None
    finally:
        for part in parts:
            part.file.close()
    data = encode(manifest.to_json(), payloads)  # unsigned: see MergeResult.signed_inputs
    write_atomic(output, data)
    signed = tuple(p.path for p in parts if p.file.signature is not None)
    return len(data), hashlib.sha256(data).hexdigest(), len(order), signed


# Each kind of input: how its first bytes are recognised, and how several are merged (the
# output's size, sha256 and instance count, and which inputs were signed).
_Merger = Callable[[list[Path], Path], tuple[int, str, int, tuple[Path, ...]]]
KINDS: dict[str, tuple[Callable[[bytes], bool], _Merger]]
KINDS = {"bundle": (lambda head: head.startswith(MAGIC), merge_bundles)}


def plan_order(m: mf.Manifest) -> Iterator[InstanceKey]:
    """Every instance of the full plan, in plan order, from the manifest alone: kernels,
    then targets, then bindings in the plan's own order (``aot.plan.binding_order``)."""
    for k in m.kernels:
        for t in m.targets:
            for binding in binding_order(k.binding_options()):
                yield (k.name, t.name, binding)


def label(key: InstanceKey) -> str:
    dt = ",".join(f"{a}={b}" for a, b in key[2])
    return f"{key[0]}[{dt}] on {key[1]}" if dt else f"{key[0]} on {key[1]}"


def _open(path: Path) -> _Part:
    """The part opened, checked and decoded by the archive layer (loader/format.py)."""
    try:
        bf = BundleFile(path)
    except BundleError as exc:
        raise BadBundle(str(exc)) from None
    unknown = sorted(set(bf.manifest) - _KNOWN_KEYS)
    if unknown:
        bf.close()
        raise MergeError(
            f"{path}: manifest key {unknown[0]!r} is unknown to this aotc, which cannot "
            "merge it; use the aotc that built the parts"
        )
    return _Part(path, bf, bf.spec)


def _differs(a: _Part, b: _Part, what: str, va: Any, vb: Any, hint: str) -> MergeError:
    return MergeError(
        f"cannot merge {b.path} with {a.path}: they differ in {what} ({a.path.name}: {va!r}, "
        f"{b.path.name}: {vb!r}); {hint}"
    )


def _check_same(a: _Part, b: _Part) -> None:
    ma, mb = a.manifest, b.manifest
    if (ma.name, ma.version) != (mb.name, mb.version):
        raise _differs(
            a, b, "the bundle", f"{ma.name} {ma.version}", f"{mb.name} {mb.version}",
            "these are parts of different bundles",
        )  # fmt: skip
    hints = {
        "recipe_sha256": "the parts were built from different recipes; rebuild every part "
        "from the same commit",
        "triton": "the parts were built with different Triton versions; use one version "
        "in every job",
        "aotc": "the parts were built by different aotc versions; use one in every job",
        "sources": "the kernels' sources differ between the parts; rebuild every part from "
        "the same commit",
    }
    for key in sorted(set(ma.provenance) | set(mb.provenance)):
        va, vb = ma.provenance.get(key), mb.provenance.get(key)
        if va != vb:
            hint = hints.get(key, "rebuild every part from the same inputs")
            raise _differs(a, b, f"provenance.{key}", va, vb, hint)
    ta = [t.to_json() for t in ma.targets]
    tb = [t.to_json() for t in mb.targets]
    if ta != tb:
        raise _differs(
            a, b, "the targets", [t["name"] for t in ta], [t["name"] for t in tb],
            "rebuild every part from the same recipe",
        )  # fmt: skip
    ka = [{**k.to_json(), "instances": None} for k in ma.kernels]
    kb = [{**k.to_json(), "instances": None} for k in mb.kernels]
    if ka != kb:
        raise _differs(
            a, b, "the kernel table", [k.name for k in ma.kernels], [k.name for k in mb.kernels],
            "rebuild every part from the same recipe",
        )  # fmt: skip
    if [p.to_json() for p in ma.pipelines] != [p.to_json() for p in mb.pipelines]:
        raise _differs(
            a, b, "the pipelines", [p.name for p in ma.pipelines], [p.name for p in mb.pipelines],
            "rebuild every part from the same recipe",
        )  # fmt: skip
    oa = [(o.name, o.kernels) for o in ma.ops]
    ob = [(o.name, o.kernels) for o in mb.ops]
    if oa != ob:
        raise _differs(
            a, b, "the ops", oa, ob, "rebuild every part from the same recipe",
        )  # fmt: skip
    for key in sorted((set(ma.build) | set(mb.build)) - _BUILD_RULES):
        if ma.build.get(key) != mb.build.get(key):
            raise _differs(
                a, b, f"build.{key}", ma.build.get(key), mb.build.get(key),
                "this aotc merges it only when every part agrees",
            )  # fmt: skip


def _instances(parts: list[_Part]) -> dict[InstanceKey, tuple[mf.InstanceSpec, _Part]]:
    table: dict[InstanceKey, tuple[mf.InstanceSpec, _Part]] = {}
    for part in parts:
        for k in part.manifest.kernels:
            for inst in k.instances:
                binding = tuple((n, inst.dtypes[n]) for n in k.binding_options())
                key: InstanceKey = (k.name, inst.target, binding)
                prev = table.get(key)
                if prev is None:
                    table[key] = (inst, part)
                elif canonical_json(prev[0].to_json()) != canonical_json(inst.to_json()):
                    raise MergeError(
                        f"cannot merge {part.path} with {prev[1].path}: both hold "
                        f"{label(key)}, with different content ({_difference(prev[0], inst)}); "
                        "the parts overlap and disagree: were they built from different "
                        "inputs or with a GPU in one job only? Give one of them"
                    )
    return table


def _difference(a: mf.InstanceSpec, b: mf.InstanceSpec) -> str:
    for ca, cb in zip(a.choices, b.choices, strict=False):
        if ca.config != cb.config or ca.how != cb.how:
            return (
                f"bucket {list(ca.bucket)}: config {ca.config} ({ca.how}) vs {cb.config} ({cb.how})"
            )
    if len(a.choices) != len(b.choices):
        return f"{len(a.choices)} vs {len(b.choices)} buckets"
    return "different variants or cubins"


def _check_complete(
    parts: list[_Part], table: Mapping[InstanceKey, object], order: list[InstanceKey]
) -> None:
    expected = set(order)
    extra = [k for k in table if k not in expected]
    if extra:
        raise MergeError(f"{label(extra[0])} is not part of the bundle's plan")
    missing = [k for k in order if k not in table]
    if missing:
        given = ", ".join(
            f"{p.path.name} ({mf.describe_shard(p.manifest.shard) if p.manifest.shard else 'full'})"
            for p in parts
        )
        shown = "; ".join(label(k) for k in missing[:5])
        more = f" and {len(missing) - 5} more" if len(missing) > 5 else ""
        raise MergeError(
            f"the parts do not cover the whole bundle: {len(missing)} of {len(order)} instances "
            f"are missing ({shown}{more}). Given: {given}. Add the missing parts "
            "(every shard I/N for I = 1..N, and every --targets group)"
        )
