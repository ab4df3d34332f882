"""The bundle manifest: typed, frozen, validated at the edge.

The builder constructs these dataclasses and writes them with ``to_json``; the loader
reads them back with ``from_json``. Both are the generic codec (loader/codec.py) driven by
the annotations below, so the two sides share one definition of what a bundle promises:
everything needed to launch a kernel without Triton. Defaults for keys that older bundles
lack are the fields' defaults, declared once here; integer fields carry their ranges.

Decoding also runs each class's ``_validate``: the checks that span fields (a choice's
variants exist, a grid parses, every name the loader will look up is there), so that a
manifest that decodes is one the loader can open and call without surprises.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Annotated, Any, Self

from . import codec
from .codec import Range
from .errors import BundleError

SCALAR_TYPES = frozenset(
    {"i1", "i8", "i16", "i32", "i64", "u1", "u8", "u16", "u32", "u64", "fp16", "bf16", "fp32",
     "fp64"}
)  # fmt: skip
INT_TYPES = frozenset({"i1", "i8", "i16", "i32", "i64", "u1", "u8", "u16", "u32", "u64"})
# Scalar parameter types a kernel may take (the loader packs these; fp16/bf16 scalars are
# passed as fp32, as the recipe's checker says).
PARAM_SCALAR_TYPES = INT_TYPES | {"fp32", "fp64"}
ELEMENT_TYPES = frozenset(
    {"i1", "i8", "i16", "i32", "i64", "u8", "u16", "u32", "u64", "fp8e4nv", "fp8e5", "fp16",
     "bf16", "fp32", "fp64"}
)  # fmt: skip
# Triton 3.6 appends two pointers to every kernel: global scratch and profile scratch.
TRITON_SCRATCH_ARGS = 2
# Triton's specializations: a pointer/int divisible by 16, or an int equal to 1 (which
# Triton turns into a compile-time constant and drops from the parameter list).
ASSUMPTIONS = (16, 1)
# A kernel's grid may read this besides its integer arguments and meta-parameters.
GRID_BUILTINS = ("NUM_SMS",)

# Integer ranges. Counts and sizes are non-negative and far below what a real bundle holds;
# ``Int`` is any value an i64 argument can take.
Int = Annotated[int, Range(-(2**63), 2**63 - 1)]
Count = Annotated[int, Range(0, 2**31 - 1)]
Small = Annotated[int, Range(0, 2**16)]
Warps = Annotated[int, Range(1, 32)]  # 32 warps = 1024 threads, CUDA's block limit
Scratch = Annotated[int, Range(0, 16)]
Dim = Annotated[int, Range(0, 2**62)]
# A constexpr's value: Triton takes integers, floats, booleans, strings, None, and dtypes
# (written "tl.bfloat16").
Constexpr = Int | float | bool | str | None
# A binding's value for an optional pointer (``KernelSpec.optional``): passed, or None.
GIVEN, NONE = "given", "none"


class ManifestError(BundleError):
    pass


class _Coded:
    """``to_json``/``from_json`` for every manifest class, through the generic codec."""

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = codec.encode(self)
        return out

    @classmethod
    def from_json(cls, obj: Any, where: str = "") -> Self:
        try:
            return codec.decode(cls, obj, where)
        except codec.DecodeError as exc:
            raise ManifestError(f"manifest: {exc}") from None


@dataclass(frozen=True)
class Param(_Coded):
    """A runtime argument, in call order. ``type`` is Triton's: ``*fp16``, ``i32``, ``*T``."""

    name: str
    type: str

    @property
    def is_pointer(self) -> bool:
        return self.type.startswith("*")


@dataclass(frozen=True)
class Target(_Coded):
    """A build target. ``device_names`` match the running GPU's name (empty: arch only)."""

    name: str
    arch: str
    cc: tuple[Small, Small]
    sms: Count
    device_names: tuple[str, ...] = ()


@dataclass(frozen=True)
class VariantSpec(_Coded):
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

    def _validate(self) -> None:
        if any(v not in ASSUMPTIONS for v in self.assume.values()):
            raise ValueError("assume values must be 16 or 1")

    @property
    def specificity(self) -> int:
        return len(self.assume)


@dataclass(frozen=True)
class ChoiceSpec(_Coded):
    """The selection for one bucket: which variants serve it (most specialized first)."""

    bucket: tuple[Int, ...]
    config: str
    how: str
    variants: tuple[str, ...]
    metrics: Mapping[str, Any] = field(default_factory=dict, metadata=codec.spec(omit_default=True))


@dataclass(frozen=True)
class InstanceSpec(_Coded):
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
class Derived(_Coded):
    """A constexpr computed per call from the call's values (a ``@triton.heuristics`` rule
    or a recipe's ``derived``): a variant serves a call only if its value matches."""

    name: str
    expr: str


@dataclass(frozen=True)
class CallValue(_Coded):
    """A launch value that is not a kernel argument: passed by keyword, or (with ``arg``)
    dimension ``dim`` of that argument's shape unless passed."""

    name: str
    arg: str | None = field(default=None, metadata=codec.spec(omit_default=True))
    dim: Small = field(default=0, metadata=codec.spec(omit_default=True))
    rank: Small | None = field(default=None, metadata=codec.spec(omit_default=True))


_OMIT = codec.spec(omit_default=True)


@dataclass(frozen=True)
class KernelSpec(_Coded):
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

    def _validate(self) -> None:
        from .checks import check_kernel

        check_kernel(self)


ROLES = ("input", "output", "weight", "scratch")


@dataclass(frozen=True)
class PipelineTensor(_Coded):
    """A tensor of a pipeline. ``shape`` holds integer expressions over the pipeline's
    dimensions (``"M"``, ``"4096"``); row-major and contiguous. ``role``: one of ROLES."""

    name: str
    dtype: str
    shape: tuple[str, ...]
    role: str

    def _validate(self) -> None:
        if self.role not in ROLES or self.dtype not in ELEMENT_TYPES:
            raise ValueError(f"({self.name}): unknown role or dtype")


@dataclass(frozen=True)
class PipelineStep(_Coded):
    """One kernel call. ``args`` follow the kernel's params: a tensor name for a pointer,
    an integer expression over the pipeline's dimensions for an integer, a number for a
    float."""

    kernel: str
    args: tuple[str | float, ...]


@dataclass(frozen=True)
class PipelineSpec(_Coded):
    """A named sequence of kernel calls over named tensors, captured by the loader as one
    CUDA graph per bucket of ``dims`` (see loader/pipeline.py)."""

    name: str
    dims: tuple[str, ...]
    buckets: tuple[tuple[Count, ...], ...]  # per dim, ascending upper bounds
    tensors: tuple[PipelineTensor, ...]
    steps: tuple[PipelineStep, ...]

    def _validate(self) -> None:
        from .checks import check_pipeline, check_pipeline_sizes

        check_bounds(self.dims, self.buckets)
        check_pipeline(self)
        check_pipeline_sizes(self)

    def tensor(self, name: str) -> PipelineTensor:
        for t in self.tensors:
            if t.name == name:
                return t
        raise KeyError(name)


def check_bounds(dims: tuple[str, ...], buckets: tuple[tuple[int, ...], ...]) -> None:
    """One non-empty, strictly ascending list of bucket bounds per dimension."""
    if len(dims) != len(buckets) or len(set(dims)) != len(dims):
        raise ValueError("one list of bucket bounds per dimension")
    for d, b in zip(dims, buckets, strict=True):
        if not b or any(x >= y for x, y in itertools.pairwise(b)):
            raise ValueError(f"the bucket bounds of {d!r} must be a non-empty ascending list")


# build.*: what the builder records beside the product, read by inspect and merge.
@dataclass(frozen=True)
class Failure(_Coded):
    """A variant that failed to compile or fit (``build.failed``)."""

    kernel: str
    target: str
    dtypes: Mapping[str, str]
    config: str
    spec: str
    reason: str


@dataclass(frozen=True)
class ShardRecord(_Coded):
    """The slice a partial bundle holds (``build.shard``)."""

    index: Count = 1
    count: Count = 1
    instances: Count | None = None
    of: Count | None = None
    targets: tuple[str, ...] = ()


@dataclass(frozen=True)
class BuildRecord(_Coded):
    failed: tuple[Failure, ...] = ()
    shard: ShardRecord | None = None


@dataclass(frozen=True)
class Manifest(_Coded):
    name: str = field(metadata=codec.spec(key=("bundle", "name")))
    version: str = field(metadata=codec.spec(key=("bundle", "version")))
    provenance: Mapping[str, Any]
    targets: tuple[Target, ...]
    kernels: tuple[KernelSpec, ...]
    build: Mapping[str, Any] = field(default_factory=dict)
    # absent rather than empty: bundles without any stay as they were
    pipelines: tuple[PipelineSpec, ...] = field(default=(), metadata=codec.spec(omit_default=True))
    model: ModelSpec | None = field(default=None, metadata=codec.spec(omit_default=True))

    def _validate(self) -> None:
        from .checks import check_steps

        codec.decode(BuildRecord, self.build, "build")
        check_steps(self)

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


# --- model mode (issue 5): an nn.Module compiled per bucket by TorchInductor -------------

MODEL_DTYPES = ("fp16", "bf16", "fp32", "fp64")
MODEL_DEVICES = ("cuda", "cpu")
# "inductor": a torch._inductor CompiledArtifact per bucket, called with the weights first;
# "aoti": an AOTInductor package (.pt2, a shared library) per bucket, weights bound by name.
MODEL_BACKENDS = ("inductor", "aoti")
# How a bucket is served: its compiled artifact, or the service's own module (eager
# PyTorch, replayed as a CUDA graph) where the build measured that faster.
MODEL_IMPLS = ("compiled", "eager")


def serving_label(impl: str, graph: bool, mode: str = "") -> str:
    """How a model bucket is served, as the build's report, ``aotc inspect`` and the loader
    name it: "compiled graph", "eager graph", "eager direct"; with the Inductor mode when
    the recipe compiled several: "compiled default direct"."""
    return " ".join(w for w in (impl, mode, "graph" if graph else "direct") if w)


@dataclass(frozen=True)
class ModelInput(_Coded):
    """One positional argument of ``forward``: a tensor of ``dtype`` and a symbolic shape
    (``["batch", "seq", 1024]``)."""

    name: str
    dtype: str
    shape: tuple[str | Dim, ...]

    def _validate(self) -> None:
        if self.dtype not in MODEL_DTYPES:
            raise ValueError(f"dtype {self.dtype!r} is not one of {MODEL_DTYPES}")


@dataclass(frozen=True)
class ModelWeight(_Coded):
    """A parameter or buffer the compiled graph takes as an input, bound at load from the
    service's own module by ``name`` (its ``named_parameters``/``named_buffers`` name)."""

    name: str
    kind: str  # "parameter" or "buffer"
    dtype: str
    shape: tuple[Dim, ...]
    stride: tuple[Dim, ...]

    def _validate(self) -> None:
        if len(self.shape) != len(self.stride):
            raise ValueError("shape and stride must be integer lists of one length")
        if self.kind not in ("parameter", "buffer"):
            raise ValueError("kind must be 'parameter' or 'buffer'")


@dataclass(frozen=True)
class ModelBucket(_Coded):
    """One bucket: ``bucket`` holds one upper bound per dimension. ``impl`` says what serves
    it (MODEL_IMPLS): ``compiled``, the artifact in ``entry``; ``eager``, the service's
    module itself (no artifact; ``entry`` is empty). ``graph``: on CUDA, replayed from a
    CUDA graph captured once, or (false) called directly. ``mode``: the Inductor mode that
    compiled the artifact, when the recipe compiled several (else empty). The build chose
    what measured fastest on its GPU (``metrics["timed_us"]`` holds every time)."""

    bucket: tuple[Count, ...]
    entry: str
    metrics: Mapping[str, Any] = field(default_factory=dict)
    impl: str = "compiled"  # bundles from before eager buckets existed
    graph: bool = True  # bundles from before direct buckets: all graphs
    mode: str = field(
        default="", metadata=codec.spec(omit_default=True, note="only a compiled bucket has one")
    )

    def _validate(self) -> None:
        if self.impl not in MODEL_IMPLS:
            raise ValueError(f"impl {self.impl!r} is not one of {MODEL_IMPLS}; a newer aotc "
                             "wrote this bundle")  # fmt: skip
        if self.impl == "eager" and self.entry:
            raise ValueError("an eager bucket must have no entry")
        if self.impl == "compiled" and not self.entry:
            raise ValueError("a compiled bucket must name its entry")
        if self.mode and self.impl != "compiled":
            raise ValueError("mode must be a string, and only a compiled bucket has one")


@dataclass(frozen=True)
class ModelArtifacts(_Coded):
    """Every bucket compiled for one device kind: ``target`` is a recipe target's name
    (``device == "cuda"``) or ``"cpu"``. Inductor's artifacts only load into the torch
    they were built with, on the device kind they were built for: both are recorded so the
    loader refuses a mismatch with a clear message instead of a failed assert inside torch.
    """

    target: str
    device: str
    device_name: str  # the GPU the build ran on ("NVIDIA H200"), or the CPU's description
    cc: tuple[Small, Small] | None  # compute capability of that GPU; None on the CPU
    torch: str  # torch.__version__ at build
    mode: str  # the recipe's Inductor mode(s): "default", "max-autotune", "max-autotune+default"
    buckets: tuple[ModelBucket, ...]
    backend: str = "inductor"  # one of MODEL_BACKENDS; bundles from before aoti: inductor

    def _validate(self) -> None:
        if self.device not in MODEL_DEVICES:
            raise ValueError(f"device {self.device!r} is not one of {MODEL_DEVICES}")
        if self.backend not in MODEL_BACKENDS:
            raise ValueError(f"backend {self.backend!r} is not one of {MODEL_BACKENDS}; a "
                             "newer aotc wrote this bundle")  # fmt: skip


@dataclass(frozen=True)
class ModelSpec(_Coded):
    """A PyTorch module compiled ahead of time per bucket (see aot/model.py and
    loader/model.py). ``weights`` are the compiled graph's leading inputs, in the export
    graph signature's order; the user inputs follow them. ``outputs`` (symbolic shapes)
    say which output dimensions are sliced back after padding; empty when none are."""

    name: str
    source: str  # "path/to/file.py:factory" as the recipe wrote it
    dtype: str
    inputs: tuple[ModelInput, ...]
    outputs: tuple[tuple[str | Dim, ...], ...]
    single_output: bool  # forward returned a tensor, not a tuple of them
    dims: tuple[str, ...]
    buckets: tuple[tuple[Count, ...], ...]  # per dim, ascending upper bounds
    pad: tuple[str, ...]  # dims a call may pad up to its bucket
    weights: tuple[ModelWeight, ...]
    artifacts: tuple[ModelArtifacts, ...]

    def _validate(self) -> None:
        check_bounds(self.dims, self.buckets)
        if any(p not in self.dims for p in self.pad):
            raise ValueError("pad names a dimension not in dims")
        n = math.prod(len(b) for b in self.buckets)
        for i, a in enumerate(self.artifacts):
            if len(a.buckets) != n or any(len(b.bucket) != len(self.dims) for b in a.buckets):
                raise ValueError(f"artifacts[{i}] must hold one artifact per bucket ({n})")
