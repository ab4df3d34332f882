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

from .kernel_meta import Meta
from .kernel_space import LAUNCH_OPTIONS
from .validate import Validator, show

MAX_RANK = 5  # TMA's


def parse_descriptors(
    v: Validator, k: Mapping[str, Any], w: str, signature: Mapping[str, str], meta: Meta
) -> dict[str, tuple[Expr, ...]]:
    raw = v.table(k, "descriptors", w)
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
