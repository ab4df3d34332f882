"""A kernel's values at build time: ``buckets`` (the keys dispatch chooses by, with their
upper bounds) and ``sizes`` (every other size the build needs a value for).

A size is a representative value (a performance hint: a call at another value runs
correctly, perhaps slower), a list of values (one bundle serves each; a listed size is a
bucket dimension, tuned at each value), or an expression of bucket keys, call values and
meta-parameters, evaluated per bucket and config (``EM = "cdiv(T, BLOCK_M) * BLOCK_M"``).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from loader.expr import Expr, ExprError
from loader.manifest import INT_TYPES

from ..config import Constexpr
from ..shipped import Shipped
from .kernel_call import CallValue
from .kernel_meta import Meta
from .kernel_names import Names
from .validate import Validator, show, sorted_names

CALL_TYPE = "i64"  # the type a call value is checked against


@dataclass(frozen=True)
class Values:
    buckets: dict[str, tuple[int, ...]]
    listed: dict[str, tuple[int, ...]]
    sizes: dict[str, int]
    exprs: dict[str, Expr] = field(default_factory=dict)
    call: Mapping[str, CallValue] = field(default_factory=dict)
    constants: dict[str, int] = field(default_factory=dict)  # sizes of no argument

    def typed(
        self, v: Validator, w: str, signature: Mapping[str, str]
    ) -> tuple[dict[str, tuple[int, ...]], dict[str, int]]:
        """The bucket keys (listed sizes last) and the literal sizes, each checked against
        its argument's integer type."""
        out: dict[str, tuple[int, ...]] = {}
        for table, bounds in (("buckets", self.buckets), ("sizes", self.listed)):
            for name, values in bounds.items():
                key = f"{w}.{table}.{name}"
                ptype = self._int_type(v, key, name, signature, table)
                for b in values:
                    v.fits(b, key, ptype, f"the type of {name} in signature")
                out[name] = values
        for name, size in self.sizes.items():
            key = f"{w}.sizes.{name}"
            ptype = self._int_type(v, key, name, signature, "sizes")
            v.fits(size, key, ptype, f"the type of {name} in signature")
        for name in self.exprs:
            self._int_type(v, f"{w}.sizes.{name}", name, signature, "sizes")
        return out, {**self.sizes, **self.constants}

    def check_constants(self, v: Validator, w: str, tune: Any) -> None:
        """A size of no argument is a constant for expressions: one that no size expression
        nor tune.flops/bytes reads is most likely a misspelt argument."""
        read: set[str] = set().union(*(e.names for e in self.exprs.values()))
        read |= set().union(*(e.names for e in (tune.flops, tune.bytes) if e is not None))
        for name in self.constants:
            if name not in read:
                v.fail(f"{w}.sizes.{name}", f"{name} is no argument or call value, and no size "
                       "expression or tune.flops/bytes reads it; check its spelling")  # fmt: skip

    def _int_type(
        self, v: Validator, key: str, name: str, signature: Mapping[str, str], table: str
    ) -> str:
        if name in self.call:
            return CALL_TYPE
        ptype = signature.get(name, "")
        if ptype not in INT_TYPES:
            ints = [p for p, t in signature.items() if t in INT_TYPES] + list(self.call)
            what = "bucket keys must be" if table == "buckets" else "sizes are for"
            v.fail(key, f"{what} integer arguments or call values; choose from {ints}")
        return ptype

    def probe(self, meta: Meta, smallest: bool = False) -> dict[str, int]:
        """One value of every size, for reading example arguments: the largest bound of
        each bucket key (so an argument that needs 64 bits shows it), or the smallest
        (listed sizes stay at their largest: they are exact values, not ranges)."""
        at = 0 if smallest else -1
        out = {n: b[at] for n, b in self.buckets.items()}
        out.update({n: b[-1] for n, b in self.listed.items()})
        out.update(self.sizes)
        out.update(self.constants)
        env: dict[str, Constexpr] = {**meta.fixed, **meta.first_config(), **out}
        for name, e in self.exprs.items():
            try:
                out[name] = int(e.evaluate(env))
            except (ExprError, ArithmeticError, TypeError, ValueError):
                continue
        return out

    def check_names(self, v: Validator, w: str, kernel: Shipped, meta: Meta) -> None:
        """Before any expression is evaluated (reading the example arguments does): each
        size expression reads only names that exist."""
        known = {p.name for p in kernel.params} | set(self.call) | set(self.constants)
        known |= set(self.sizes) | set(self.buckets) | set(self.listed) | set(self.exprs)
        known |= set(meta.fixed) | set(meta.derived) | set(meta.searched)
        for name, e in self.exprs.items():
            unknown = e.names - known
            if unknown:
                v.fail(f"{w}.sizes.{name}", f"reads {sorted_names(unknown)}, which is no "
                       "argument, call value, size or meta-parameter")  # fmt: skip

    def check_exprs(self, v: Validator, w: str, names: Names) -> None:
        """Expression sizes read bucket keys, call values, literal sizes and meta-params."""
        allowed = names.buckets | names.sizes | names.meta | set(self.call) | names.constants
        for name, e in self.exprs.items():
            unknown = e.names - allowed - {name}
            if unknown or name in e.names:
                what = sorted_names(unknown) if unknown else name
                v.fail(f"{w}.sizes.{name}", f"reads {what}; a size expression reads bucket "
                       "keys, call values, other sizes and meta-parameters")  # fmt: skip


def parse_values(
    v: Validator, k: Mapping[str, Any], w: str, kernel: Shipped, call: Mapping[str, CallValue]
) -> Values:
    runtime = {p.name for p in kernel.runtime}
    known = runtime | set(call)
    buckets: dict[str, tuple[int, ...]] = {}
    for name, bounds in v.table(k, "buckets", w).items():
        key = f"{w}.buckets.{name}"
        _known(v, key, name, known, kernel)
        buckets[name] = v.bounds(bounds, key)
    listed: dict[str, tuple[int, ...]] = {}
    sizes: dict[str, int] = {}
    exprs: dict[str, Expr] = {}
    constants: dict[str, int] = {}
    params = {p.name for p in kernel.params}
    for name, raw in v.table(k, "sizes", w).items():
        key = f"{w}.sizes.{name}"
        if name not in known and name not in params and isinstance(raw, int):
            constants[name] = v.int_value(raw, key)  # num_experts, for expressions
            continue
        _known(v, key, name, known, kernel)
        if name in buckets:
            v.fail(key, f"{name} is a bucket key; its size comes from the bucket")
        if name in call:
            _no_float(v, key, name, raw, k.get("derived"))
        if isinstance(raw, list):
            listed[name] = v.bounds(raw, key)
        elif isinstance(raw, str):
            exprs[name] = v.parse_expr(raw, key)
        else:
            sizes[name] = v.int_value(raw, key, minimum=1)
    return Values(buckets, listed, sizes, exprs, call, constants)


def _no_float(v: Validator, key: str, name: str, raw: Any, derived: Any) -> None:
    """Call values are integers. A float listed for one is most likely a float constexpr
    the caller passes per call (unsloth's ``eps: tl.constexpr``): say what a bundle can do
    for it instead. Taking floats as call values would change the manifest's buckets and
    the loader's reading of call values, which are integers throughout."""
    values = raw if isinstance(raw, list) else [raw]
    floats = [x for x in values if isinstance(x, float)]
    if not floats:
        return
    taken = [d for d, e in (derived.items() if isinstance(derived, dict) else ())
             if isinstance(e, str) and e.strip() == name]  # fmt: skip
    target = taken[0] if taken else "the constexpr"
    shown = target if taken else "EPS"
    v.fail(key, f"{show(floats[0])} is a float, and sizes and call values are integers: a "
           f"float constexpr passed per call ({target}) cannot take its value from a call value. "
           f"Give it in fixed instead, one [[kernel]] entry (each with its own name) per value "
           f"the callers use: fixed = {{ {shown} = {floats[0]!r} }} in one"
           + (f", fixed = {{ {shown} = {floats[1]!r} }} in another" if len(floats) > 1 else "")
           + f"; or, if callers pass any value, make it a runtime float parameter of the kernel "
           f"({shown}: float, not tl.constexpr), which every variant reads per call")  # fmt: skip


def _known(v: Validator, key: str, name: str, known: set[str], kernel: Shipped) -> None:
    if name not in known:
        v.fail(key, f"{show(name)} is neither an argument of {kernel.name} nor a call value; "
               f"choose from {sorted_names(known)}, or declare it as a call value: "
               f'call = {{ {name} = "shape(ARG, DIM)" }} reads it off an argument\'s shape, '
               f'"stride(ARG, DIM)" off its stride, "keyword" has the caller pass it')  # fmt: skip
