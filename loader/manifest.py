"""The bundle manifest: typed, frozen, validated at the edge.

The builder constructs these dataclasses and serializes them with ``to_json``; the loader
parses them back with ``from_json``. Both sides therefore share one definition of what a
bundle promises: everything needed to launch a kernel without Triton.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, TypeVar

from .errors import BundleError

SCALAR_TYPES = frozenset(
    {
        "i1",
        "i8",
        "i16",
        "i32",
        "i64",
        "u1",
        "u8",
        "u16",
        "u32",
        "u64",
        "fp16",
        "bf16",
        "fp32",
        "fp64",
    }
)
INT_TYPES = frozenset({"i1", "i8", "i16", "i32", "i64", "u1", "u8", "u16", "u32", "u64"})
ELEMENT_TYPES = frozenset(
    {
        "i1",
        "i8",
        "i16",
        "i32",
        "i64",
        "u8",
        "u16",
        "u32",
        "u64",
        "fp8e4nv",
        "fp8e5",
        "fp16",
        "bf16",
        "fp32",
        "fp64",
    }
)
# Triton 3.6 appends two pointers to every kernel: global scratch and profile scratch.
TRITON_SCRATCH_ARGS = 2
# Triton's specializations: a pointer/int divisible by 16, or an int equal to 1 (which
# Triton turns into a compile-time constant and drops from the parameter list).
ASSUMPTIONS = (16, 1)


class ManifestError(BundleError):
    pass


T = TypeVar("T")


def _get(obj: Any, key: str, kind: type[T] | tuple[type, ...], where: str) -> T:
    if not isinstance(obj, dict) or key not in obj:
        raise ManifestError(f"manifest: {where}.{key} is missing")
    value = obj[key]
    if not isinstance(value, kind) or (kind is int and isinstance(value, bool)):
        raise ManifestError(f"manifest: {where}.{key} has the wrong type")
    return value  # type: ignore[return-value]


def _int_map(obj: Any, where: str) -> dict[str, int]:
    if not isinstance(obj, dict) or not all(
        isinstance(v, int) and not isinstance(v, bool) for v in obj.values()
    ):
        raise ManifestError(f"manifest: {where} must map names to integers")
    return dict(obj)


@dataclass(frozen=True)
class Param:
    """A runtime argument, in call order. ``type`` is Triton's: ``*fp16``, ``i32``, ``*T``."""

    name: str
    type: str

    @property
    def is_pointer(self) -> bool:
        return self.type.startswith("*")

    def to_json(self) -> dict[str, Any]:
        return {"name": self.name, "type": self.type}

    @staticmethod
    def from_json(obj: Any, where: str) -> Param:
        return Param(_get(obj, "name", str, where), _get(obj, "type", str, where))


@dataclass(frozen=True)
class Target:
    """A build target. ``device_names`` match the running GPU's name (empty: arch only)."""

    name: str
    arch: str
    cc: tuple[int, int]
    sms: int
    device_names: tuple[str, ...] = ()

    def to_json(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "arch": self.arch,
            "cc": list(self.cc),
            "sms": self.sms,
            "device_names": list(self.device_names),
        }

    @staticmethod
    def from_json(obj: Any, where: str) -> Target:
        cc = _get(obj, "cc", list, where)
        if len(cc) != 2 or not all(isinstance(c, int) for c in cc):
            raise ManifestError(f"manifest: {where}.cc must be [major, minor]")
        return Target(
            name=_get(obj, "name", str, where),
            arch=_get(obj, "arch", str, where),
            cc=(cc[0], cc[1]),
            sms=_get(obj, "sms", int, where),
            device_names=tuple(_get(obj, "device_names", list, where)),
        )


@dataclass(frozen=True)
class Variant:
    """One compiled cubin: a config under one set of specialization assumptions."""

    id: str
    entry: str
    function: str
    num_warps: int
    num_stages: int
    shared: int
    regs: int
    meta: Mapping[str, int]
    assume: Mapping[str, int]
    # Names of the parameters passed to cuLaunchKernel, in order; params assumed == 1 are
    # compiled in as constants and absent. TRITON_SCRATCH_ARGS null pointers follow them.
    abi: tuple[str, ...]
    scratch_args: int = TRITON_SCRATCH_ARGS

    def to_json(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "entry": self.entry,
            "function": self.function,
            "num_warps": self.num_warps,
            "num_stages": self.num_stages,
            "shared": self.shared,
            "regs": self.regs,
            "meta": dict(self.meta),
            "assume": dict(self.assume),
            "abi": list(self.abi),
            "scratch_args": self.scratch_args,
        }

    @staticmethod
    def from_json(obj: Any, where: str) -> Variant:
        assume = _int_map(_get(obj, "assume", dict, where), f"{where}.assume")
        if any(v not in ASSUMPTIONS for v in assume.values()):
            raise ManifestError(f"manifest: {where}.assume values must be 16 or 1")
        return Variant(
            id=_get(obj, "id", str, where),
            entry=_get(obj, "entry", str, where),
            function=_get(obj, "function", str, where),
            num_warps=_get(obj, "num_warps", int, where),
            num_stages=_get(obj, "num_stages", int, where),
            shared=_get(obj, "shared", int, where),
            regs=_get(obj, "regs", int, where),
            meta=_int_map(_get(obj, "meta", dict, where), f"{where}.meta"),
            assume=assume,
            abi=tuple(_get(obj, "abi", list, where)),
            scratch_args=_get(obj, "scratch_args", int, where),
        )

    @property
    def specificity(self) -> int:
        return len(self.assume)


@dataclass(frozen=True)
class Choice:
    """The selection for one bucket: which variants serve it (most specialized first)."""

    bucket: tuple[int, ...]
    config: str
    how: str
    variants: tuple[str, ...]
    metrics: Mapping[str, Any] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "bucket": list(self.bucket),
            "config": self.config,
            "how": self.how,
            "variants": list(self.variants),
        }
        if self.metrics:
            out["metrics"] = dict(self.metrics)
        return out

    @staticmethod
    def from_json(obj: Any, where: str) -> Choice:
        return Choice(
            bucket=tuple(_get(obj, "bucket", list, where)),
            config=_get(obj, "config", str, where),
            how=_get(obj, "how", str, where),
            variants=tuple(_get(obj, "variants", list, where)),
            metrics=dict(obj.get("metrics", {})),
        )


@dataclass(frozen=True)
class Instance:
    """A kernel for one target and one binding of its dtype variables."""

    target: str
    dtypes: Mapping[str, str]
    variants: Mapping[str, Variant]
    choices: tuple[Choice, ...]

    def to_json(self) -> dict[str, Any]:
        return {
            "target": self.target,
            "dtypes": dict(self.dtypes),
            "variants": [self.variants[k].to_json() for k in sorted(self.variants)],
            "choices": [c.to_json() for c in self.choices],
        }

    @staticmethod
    def from_json(obj: Any, where: str) -> Instance:
        variants = {}
        for i, v in enumerate(_get(obj, "variants", list, where)):
            var = Variant.from_json(v, f"{where}.variants[{i}]")
            variants[var.id] = var
        choices = _parse_list(obj, "choices", Choice.from_json, where)
        for c in choices:
            missing = [v for v in c.variants if v not in variants]
            if missing or not c.variants:
                raise ManifestError(f"manifest: {where}: bucket {c.bucket} names no known variant")
        return Instance(
            target=_get(obj, "target", str, where),
            dtypes=dict(_get(obj, "dtypes", dict, where)),
            variants=variants,
            choices=choices,
        )


@dataclass(frozen=True)
class KernelSpec:
    name: str
    params: tuple[Param, ...]
    dtype_vars: Mapping[str, tuple[str, ...]]
    grid: tuple[str, str, str]
    bucket_keys: tuple[str, ...]
    buckets: tuple[tuple[int, ...], ...]  # boundaries, one sorted tuple per key
    instances: tuple[Instance, ...]

    def to_json(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "params": [p.to_json() for p in self.params],
            "dtype_vars": {k: list(v) for k, v in self.dtype_vars.items()},
            "grid": list(self.grid),
            "bucket_keys": list(self.bucket_keys),
            "buckets": [list(b) for b in self.buckets],
            "instances": [i.to_json() for i in self.instances],
        }

    @staticmethod
    def from_json(obj: Any, where: str) -> KernelSpec:
        name = _get(obj, "name", str, where)
        where = f"kernel {name!r}"
        grid = _get(obj, "grid", list, where)
        if len(grid) != 3:
            raise ManifestError(f"manifest: {where}.grid must have 3 entries")
        return KernelSpec(
            name=name,
            params=_parse_list(obj, "params", Param.from_json, where),
            dtype_vars={k: tuple(v) for k, v in _get(obj, "dtype_vars", dict, where).items()},
            grid=(grid[0], grid[1], grid[2]),
            bucket_keys=tuple(_get(obj, "bucket_keys", list, where)),
            buckets=tuple(tuple(b) for b in _get(obj, "buckets", list, where)),
            instances=_parse_list(obj, "instances", Instance.from_json, where),
        )


ROLES = ("input", "output", "weight", "scratch")


@dataclass(frozen=True)
class PipelineTensor:
    """A tensor of a pipeline. ``shape`` holds integer expressions over the pipeline's
    dimensions (``"M"``, ``"4096"``); row-major and contiguous. ``role``: one of ROLES."""

    name: str
    dtype: str
    shape: tuple[str, ...]
    role: str

    def to_json(self) -> dict[str, Any]:
        return {"name": self.name, "dtype": self.dtype, "shape": list(self.shape),
                "role": self.role}  # fmt: skip

    @staticmethod
    def from_json(obj: Any, where: str) -> PipelineTensor:
        name = _get(obj, "name", str, where)
        role = _get(obj, "role", str, where)
        dtype = _get(obj, "dtype", str, where)
        shape = _get(obj, "shape", list, where)
        if role not in ROLES or dtype not in ELEMENT_TYPES:
            raise ManifestError(f"manifest: {where} ({name}): unknown role or dtype")
        if not all(isinstance(s, str) for s in shape):
            raise ManifestError(f"manifest: {where}.shape must list expressions")
        return PipelineTensor(name, dtype, tuple(shape), role)


@dataclass(frozen=True)
class PipelineStep:
    """One kernel call. ``args`` follow the kernel's params: a tensor name for a pointer,
    an integer expression over the pipeline's dimensions for an integer, a number for a
    float."""

    kernel: str
    args: tuple[str | float, ...]

    def to_json(self) -> dict[str, Any]:
        return {"kernel": self.kernel, "args": list(self.args)}

    @staticmethod
    def from_json(obj: Any, where: str) -> PipelineStep:
        args = _get(obj, "args", list, where)
        if not all(isinstance(a, str | int | float) and not isinstance(a, bool) for a in args):
            raise ManifestError(f"manifest: {where}.args must be names, expressions or numbers")
        return PipelineStep(_get(obj, "kernel", str, where), tuple(args))


@dataclass(frozen=True)
class PipelineSpec:
    """A named sequence of kernel calls over named tensors, captured by the loader as one
    CUDA graph per bucket of ``dims`` (see loader/pipeline.py)."""

    name: str
    dims: tuple[str, ...]
    buckets: tuple[tuple[int, ...], ...]  # per dim, ascending upper bounds
    tensors: tuple[PipelineTensor, ...]
    steps: tuple[PipelineStep, ...]

    def to_json(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "dims": list(self.dims),
            "buckets": [list(b) for b in self.buckets],
            "tensors": [t.to_json() for t in self.tensors],
            "steps": [s.to_json() for s in self.steps],
        }

    @staticmethod
    def from_json(obj: Any, where: str) -> PipelineSpec:
        name = _get(obj, "name", str, where)
        where = f"pipeline {name!r}"
        dims, buckets = _bounds(obj, where)
        return PipelineSpec(
            name=name,
            dims=dims,
            buckets=buckets,
            tensors=_parse_list(obj, "tensors", PipelineTensor.from_json, where),
            steps=_parse_list(obj, "steps", PipelineStep.from_json, where),
        )

    def tensor(self, name: str) -> PipelineTensor:
        for t in self.tensors:
            if t.name == name:
                return t
        raise KeyError(name)


@dataclass(frozen=True)
class Manifest:
    name: str
    version: str
    provenance: Mapping[str, Any]
    targets: tuple[Target, ...]
    kernels: tuple[KernelSpec, ...]
    build: Mapping[str, Any] = field(default_factory=dict)
    pipelines: tuple[PipelineSpec, ...] = ()
    model: ModelSpec | None = None

    def to_json(self) -> dict[str, Any]:
        out = {
            "bundle": {"name": self.name, "version": self.version},
            "provenance": dict(self.provenance),
            "targets": [t.to_json() for t in self.targets],
            "kernels": [k.to_json() for k in self.kernels],
            "build": dict(self.build),
        }
        if self.pipelines:  # absent rather than empty: bundles without any stay as they were
            out["pipelines"] = [p.to_json() for p in self.pipelines]
        if self.model is not None:
            out["model"] = self.model.to_json()
        return out

    @staticmethod
    def from_json(obj: Any) -> Manifest:
        bundle = _get(obj, "bundle", dict, "")
        return Manifest(
            name=_get(bundle, "name", str, "bundle"),
            version=_get(bundle, "version", str, "bundle"),
            provenance=_get(obj, "provenance", dict, ""),
            targets=_parse_list(obj, "targets", Target.from_json),
            kernels=_parse_list(obj, "kernels", KernelSpec.from_json),
            build=obj.get("build", {}),
            pipelines=_parse_list(obj, "pipelines", PipelineSpec.from_json)
            if "pipelines" in obj
            else (),
            model=ModelSpec.from_json(obj["model"]) if "model" in obj else None,
        )

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


def _parse_list(
    obj: Any, key: str, parse: Callable[[Any, str], T], where: str = ""
) -> tuple[T, ...]:
    """``obj[key]``, a list, each item parsed with its place (``where.key[i]``) named."""
    at = f"{where}.{key}" if where else key
    return tuple(parse(x, f"{at}[{i}]") for i, x in enumerate(_get(obj, key, list, where)))


def _bounds(obj: Any, where: str) -> tuple[tuple[str, ...], tuple[tuple[int, ...], ...]]:
    """``dims`` and ``buckets``: one list of integer bucket bounds per dimension."""
    dims = tuple(_get(obj, "dims", list, where))
    buckets = tuple(tuple(b) for b in _get(obj, "buckets", list, where))
    if len(dims) != len(buckets) or not all(
        b and all(isinstance(x, int) for x in b) for b in buckets
    ):
        raise ManifestError(f"manifest: {where}: one list of bucket bounds per dimension")
    return dims, buckets


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


def _dims(raw: Any, where: str) -> tuple[str | int, ...]:
    """A symbolic shape: dimension names and fixed sizes."""
    if not isinstance(raw, list) or not all(
        isinstance(d, str) or (isinstance(d, int) and not isinstance(d, bool)) for d in raw
    ):
        raise ManifestError(f"manifest: {where} must list dimension names and sizes")
    return tuple(raw)


@dataclass(frozen=True)
class ModelInput:
    """One positional argument of ``forward``: a tensor of ``dtype`` and a symbolic shape
    (``["batch", "seq", 1024]``)."""

    name: str
    dtype: str
    shape: tuple[str | int, ...]

    def to_json(self) -> dict[str, Any]:
        return {"name": self.name, "dtype": self.dtype, "shape": list(self.shape)}

    @staticmethod
    def from_json(obj: Any, where: str) -> ModelInput:
        dtype = _get(obj, "dtype", str, where)
        if dtype not in MODEL_DTYPES:
            raise ManifestError(f"manifest: {where}.dtype {dtype!r} is not one of {MODEL_DTYPES}")
        return ModelInput(
            _get(obj, "name", str, where), dtype, _dims(_get(obj, "shape", list, where), where)
        )


@dataclass(frozen=True)
class ModelWeight:
    """A parameter or buffer the compiled graph takes as an input, bound at load from the
    service's own module by ``name`` (its ``named_parameters``/``named_buffers`` name)."""

    name: str
    kind: str  # "parameter" or "buffer"
    dtype: str
    shape: tuple[int, ...]
    stride: tuple[int, ...]

    def to_json(self) -> dict[str, Any]:
        return {"name": self.name, "kind": self.kind, "dtype": self.dtype,
                "shape": list(self.shape), "stride": list(self.stride)}  # fmt: skip

    @staticmethod
    def from_json(obj: Any, where: str) -> ModelWeight:
        shape = _get(obj, "shape", list, where)
        stride = _get(obj, "stride", list, where)
        if not all(isinstance(x, int) for x in (*shape, *stride)) or len(shape) != len(stride):
            raise ManifestError(f"manifest: {where}: shape and stride must be integer lists")
        kind = _get(obj, "kind", str, where)
        if kind not in ("parameter", "buffer"):
            raise ManifestError(f"manifest: {where}.kind must be 'parameter' or 'buffer'")
        return ModelWeight(
            _get(obj, "name", str, where), kind, _get(obj, "dtype", str, where),
            tuple(shape), tuple(stride),
        )  # fmt: skip


@dataclass(frozen=True)
class ModelBucket:
    """One bucket: ``bucket`` holds one upper bound per dimension. ``impl`` says what serves
    it (MODEL_IMPLS): ``compiled``, the artifact in ``entry``; ``eager``, the service's
    module itself (no artifact; ``entry`` is empty). ``graph``: on CUDA, replayed from a
    CUDA graph captured once, or (false) called directly. ``mode``: the Inductor mode that
    compiled the artifact, when the recipe compiled several (else empty). The build chose
    what measured fastest on its GPU (``metrics["timed_us"]`` holds every time)."""

    bucket: tuple[int, ...]
    entry: str
    metrics: Mapping[str, Any] = field(default_factory=dict)
    impl: str = "compiled"
    graph: bool = True
    mode: str = ""

    def to_json(self) -> dict[str, Any]:
        out = {"bucket": list(self.bucket), "entry": self.entry, "impl": self.impl,
               "graph": self.graph, "metrics": dict(self.metrics)}  # fmt: skip
        if self.mode:
            out["mode"] = self.mode
        return out

    @staticmethod
    def from_json(obj: Any, where: str) -> ModelBucket:
        bucket = _get(obj, "bucket", list, where)
        if not all(isinstance(b, int) for b in bucket):
            raise ManifestError(f"manifest: {where}.bucket must list integers")
        entry = _get(obj, "entry", str, where)
        impl = obj.get("impl", "compiled")  # bundles from before eager buckets existed
        if impl not in MODEL_IMPLS:
            raise ManifestError(f"manifest: {where}.impl {impl!r} is not one of "
                                f"{MODEL_IMPLS}; a newer aotc wrote this bundle")  # fmt: skip
        if impl == "eager" and entry:
            raise ManifestError(f"manifest: {where}: an eager bucket must have no entry")
        if impl == "compiled" and not entry:
            raise ManifestError(f"manifest: {where}: a compiled bucket must name its entry")
        graph = obj.get("graph", True)  # bundles from before direct buckets: all graphs
        if not isinstance(graph, bool):
            raise ManifestError(f"manifest: {where}.graph must be true or false")
        mode = obj.get("mode", "")
        if not isinstance(mode, str) or (mode and impl != "compiled"):
            raise ManifestError(f"manifest: {where}.mode must be a string, and only a "
                                "compiled bucket has one")  # fmt: skip
        metrics = dict(obj.get("metrics", {}))
        return ModelBucket(tuple(bucket), entry, metrics, impl, graph, mode)


@dataclass(frozen=True)
class ModelArtifacts:
    """Every bucket compiled for one device kind: ``target`` is a recipe target's name
    (``device == "cuda"``) or ``"cpu"``. Inductor's artifacts only load into the torch
    they were built with, on the device kind they were built for: both are recorded so the
    loader refuses a mismatch with a clear message instead of a failed assert inside torch.
    """

    target: str
    device: str
    device_name: str  # the GPU the build ran on ("NVIDIA H200"), or the CPU's description
    cc: tuple[int, int] | None  # compute capability of that GPU; None on the CPU
    torch: str  # torch.__version__ at build
    mode: str  # the recipe's Inductor mode(s): "default", "max-autotune", "max-autotune+default"
    buckets: tuple[ModelBucket, ...]
    backend: str = "inductor"  # one of MODEL_BACKENDS

    def to_json(self) -> dict[str, Any]:
        return {
            "target": self.target,
            "device": self.device,
            "device_name": self.device_name,
            "cc": list(self.cc) if self.cc is not None else None,
            "torch": self.torch,
            "mode": self.mode,
            "backend": self.backend,
            "buckets": [b.to_json() for b in self.buckets],
        }

    @staticmethod
    def from_json(obj: Any, where: str) -> ModelArtifacts:
        device = _get(obj, "device", str, where)
        if device not in MODEL_DEVICES:
            raise ManifestError(f"manifest: {where}.device {device!r} is not one of "
                                f"{MODEL_DEVICES}")  # fmt: skip
        backend = obj.get("backend", "inductor")
        if backend not in MODEL_BACKENDS:
            raise ManifestError(f"manifest: {where}.backend {backend!r} is not one of "
                                f"{MODEL_BACKENDS}; a newer aotc wrote this bundle")  # fmt: skip
        cc = obj.get("cc")
        if cc is not None and (
            not isinstance(cc, list) or len(cc) != 2 or not all(isinstance(c, int) for c in cc)
        ):
            raise ManifestError(f"manifest: {where}.cc must be [major, minor] or null")
        return ModelArtifacts(
            target=_get(obj, "target", str, where),
            device=device,
            device_name=_get(obj, "device_name", str, where),
            cc=(cc[0], cc[1]) if cc is not None else None,
            torch=_get(obj, "torch", str, where),
            mode=_get(obj, "mode", str, where),
            buckets=_parse_list(obj, "buckets", ModelBucket.from_json, where),
            backend=backend,
        )


@dataclass(frozen=True)
class ModelSpec:
    """A PyTorch module compiled ahead of time per bucket (see aot/model.py and
    loader/model.py). ``weights`` are the compiled graph's leading inputs, in the export
    graph signature's order; the user inputs follow them. ``outputs`` (symbolic shapes)
    say which output dimensions are sliced back after padding; empty when none are."""

    name: str
    source: str  # "path/to/file.py:factory" as the recipe wrote it
    dtype: str
    inputs: tuple[ModelInput, ...]
    outputs: tuple[tuple[str | int, ...], ...]
    single_output: bool  # forward returned a tensor, not a tuple of them
    dims: tuple[str, ...]
    buckets: tuple[tuple[int, ...], ...]  # per dim, ascending upper bounds
    pad: tuple[str, ...]  # dims a call may pad up to its bucket
    weights: tuple[ModelWeight, ...]
    artifacts: tuple[ModelArtifacts, ...]

    def to_json(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "source": self.source,
            "dtype": self.dtype,
            "inputs": [i.to_json() for i in self.inputs],
            "outputs": [list(o) for o in self.outputs],
            "single_output": self.single_output,
            "dims": list(self.dims),
            "buckets": [list(b) for b in self.buckets],
            "pad": list(self.pad),
            "weights": [w.to_json() for w in self.weights],
            "artifacts": [a.to_json() for a in self.artifacts],
        }

    @staticmethod
    def from_json(obj: Any, where: str = "model") -> ModelSpec:
        dims, buckets = _bounds(obj, where)
        pad = tuple(_get(obj, "pad", list, where))
        if any(p not in dims for p in pad):
            raise ManifestError(f"manifest: {where}.pad names a dimension not in dims")
        spec = ModelSpec(
            name=_get(obj, "name", str, where),
            source=_get(obj, "source", str, where),
            dtype=_get(obj, "dtype", str, where),
            inputs=_parse_list(obj, "inputs", ModelInput.from_json, where),
            outputs=_parse_list(obj, "outputs", _dims, where),
            single_output=_get(obj, "single_output", bool, where),
            dims=dims,
            buckets=buckets,
            pad=pad,
            weights=_parse_list(obj, "weights", ModelWeight.from_json, where),
            artifacts=_parse_list(obj, "artifacts", ModelArtifacts.from_json, where),
        )
        n = 1
        for b in buckets:
            n *= len(b)
        for i, a in enumerate(spec.artifacts):
            if len(a.buckets) != n or any(len(b.bucket) != len(dims) for b in a.buckets):
                raise ManifestError(
                    f"manifest: {where}.artifacts[{i}] must hold one artifact per bucket ({n})"
                )
        return spec
