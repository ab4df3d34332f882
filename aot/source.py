"""A recipe's kernels matched with their ``@triton.jit`` functions, and hashed."""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from typing import Any

from .kernelfile import jit_function, load_module, shipped
from .recipe import KernelRecipe, Recipe

__all__ = ["KernelSource", "jit_function", "load_module", "resolve"]


@dataclass(frozen=True)
class KernelSource:
    """A recipe kernel matched against its Triton function."""

    fn: Any  # triton.runtime.JITFunction
    arg_names: tuple[str, ...]  # every parameter, in order
    constexprs: tuple[str, ...]  # the constexpr parameters
    cache_key: str  # Triton's hash of the source and the jit functions it calls
    file_sha256: str


def resolve(recipe: Recipe, kr: KernelRecipe) -> KernelSource:
    """The kernel's JIT function (the recipe's parser already checked it against the
    recipe) with the hashes its compiled variants and measurements are keyed by."""
    jit = shipped(kr.source, kr.function).jit
    return KernelSource(
        fn=jit,
        arg_names=tuple(p.name for p in jit.params),
        constexprs=tuple(p.name for p in jit.params if p.is_constexpr),
        cache_key=jit.cache_key,
        file_sha256=hashlib.sha256(kr.source.read_bytes()).hexdigest(),
    )
