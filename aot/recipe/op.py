"""The ``[[op]]`` tables: interchangeable kernels behind one name.

An op lists two or more of the recipe's kernels that do the same work in different ways
(the example's matmul and its persistent TMA form). Each is tuned on its own; the build
then routes every bucket to the kernel that measured fastest there (aot/ops.py), and the
loader's ``bundle[op]`` calls it. So that any of them can take a call, they must share
the bucket keys and bounds and the dtype variables, and each must take a subset of the
first kernel's parameters: the same names with the same types (an argument the first
takes as a pointer, another may read through a TMA descriptor built from the same
tensor).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from .kernel import KernelRecipe
from .validate import Validator, show

OP_KEYS = ("name", "kernels")


@dataclass(frozen=True)
class OpRecipe:
    name: str
    kernels: tuple[str, ...]  # in order of preference where nothing was measured


def parse_ops(
    v: Validator, raw: Any, kernels: Mapping[str, KernelRecipe], taken: set[str]
) -> tuple[OpRecipe, ...]:
    """Every ``[[op]]`` table, checked against the recipe's kernels (``taken``: the names
    of its kernels and pipelines, which an op may not reuse)."""
    if raw is None:
        return ()
    if not isinstance(raw, list):
        v.fail("[[op]]", "must be an array of tables: write [[op]]")
    out: list[OpRecipe] = []
    for i, t in enumerate(raw):
        if not isinstance(t, dict):
            v.fail(f"[[op]] #{i + 1}", "must be a table")
        v.keys(t, OP_KEYS, f"[[op]] #{i + 1}")
        name = v.name(t, "name", f"[[op]] #{i + 1}")
        where = f"[[op]] {name}"
        if name in taken or any(o.name == name for o in out):
            v.fail(f"{where}.name", "already names a kernel, pipeline or op; pick another")
        out.append(OpRecipe(name, _kernels(v, t.get("kernels"), where, kernels)))
    return tuple(out)


def _kernels(
    v: Validator, raw: Any, where: str, kernels: Mapping[str, KernelRecipe]
) -> tuple[str, ...]:
    key = f"{where}.kernels"
    if not isinstance(raw, list) or len(raw) < 2 or not all(isinstance(x, str) for x in raw):
        v.fail(key, f'must list two or more kernel names, e.g. ["matmul", "matmul_tma"]; '
                    f"got {show(raw)}")  # fmt: skip
    if len(set(raw)) != len(raw):
        v.fail(key, "lists a kernel twice")
    for name in raw:
        if name not in kernels:
            v.fail(key, f"{name!r} is no [[kernel]] of this recipe; it has: "
                        f"{', '.join(kernels)}")  # fmt: skip
    first = kernels[raw[0]]
    for name in raw[1:]:
        _interchangeable(v, key, first, kernels[name])
    return tuple(raw)


def _interchangeable(v: Validator, key: str, first: KernelRecipe, k: KernelRecipe) -> None:
    """Fail unless ``k`` can take any call ``first`` takes the arguments of."""
    if dict(k.buckets) != dict(first.buckets):
        v.fail(key, f"{k.name!r} has buckets {dict(k.buckets)}, {first.name!r} "
                    f"{dict(first.buckets)}: an op's kernels share their buckets")  # fmt: skip
    if dict(k.dtypes) != dict(first.dtypes):
        v.fail(key, f"{k.name!r} has dtypes {dict(k.dtypes)}, {first.name!r} "
                    f"{dict(first.dtypes)}: an op's kernels share their dtypes")  # fmt: skip
    for param, typ in k.signature.items():
        if param not in first.signature:
            v.fail(key, f"{k.name!r} takes {param!r}, which {first.name!r} does not: an op's "
                        f"kernels take the first one's parameters (by name)")  # fmt: skip
        if first.signature[param] != typ:
            v.fail(key, f"{param!r} is {typ} in {k.name!r} but {first.signature[param]} in "
                        f"{first.name!r}")  # fmt: skip
    for param in set(k.optional) ^ set(first.optional):
        v.fail(key, f"{param!r} is optional in one of {first.name!r} and {k.name!r} only")
