"""The bundle manifest: typed, frozen, validated at the edge.

The builder writes these dataclasses with ``to_json``, the loader reads them back with
``from_json``: the generic codec (loader/codec.py) driven by the annotations below, one
definition of what a bundle promises (everything needed to launch a kernel without
Triton). Keys older bundles lack take the fields' defaults; integer fields carry ranges.

Decoding also runs each class's ``_validate``: the checks that span fields (a choice's
variants exist, a grid parses, every name the loader will look up is there), so a manifest
that decodes is one the loader can open and call without surprises.

Six modules hold the records, all importable from here: loader/manifest_types.py (types,
ranges, the base class), manifest_model.py, manifest_pipeline.py, manifest_build.py,
op.py, and this one (kernels and the whole manifest). Only manifest_types and this one are
imported with it; the others on first use.
"""

from __future__ import annotations

import importlib
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from . import codec
from .manifest_types import (
    ASSUMPTIONS,
    ELEMENT_TYPES,
    GIVEN,
    GRID_BUILTINS,
    INT_TYPES,
    NONE,
    PARAM_SCALAR_TYPES,
    SCALAR_TYPES,
    TRITON_SCRATCH_ARGS,
    Coded,
    Constexpr,
    Count,
    DescriptorSpec,
    Dim,
    Int,
    ManifestError,
    Scratch,
    Small,
    Warps,
    check_bounds,
)

if TYPE_CHECKING:
    from .manifest_build import BuildRecord, Failure, ShardRecord
    from .manifest_model import (
        MODEL_BACKENDS,
        MODEL_DEVICES,
        MODEL_DTYPES,
        MODEL_IMPLS,
        ModelArtifacts,
        ModelBucket,
        ModelInput,
        ModelSpec,
        ModelWeight,
        serving_label,
    )
    from .manifest_pipeline import ROLES, PipelineSpec, PipelineStep, PipelineTensor
    from .op import OpSpec

# The records of sections a manifest may lack live in modules imported on first use (the
# codec resolves ``Manifest``'s annotations through this module's ``__getattr__``), so
# that opening a bundle of kernels does not create the classes of models, pipelines, ops
# and build records (start-up time is what a bundle is for).
_MODULES = {
    "manifest_model": "MODEL_BACKENDS MODEL_DEVICES MODEL_DTYPES MODEL_IMPLS ModelArtifacts "
    "ModelBucket ModelInput ModelSpec ModelWeight serving_label",
    "manifest_pipeline": "ROLES PipelineSpec PipelineStep PipelineTensor",
    "manifest_build": "BuildRecord Failure ShardRecord",
    "op": "OpSpec",
}
_LAZY = {name: module for module, names in _MODULES.items() for name in names.split()}


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        value = getattr(importlib.import_module(f".{_LAZY[name]}", __package__), name)
        globals()[name] = value
        return value
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


# Every record and table of the manifest, those of the other manifest modules included:
# import them from here.
__all__ = [
    "ASSUMPTIONS",
    "ELEMENT_TYPES",
    "GIVEN",
    "GRID_BUILTINS",
    "INT_TYPES",
    "MODEL_BACKENDS",
    "MODEL_DEVICES",
    "MODEL_DTYPES",
    "MODEL_IMPLS",
    "NONE",
    "PARAM_SCALAR_TYPES",
    "ROLES",
    "SCALAR_TYPES",
    "TRITON_SCRATCH_ARGS",
    "BuildRecord",
    "CallValue",
    "ChoiceSpec",
    "Coded",
    "Constexpr",
    "Count",
    "Derived",
    "DescriptorSpec",
    "Dim",
    "Failure",
    "InstanceSpec",
    "Int",
    "KernelSpec",
    "Manifest",
    "ManifestError",
    "ModelArtifacts",
    "ModelBucket",
    "ModelInput",
    "ModelSpec",
    "ModelWeight",
    "Param",
    "PipelineSpec",
    "PipelineStep",
    "PipelineTensor",
    "Scratch",
    "ShardRecord",
    "Small",
    "Target",
    "VariantSpec",
    "Warps",
    "check_bounds",
    "describe_shard",
    "serving_label",
]


@dataclass(frozen=True)
class Param(Coded):
    """A runtime argument, in call order. ``type`` is Triton's: ``*fp16``, ``i32``, ``*T``."""

    name: str
    type: str

    @property
    def is_pointer(self) -> bool:
        return self.type.startswith("*")


@dataclass(frozen=True)
class Target(Coded):
    """A build target. ``device_names`` match the running GPU's name (empty: arch only)."""

    name: str
    arch: str
    cc: tuple[Small, Small]
    sms: Count
    device_names: tuple[str, ...] = ()


@dataclass(frozen=True)
class VariantSpec(Coded):
    """One compiled cubin: a config under one set of specialization assumptions."""

    id: str
    entry: str
    function: str
    num_warps: Warps
    num_stages: Small
    shared: Count
    regs: Small
    meta: Mapping[str, Constexpr]  # every constexpr, derived ones included
    assume: Mapping[str, Int]
    # Names of the parameters passed to cuLaunchKernel, in order; params assumed == 1 are
    # compiled in as constants and absent. TRITON_SCRATCH_ARGS null pointers follow them.
    abi: tuple[str, ...]
    scratch_args: Scratch = TRITON_SCRATCH_ARGS
    # TMA descriptor arguments (loader/descriptors.py); global scratch bytes per program.
    descriptors: tuple[DescriptorSpec, ...] = field(
        default=(), metadata=codec.spec(omit_default=True)
    )
    global_scratch: Count = field(default=0, metadata=codec.spec(omit_default=True))
    global_scratch_align: Small = field(default=0, metadata=codec.spec(omit_default=True))

    def _validate(self) -> None:
        if any(v not in ASSUMPTIONS for v in self.assume.values()):
            raise ValueError("assume values must be 16 or 1")

    @property
    def specificity(self) -> int:
        return len(self.assume)


@dataclass(frozen=True)
class ChoiceSpec(Coded):
    """The selection for one bucket: which variants serve it (most specialized first)."""

    bucket: tuple[Int, ...]
    config: str
    how: str
    variants: tuple[str, ...]
    metrics: Mapping[str, Any] = field(default_factory=dict, metadata=codec.spec(omit_default=True))


@dataclass(frozen=True)
class InstanceSpec(Coded):
    """A kernel for one target and one binding of its dtype variables (and of its optional
    pointers, each to GIVEN or NONE)."""

    target: str
    dtypes: Mapping[str, str]
    variants: Mapping[str, VariantSpec] = field(metadata=codec.spec(listed_by="id"))
    choices: tuple[ChoiceSpec, ...]

    def _validate(self) -> None:
        for c in self.choices:
            if not c.variants or any(v not in self.variants for v in c.variants):
                raise ValueError(f"bucket {c.bucket} names no known variant")


@dataclass(frozen=True)
class Derived(Coded):
    """A constexpr computed per call from the call's values (a ``@triton.heuristics`` rule
    or a recipe's ``derived``): a variant serves a call only if its value matches."""

    name: str
    expr: str


@dataclass(frozen=True)
class CallValue(Coded):
    """A launch value that is not a kernel argument: passed by keyword, or, unless passed,
    read off an argument: (with ``arg``) dimension ``dim`` of its shape, or (with
    ``stride_of``) dimension ``dim``'s stride, in elements. ``rank``: the argument's rank
    at build, which a call's must have."""

    name: str
    arg: str | None = field(default=None, metadata=codec.spec(omit_default=True))
    dim: Small = field(default=0, metadata=codec.spec(omit_default=True))
    rank: Small | None = field(default=None, metadata=codec.spec(omit_default=True))
    # A key of its own rather than a kind beside ``arg``: a loader from before strides
    # ignores it and sees a value passed by keyword, so it asks the caller for the value
    # instead of reading a shape in the stride's place.
    stride_of: str | None = field(default=None, metadata=codec.spec(omit_default=True))

    @property
    def tensor(self) -> str | None:
        """The argument the value is read off (None: passed by keyword only)."""
        return self.arg if self.stride_of is None else self.stride_of

    @property
    def text(self) -> str:
        """As a recipe writes it: ``keyword``, ``shape(X, 1)`` or ``stride(X, 0)``."""
        if self.tensor is None:
            return "keyword"
        return f"{'shape' if self.stride_of is None else 'stride'}({self.tensor}, {self.dim})"


_OMIT = codec.spec(omit_default=True)


@dataclass(frozen=True)
class KernelSpec(Coded):
    name: str
    params: tuple[Param, ...]
    dtype_vars: Mapping[str, tuple[str, ...]]
    grid: tuple[str, str, str]
    bucket_keys: tuple[str, ...]  # integer parameters or call values
    buckets: tuple[tuple[Int, ...], ...]  # boundaries, one sorted tuple per key
    instances: tuple[InstanceSpec, ...]
    # Everything a call must meet beyond its bucket, so that no variant ever runs a call
    # it was not built for (loader/validity.py):
    call: tuple[CallValue, ...] = field(default=(), metadata=_OMIT)
    derived: tuple[Derived, ...] = field(default=(), metadata=_OMIT)  # in evaluation order
    checks: tuple[str, ...] = field(default=(), metadata=_OMIT)  # the recipe's constraints
    optional: tuple[str, ...] = field(default=(), metadata=_OMIT)  # built as passed and None
    always_none: tuple[str, ...] = field(default=(), metadata=_OMIT)  # built as None only

    @property
    def nullable(self) -> tuple[str, ...]:
        """Every pointer a call may pass as None, sorted: the binding's last keys."""
        return tuple(sorted(self.optional + self.always_none))

    def binding_options(self) -> dict[str, tuple[str, ...]]:
        """Each binding key (dtype variables, then nullable pointers) and its values, in
        the order bindings are enumerated (aot/plan.py ``binding_order``)."""
        out: dict[str, tuple[str, ...]] = {v: self.dtype_vars[v] for v in sorted(self.dtype_vars)}
        for p in self.nullable:
            out[p] = (NONE,) if p in self.always_none else (GIVEN, NONE)
        return out

    # Meta-parameters the caller's host code depends on: passed by keyword, matched exactly.
    host: tuple[str, ...] = field(default=(), metadata=_OMIT)
    # Tensors the kernel reads through TMA descriptors (built per variant at the call).
    descriptors: tuple[str, ...] = field(default=(), metadata=_OMIT)

    def _validate(self) -> None:
        from .checks import check_kernel

        check_kernel(self)


@dataclass(frozen=True)
class Manifest(Coded):
    name: str = field(metadata=codec.spec(key=("bundle", "name")))
    version: str = field(metadata=codec.spec(key=("bundle", "version")))
    provenance: Mapping[str, Any]
    targets: tuple[Target, ...]
    kernels: tuple[KernelSpec, ...]
    build: Mapping[str, Any] = field(default_factory=dict)
    # absent rather than empty: bundles without any stay as they were
    pipelines: tuple[PipelineSpec, ...] = field(default=(), metadata=codec.spec(omit_default=True))
    model: ModelSpec | None = field(default=None, metadata=codec.spec(omit_default=True))
    ops: tuple[OpSpec, ...] = field(default=(), metadata=_OMIT)

    def _validate(self) -> None:
        from .checks import check_ops, check_steps

        if self.build:  # an empty record is a valid one: no need to create its classes
            from .manifest_build import BuildRecord

            codec.decode(BuildRecord, self.build, "build")
        check_steps(self)
        check_ops(self)

    @property
    def shard(self) -> Mapping[str, Any] | None:
        """The slice a partial bundle holds (``aotc build --shard/--targets``), else None."""
        shard = self.build.get("shard")
        return shard if isinstance(shard, dict) else None

    def require_complete(self) -> None:
        shard = self.shard
        if shard is not None:
            raise ManifestError(
                f"a partial bundle ({describe_shard(shard)}); combine every part with "
                "`aotc merge` and load the result"
            )

    def kernel(self, name: str) -> KernelSpec:
        for k in self.kernels:
            if k.name == name:
                return k
        raise KeyError(name)

    def pipeline(self, name: str) -> PipelineSpec:
        for p in self.pipelines:
            if p.name == name:
                return p
        raise KeyError(name)


def describe_shard(shard: Mapping[str, Any]) -> str:
    """``shard 1/3 of targets sm_90: 2 of 8 instances`` for messages and ``aotc inspect``."""
    parts = []
    if shard.get("count", 1) != 1:
        parts.append(f"shard {shard.get('index')}/{shard.get('count')}")
    if shard.get("targets"):
        parts.append("targets " + ",".join(map(str, shard["targets"])))
    return (
        " of ".join(parts or ["slice"])
        + f": {shard.get('instances', '?')} of {shard.get('of', '?')} instances"
    )
