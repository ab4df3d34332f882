"""How a kernel is launched and which variants are built: the ``grid``, the
``constraints`` a config must meet, and the ``specializations`` compiled beside the
generic variant."""

from __future__ import annotations

import difflib
from collections.abc import Mapping
from typing import Any

from loader.expr import Expr, parse
from loader.manifest import INT_TYPES

from ..shipped import Shipped
from .kernel_names import Names
from .kernel_signature import Example
from .validate import Validator, show

# integer types a specialization may assume divisible by 16 or equal to 1 (not booleans)
_NUMBERS = frozenset(INT_TYPES) - {"i1", "u1"}

SPEC_VALUES = (0, 1, 16)  # no assumption, equal to 1, divisible by 16


def parse_grid(v: Validator, k: Mapping[str, Any], w: str, names: Names) -> tuple[Expr, Expr, Expr]:
    key = f"{w}.grid"
    raw = k.get("grid")
    if raw is None:
        v.fail(key, 'missing; give the launch grid, e.g. "cdiv(M, BLOCK_M)"')
    items = [raw] if isinstance(raw, str | int) and not isinstance(raw, bool) else raw
    if not isinstance(items, list) or not 1 <= len(items) <= 3:
        v.fail(key, "must be an expression or a list of 1 to 3 expressions")
    exprs = [
        names.grid(v, item, f"{key}[{i}]" if isinstance(raw, list) else key)
        for i, item in enumerate(items)
    ]
    while len(exprs) < 3:
        exprs.append(parse("1"))
    grid = (exprs[0], exprs[1], exprs[2])
    names.check_sized(v, key, set().union(*(e.names for e in grid)))
    return grid


def check_tiles(
    v: Validator, w: str, grid: tuple[Expr, Expr, Expr], space: Mapping[str, tuple[Any, ...]]
) -> None:
    """A searched meta-parameter the grid reads is a tile size (the heuristic takes the
    product of these as the work of one program), so each of its values is at least 1."""
    read = set().union(*(g.names for g in grid))
    for name in sorted(read & set(space)):
        for x in space[name]:
            if isinstance(x, bool) or not isinstance(x, int) or x < 1:
                v.fail(f"{w}.space.{name}", f"{x}: the grid reads {name}, so its values are "
                       "tile sizes: use 1 or more")  # fmt: skip


def parse_constraints(v: Validator, k: Mapping[str, Any], w: str, names: Names) -> tuple[Expr, ...]:
    raw = k.get("constraints", [])
    if not isinstance(raw, list):
        v.fail(f"{w}.constraints", "must be a list of boolean expressions")
    return tuple(names.constraint(v, text, f"{w}.constraints[{i}]") for i, text in enumerate(raw))


def parse_specializations(
    v: Validator,
    k: Mapping[str, Any],
    w: str,
    signature: Mapping[str, str],
    buckets: Mapping[str, tuple[int, ...]],
) -> tuple[Mapping[str, int], ...]:
    """Each entry: argument -> 16 (divisible by 16) or 1 (equal to 1). The generic variant
    (no assumptions) is always added by the planner and is not listed here."""
    raw = k.get("specializations")
    specializable = [p for p, t in signature.items() if t.startswith("*") or t in INT_TYPES]
    if raw is None:
        # Default: pointers 16-byte aligned and every non-bucket integer divisible by 16.
        raw = [{"*": 16, **{b: 0 for b in buckets if b in specializable}}]
    if not isinstance(raw, list):
        v.fail(f"{w}.specializations", "must be a list of tables, e.g. [{ '*' = 16 }]")
    out: list[Mapping[str, int]] = []
    seen: set[frozenset[tuple[str, int]]] = set()
    for i, prof in enumerate(raw):
        key = f"{w}.specializations[{i}]"
        resolved = _specialization(v, prof, key, signature, specializable)
        if frozenset(resolved.items()) in seen:
            v.fail(key, "repeats an earlier specialization")
        seen.add(frozenset(resolved.items()))
        out.append(resolved)
    return tuple(out)


def _specialization(
    v: Validator, prof: Any, key: str, signature: Mapping[str, str], specializable: list[str]
) -> dict[str, int]:
    if not isinstance(prof, dict):
        v.fail(key, "must be a table mapping arguments to 16, 1 or 0")
    for pname, value in prof.items():
        if pname != "*" and pname not in specializable:
            close = difflib.get_close_matches(pname, specializable, n=1)
            hint = f"did you mean {close[0]!r}?" if close else f"choose from {specializable}"
            v.fail(f"{key}.{pname}", f"not a pointer or integer argument; {hint}")
        if isinstance(value, bool) or type(value) is not int or value not in SPEC_VALUES:
            v.fail(
                f"{key}.{pname}",
                f"{show(value)}: use 16 (divisible by 16), 1 (equal to 1) or 0 (no assumption)",
            )
        if value == 1 and (pname == "*" or signature[pname].startswith("*")):
            v.fail(f"{key}.{pname}", "only integer arguments can be assumed equal to 1")
    star: int = prof.get("*", 0)
    resolved: dict[str, int] = {p: prof.get(p, star) for p in specializable if prof.get(p, star)}
    if not resolved:
        v.fail(key, "assumes nothing; the generic variant is always built, drop this entry")
    return resolved


def example_specializations(
    kernel: Shipped,
    example: Example,
    signature: Mapping[str, str],
    buckets: Mapping[str, tuple[int, ...]],
    listed: Mapping[str, tuple[int, ...]],
) -> tuple[Mapping[str, int], ...]:
    """What Triton's JIT would compile for the recipe's example, beside the generic
    variant that fits every call:

    - each pointer divisible by 16, each integer equal to 1 or divisible by 16 as its
      example value is — except bucket keys and the integers that change with them (they
      change from call to call), and what the author keeps from specializing
      (``do_not_specialize``); a listed size is divisible by 16 if all its values are;
    - first, where it assumes more, the same with every integer bucket key divisible by
      16, as the JIT specialises a call at M = 4096: a bucket's calls at multiples of 16
      (its bounds, mostly) run that variant, the others the next one;
    - both of these, where there are some, also with the integers that change with the
      bucket keys and are divisible by 16 at the largest bucket, such as the batch stride
      of a [batch, seqlen, ...] tensor, as the JIT specialises those at a call too: without
      such a stride's divisibility Triton cannot prove a program's loads aligned and does
      not pipeline them (mamba's bmm_chunk ran 1.9x slower so on the H200). No variant
      then assumes the keys without them;
    - and, where that assumes more, the same with pointers and ones only: a call at
      another size (a hint, not a limit) then still gets aligned loads.
    """
    ints = example.ints()
    full: dict[str, int] = {}
    keys: dict[str, int] = {}
    for p in kernel.runtime:
        t = signature.get(p.name, "")
        if p.name in buckets and t in _NUMBERS and p.specialize and p.align:
            keys[p.name] = 16
        if p.name in listed and p.specialize and p.align:
            # A size listed with exact values (row widths): divisible by 16 if all are,
            # which is what vectorises a row's masked loads.
            if all(x % 16 == 0 for x in listed[p.name]):
                full[p.name] = 16
            continue
        if p.name in buckets or p.name in example.varying or not p.specialize:
            continue
        if t.startswith("*") and p.align:
            full[p.name] = 16
        elif t in _NUMBERS and p.name in ints:
            x = ints[p.name]
            if x == 1:
                full[p.name] = 1
            elif x % 16 == 0 and p.align:
                full[p.name] = 16
    aligned = {n: k for n, k in full.items() if k == 1 or signature[n].startswith("*")}
    top = {**full, **keys}  # a listed bucket key may be assumed already: then top == full
    follow = _followers(kernel, example.varying, ints, signature, keys)
    profiles: list[dict[str, int]] = []
    for prof in ({**top, **follow}, {**full, **follow}, full, aligned):
        if prof and prof not in profiles:
            profiles.append(prof)
    return tuple(profiles)


def _followers(
    kernel: Shipped, varying: frozenset[str], ints: Mapping[str, int],
    signature: Mapping[str, str], keys: Mapping[str, int],
) -> dict[str, int]:  # fmt: skip
    """The integers other than the bucket keys that change with them (``varying``) and
    are divisible by 16 at the example's largest bucket (``ints``): each assumed so."""
    return {p.name: 16 for p in kernel.runtime
            if p.name in varying and p.name not in keys and p.specialize and p.align
            and signature.get(p.name, "") in _NUMBERS
            and ints.get(p.name, 1) % 16 == 0}  # fmt: skip
