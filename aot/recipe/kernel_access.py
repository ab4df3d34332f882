"""How a kernel touches its pointers, for checking the pipelines that use it
(aot/recipe/pipeline.py): each pointer's ``shapes`` and ``strides`` as expressions of the
integer arguments (a stride may also be a literal), and the pointers it ``writes``. A
dimension of a shape may be ``"*"``: any size, one the kernel is not told and indexes
only through data (a KV cache's blocks, through a block table)."""

from __future__ import annotations

import difflib
from collections.abc import Mapping
from typing import Any

from loader.expr import Expr
from loader.manifest import INT_TYPES

from .validate import Validator, sorted_names

MAX_RANK = 16  # dimensions of a tensor
ANY = "*"  # a shape's dimension of any size
Shape = tuple[Expr | None, ...]  # None: ANY
Access = tuple[dict[str, Shape], dict[str, Shape], tuple[str, ...]]


def parse_access(
    v: Validator, k: Mapping[str, Any], w: str, signature: Mapping[str, str]
) -> Access:
    """``shapes``, ``strides`` and ``writes``."""
    pointers = [p for p, t in signature.items() if t.startswith("*")]
    ints = {p for p, t in signature.items() if t in INT_TYPES}
    shapes = _dims(v, k, w, "shapes", pointers, ints)
    strides = _dims(v, k, w, "strides", pointers, ints)
    for pname, st in strides.items():
        if pname not in shapes:
            v.fail(f"{w}.strides.{pname}", f"give {pname}'s shape under {w}.shapes too")
        if len(st) != len(shapes[pname]):
            v.fail(f"{w}.strides.{pname}", f"has {len(st)} entries; shapes.{pname} has "
                   f"{len(shapes[pname])}")  # fmt: skip
    writes = v.choices(k.get("writes", []), f"{w}.writes", pointers, "pointer arguments",
                       "a pointer argument", '["c_ptr"]')  # fmt: skip
    return shapes, strides, tuple(writes)


def _dims(
    v: Validator, k: Mapping[str, Any], w: str, table: str, pointers: list[str], ints: set[str]
) -> dict[str, Shape]:
    out: dict[str, Shape] = {}
    for pname, raw in v.table(k, table, w).items():
        key = f"{w}.{table}.{pname}"
        if pname not in pointers:
            close = difflib.get_close_matches(pname, pointers, n=1)
            hint = f"did you mean {close[0]!r}?" if close else f"choose from {pointers}"
            v.fail(key, f"not a pointer argument; {hint}")
        if not isinstance(raw, list) or not raw or len(raw) > MAX_RANK:
            v.fail(
                key, f'must be a non-empty list of at most {MAX_RANK} expressions, e.g. ["M", "K"]'
            )
        hint = f"use integer arguments of the signature: {sorted_names(ints)}"
        if table == "shapes":
            hint += ', or "*" for a dimension of any size'
        elif ANY in raw:
            v.fail(key, '"*" is for shapes (a dimension of any size); every stride is an '
                   "integer argument or a literal")  # fmt: skip
        out[pname] = tuple(
            None if item == ANY and table == "shapes" else v.expr(item, key, ints, hint)
            for item in raw
        )
    return out
