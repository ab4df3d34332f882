"""``[kernel.call]``: launch values that are not kernel arguments.

A host wrapper often launches over something it computed, ``grid = (n_rows,)``, where
``n_rows`` is no argument of the kernel. Such a value is declared here: taken from an
argument's shape (``n_rows = "shape(X, 0)"``; the caller may pass it by keyword too), or
passed by the caller by keyword only (``num_tokens = "keyword"``). Grids, buckets, sizes,
derived values and constraints may read it.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from ..shipped import Shipped
from .validate import IDENT, Validator, show

KEYWORD = "keyword"
_SHAPE = re.compile(r"^shape\(\s*([A-Za-z_][A-Za-z0-9_]*)\s*,\s*([0-9]{1,2})\s*\)\Z")


@dataclass(frozen=True)
class CallValue:
    """A launch value: by keyword, or dimension ``dim`` of argument ``arg``'s shape."""

    name: str
    arg: str | None = None
    dim: int = 0
    # The rank of ``arg`` in the recipe's example: a call whose tensor has another rank is
    # refused (dimension 0 of a 3-D tensor is no row count), unless the value is passed.
    rank: int | None = None

    @property
    def text(self) -> str:
        return KEYWORD if self.arg is None else f"shape({self.arg}, {self.dim})"


def parse_call(v: Validator, k: Mapping[str, Any], w: str, kernel: Shipped) -> dict[str, CallValue]:
    params = {p.name for p in kernel.params}
    runtime = [p.name for p in kernel.runtime]
    out: dict[str, CallValue] = {}
    for name, raw in v.table(k, "call", w).items():
        key = f"{w}.call.{name}"
        if not IDENT.match(name):
            v.fail(key, "a call value's name must be an identifier")
        if name in runtime:
            v.fail(key, f"{name} is a parameter of {kernel.name}; call values are the launch "
                   "values that are not")  # fmt: skip
        if name in params:  # a constexpr: each value its own variant, chosen per call
            v.fail(key, f"{name} is a constexpr parameter of {kernel.name}; name the call "
                   f'value otherwise and derive {name} from it: call = {{ {name}_ = ... }}, '
                   f'derived = {{ {name} = "{name}_" }}')  # fmt: skip
        if raw == KEYWORD:
            out[name] = CallValue(name)
            continue
        m = _SHAPE.match(raw) if isinstance(raw, str) else None
        if m is None:
            v.fail(key, f'{show(raw)}: give "keyword" (the caller passes it) or "shape(ARG, '
                   'DIM)" (a dimension of an argument\'s shape)')  # fmt: skip
        arg, dim = m.group(1), int(m.group(2))
        if arg not in runtime:
            v.fail(key, f"{arg} is not a runtime argument of {kernel.name} "
                   f"({', '.join(runtime)})")  # fmt: skip
        out[name] = CallValue(name, arg, dim)
    return out
