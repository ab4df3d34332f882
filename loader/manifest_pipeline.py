"""The manifest's pipeline records: named sequences of kernel calls, captured by the loader
as one CUDA graph per bucket (loader/pipeline.py). Re-exported by ``loader.manifest``,
which imports this module only when a manifest holds pipelines or a caller asks for them.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from . import codec
from .manifest_types import ELEMENT_TYPES, Coded, Count, check_bounds

ROLES = ("input", "output", "weight", "scratch", "state")


@dataclass(frozen=True)
class PipelineTensor(Coded):
    """A tensor of a pipeline. ``shape`` holds integer expressions over the pipeline's
    dimensions (``"M"``, ``"4096"``); row-major and contiguous. ``role``: one of ROLES
    ("state": bound at load like a weight, and written by the steps, as a KV cache is)."""

    name: str
    dtype: str
    shape: tuple[str, ...]
    role: str
    # An input's rows past a call's size, when it runs a larger bucket, hold this value
    # (a slot of -1 that writes nothing, a context length of 0); None: earlier data.
    # Checked with the pipeline's tensors (checks.py).
    pad: float | None = field(default=None, metadata=codec.spec(omit_default=True))

    def _validate(self) -> None:
        if self.role not in ROLES or self.dtype not in ELEMENT_TYPES:
            raise ValueError(f"({self.name}): unknown role or dtype")


@dataclass(frozen=True)
class PipelineStep(Coded):
    """One kernel call. ``args`` follow the kernel's params: a tensor name for a pointer,
    an integer expression over the pipeline's dimensions for an integer, a number for a
    float; then one integer expression per call value of the kernel. ``when``: a predicate
    of the dimensions, the buckets where the step runs (None: every bucket)."""

    kernel: str
    args: tuple[str | float, ...]
    when: str | None = field(default=None, metadata=codec.spec(omit_default=True))


@dataclass(frozen=True)
class PipelineSpec(Coded):
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
