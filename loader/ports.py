"""A pipeline's inputs and outputs: where a call's tensor goes, and how it is checked
(loader/pipeline.py)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from . import args as _args
from .errors import ArgumentError
from .manifest import PipelineTensor


class Port:
    """An input or output: where a call's tensor goes, and how to check it."""

    def __init__(self, t: PipelineTensor, dims: Sequence[str]):
        self.name = t.name
        self.dtype = t.dtype
        lead = t.shape[0]
        # Which dimension the first axis is (-1: a fixed size), and the fixed rest.
        self.dim = dims.index(lead) if lead in dims else -1
        self.fixed_lead = -1 if self.dim >= 0 else int(lead)
        self.rest = tuple(int(s) for s in t.shape[1:])
        row = _args.ITEMSIZE[t.dtype]
        for s in self.rest:
            row *= s
        self.row_bytes = row
        self.pad = None if t.pad is None else _args.element_bytes(t.dtype, t.pad)
        # The caller's dtype object (a torch.dtype) once a full check accepted it: later
        # calls compare identities instead of names.
        self.dtype_obj: Any = None

    def describe(self, dims: Sequence[str]) -> str:
        lead = dims[self.dim] if self.dim >= 0 else str(self.fixed_lead)
        return f"[{', '.join([lead, *map(str, self.rest)])}] {self.dtype}"


def checked(obj: Any, name: str, dtype: str, pipeline: str) -> tuple[int, str | None]:
    addr, have = _args.pointer(obj, name)
    if have is not None and have != dtype:
        raise ArgumentError(f"pipeline {pipeline!r}: {name!r} has element type {have}, "
                            f"expected {dtype}")  # fmt: skip
    if not _args.is_contiguous(obj):
        raise ArgumentError(f"pipeline {pipeline!r}: {name!r} must be contiguous "
                            "(row-major); pass .contiguous()")  # fmt: skip
    return addr, have
