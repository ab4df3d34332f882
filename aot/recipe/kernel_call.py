"""``[kernel.call]``: launch values that are not kernel arguments.

A host wrapper often launches over something it computed, ``grid = (n_rows,)``, where
``n_rows`` is no argument of the kernel. Such a value is declared here: read off an
argument, its shape (``n_rows = "shape(X, 0)"``) or its stride in elements (``row_stride =
"stride(X, 0)"``, as the wrapper passes ``X.stride(0)``), which the caller may also pass by
keyword; or passed by the caller by keyword only (``num_tokens = "keyword"``). Grids,
buckets, sizes, derived values and constraints may read it.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import Any, Literal

from ..shipped import Shipped
from .kernel_signature import Example
from .validate import IDENT, Validator, show

KEYWORD = "keyword"
_READ = re.compile(
    r"^(shape|stride)\(\s*([A-Za-z_][A-Za-z0-9_]*)\s*,\s*([0-9]{1,2})\s*\)\Z"
)  # fmt: skip
_FORMS = ('give "keyword" (the caller passes it), "shape(ARG, DIM)" (a dimension of an '
          'argument\'s shape) or "stride(ARG, DIM)" (its stride, in elements)')  # fmt: skip


@dataclass(frozen=True)
class CallValue:
    """A launch value: by keyword, or read off argument ``arg``: dimension ``dim`` of its
    shape, or (``of = "stride"``) that dimension's stride, in elements."""

    name: str
    arg: str | None = None
    dim: int = 0
    # The rank of ``arg`` in the recipe's example: a call whose tensor has another rank is
    # refused (dimension 0 of a 3-D tensor is no row count), unless the value is passed.
    rank: int | None = None
    of: Literal["shape", "stride"] = "shape"

    @property
    def text(self) -> str:
        return KEYWORD if self.arg is None else f"{self.of}({self.arg}, {self.dim})"


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
        m = _READ.match(raw) if isinstance(raw, str) else None
        if m is None:
            v.fail(key, f"{show(raw)}: {_FORMS}")
        of, arg, dim = m.group(1), m.group(2), int(m.group(3))
        if arg not in runtime:
            v.fail(key, f"{arg} is not a runtime argument of {kernel.name} "
                   f"({', '.join(runtime)})")  # fmt: skip
        out[name] = CallValue(name, arg, dim, of="stride" if of == "stride" else "shape")
    return out


def check_call(
    v: Validator,
    w: str,
    call: Mapping[str, CallValue],
    signature: Mapping[str, str],
    example: Example | None,
) -> dict[str, CallValue]:
    """Once the argument types are known: a shape or stride is read off a tensor, at a
    dimension the recipe's example has; each then records that example's rank."""
    out = dict(call)
    for name, c in call.items():
        if c.arg is None:
            continue
        key = f"{w}.call.{name}"
        if not signature.get(c.arg, "").startswith("*"):
            v.fail(key, f"{c.text}: {c.arg} is {signature.get(c.arg)}, no tensor; a {c.of} is "
                   'read off a tensor argument (or make it "keyword")')  # fmt: skip
        rank = example.rank(c.arg) if example is not None else None
        if rank is not None and c.dim >= rank:
            v.fail(key, f"{c.text}: {c.arg} is {rank}-D in the recipe's inputs, so its "
                   f"dimensions are 0 to {rank - 1}")  # fmt: skip
        if c.of == "stride" and example is not None:
            _example_stride(v, w, c, example)
        out[name] = replace(c, rank=rank)
    return out


def _example_stride(v: Validator, w: str, c: CallValue, example: Example) -> None:
    """The example's stride is the one its sizes name: ``inputs`` builds the tensor with
    it (a view of a wider tensor), or tuning would time a variant built for another."""
    want = example.sizes.get(c.name)
    method = getattr(example.values.get(c.arg or ""), "stride", None)
    if want is None or not callable(method):
        return
    got = method(c.dim)
    if got != want:
        v.fail(f"{w}.inputs", f"{c.name} = {c.text} is {got} in the arguments inputs "
               f"returned, but the sizes give {c.name} = {want} there: build {c.arg} with "
               f"that stride, e.g. a view of a wider tensor, torch.empty(rows, "
               f"sizes[{c.name!r}])[:, :cols]")  # fmt: skip
