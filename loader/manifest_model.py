"""The manifest's model records: a PyTorch ``nn.Module`` compiled per bucket by
TorchInductor (a recipe's ``[model]``), as the builder (aot/model/) writes it and the
model loader (loader/model.py) reads it. Re-exported by ``loader.manifest``.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from . import codec
from .manifest_types import Coded, Count, Dim, Small, check_bounds

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
class ModelInput(Coded):
    """One positional argument of ``forward``: a tensor of ``dtype`` and a symbolic shape
    (``["batch", "seq", 1024]``)."""

    name: str
    dtype: str
    shape: tuple[str | Dim, ...]

    def _validate(self) -> None:
        if self.dtype not in MODEL_DTYPES:
            raise ValueError(f"dtype {self.dtype!r} is not one of {MODEL_DTYPES}")


@dataclass(frozen=True)
class ModelWeight(Coded):
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
class ModelBucket(Coded):
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
class ModelArtifacts(Coded):
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
class ModelSpec(Coded):
    """A PyTorch module compiled ahead of time per bucket (see aot/model/ and
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
