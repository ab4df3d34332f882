"""``descriptors``: tensor arguments the kernel reads through TMA tensor descriptors.

The author's host code wraps such a tensor in ``TensorDescriptor(t, t.shape, t.stride(),
block_shape)``, the block shape following the chosen config. The recipe says which
arguments those are and their block shape, as expressions of meta-parameters::

    signature = { a_desc = "*T", ... }              # the tensor's element type
    descriptors = { a_desc = ["BLOCK_M", "BLOCK_K"], ... }

Each variant is compiled with the block its config gives (Triton's ``tensordesc<T[..]>``
signature), and the loader builds the descriptor from the tensor at every call.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from loader.expr import Expr, ExprError, parse

from ..heuristics import Untranslatable
from ..prehook import block_shapes
from ..shipped import Shipped
from .kernel_meta import Meta
from .kernel_space import LAUNCH_OPTIONS
from .validate import Validator, show

MAX_RANK = 5  # TMA's


def parse_descriptors(
    v: Validator,
    k: Mapping[str, Any],
    w: str,
    signature: Mapping[str, str],
    meta: Meta,
    kernel: Shipped,
) -> dict[str, tuple[Expr, ...]]:
    """The recipe's ``descriptors``; without it, what the autotune configs' pre_hooks set
    (when those configs are the search space)."""
    raw: Mapping[str, Any] = v.table(k, "descriptors", w)
    if not raw and meta.configs and kernel.autotune is not None:
        raw = _from_hooks(v, w, kernel)
    known = (set(meta.fixed) | set(meta.derived) | set(meta.searched)) - set(LAUNCH_OPTIONS)
    out: dict[str, tuple[Expr, ...]] = {}
    for name, block in raw.items():
        key = f"{w}.descriptors.{name}"
        if not signature.get(name, "").startswith("*"):
            v.fail(key, "is not a pointer argument of the kernel (a tensor passed as a "
                   "descriptor is typed like '*T' in the signature)")  # fmt: skip
        if not isinstance(block, list) or not 1 <= len(block) <= MAX_RANK:
            v.fail(key, f"must be the block shape, a list of 1 to {MAX_RANK} meta-parameter "
                   f"names or integers, e.g. ['BLOCK_M', 'BLOCK_K']; got "
                   f"{show(block)}")  # fmt: skip
        exprs = []
        for i, item in enumerate(block):
            if isinstance(item, bool) or not isinstance(item, int | str):
                v.fail(f"{key}[{i}]", f"must be a meta-parameter name, an expression of "
                       f"them or an integer; got {show(item)}")  # fmt: skip
            try:
                e = parse(str(item))
            except ExprError as exc:
                v.fail(f"{key}[{i}]", str(exc))
            unknown = sorted(e.names - known)
            if unknown:
                v.fail(f"{key}[{i}]", f"reads {', '.join(unknown)}, not a meta-parameter of "
                       "the kernel (fixed, space or derived)")  # fmt: skip
            exprs.append(e)
        out[name] = tuple(exprs)
    return out


def _from_hooks(v: Validator, w: str, kernel: Shipped) -> dict[str, list[str]]:
    """The block shapes every autotune config's pre_hook sets (aot/prehook.py)."""
    assert kernel.autotune is not None
    configs = kernel.autotune.configs
    if not any(c.pre_hook for c in configs):
        return {}
    found: dict[str, tuple[str, ...]] | None = None
    for i, c in enumerate(configs):
        where = f"{kernel.name}'s @triton.autotune config #{i + 1}"
        if not c.pre_hook:
            v.fail(f"{w}.source", f"{where} has no pre_hook while others set block shapes in "
                   f"theirs; give the block shapes under {w}.descriptors")  # fmt: skip
        try:
            shapes = block_shapes(c.hook)
        except Untranslatable as exc:
            v.fail(f"{w}.source", f"{where}: its pre_hook cannot be read as descriptor block "
                   f"shapes ({exc}); aotc cannot ship that host code: give the block shapes "
                   f"under {w}.descriptors, e.g. a_desc = [\"BLOCK_M\", \"BLOCK_K\"]")  # fmt: skip
        if found is not None and shapes != found:
            v.fail(f"{w}.source", f"{where}'s pre_hook sets other block shapes than config #1's; "
                   f"give them under {w}.descriptors")  # fmt: skip
        found = shapes
    return {name: list(block) for name, block in (found or {}).items()}
