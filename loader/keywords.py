"""A call's arguments by keyword, as Triton's launcher takes them.

Libraries launch their kernels by keyword (``kernel[grid](X_ptr=x, X_stride=..., ...,
reduction=reduction, BLOCK_SIZE=BLOCK_SIZE, num_warps=num_warps)``); a service that
mirrors such a wrapper may call the bundle's kernel the same way. A keyword naming a
runtime parameter takes its place among the arguments. A keyword naming a constexpr that
every variant was built with at one value (a recipe's ``fixed``, or the parameter's own
default) is accepted where it gives that value and refused where it asks for another, which
no variant was built for. What remains are call values (loader/validity.py).
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any

from .errors import ArgumentError
from .expr import parse
from .manifest import KernelSpec, VariantSpec

LAUNCH_OPTIONS = ("num_warps", "num_stages", "num_ctas", "maxnreg")
_UNSET = {"num_ctas": 1}  # a launch option a variant does not record: its Triton default


class Keywords:
    """What a kernel's call may name by keyword besides its call values."""

    def __init__(self, spec: KernelSpec, target: str):
        self.kernel = spec.name
        self.params = tuple(p.name for p in spec.params)
        self._index = {n: i for i, n in enumerate(self.params)}
        per_call = {d.name for d in spec.derived} | set(spec.host) | {c.name for c in spec.call}
        variants = [v for inst in spec.instances if inst.target == target
                    for v in inst.variants.values()]  # fmt: skip
        first = variants[0].meta if variants else {}
        # Constexprs with one value in every variant, and those the build searched.
        self.fixed = {k: v for k, v in first.items() if k not in per_call
                      and all(_same(w.meta.get(k), v) for w in variants)}  # fmt: skip
        self.searched = {k for v in variants for k in v.meta} - per_call - set(self.fixed)
        self.derived = {d.name: d.expr for d in spec.derived}
        self._keyword_values = {c.name for c in spec.call if not c.tensor} | set(spec.host)
        # Given by keyword, these are checked against the variant chosen for the call.
        self.chosen = frozenset(self.searched) | frozenset(self.derived) | set(LAUNCH_OPTIONS)
        self.names = frozenset(self.params) | frozenset(self.fixed) | self.chosen

    def bind(
        self, args: Sequence[Any], call: Mapping[str, Any]
    ) -> tuple[tuple[Any, ...], dict[str, Any], dict[str, Any]]:
        """``args`` with the parameters given by keyword in their places; the other
        keywords that are no constexpr or launch option (call values); and the constexprs
        and launch options given that the chosen variant must have (``expect``). Those
        that every variant has are checked here and dropped."""
        rest = {k: v for k, v in call.items() if k not in self.names}
        expect = {k: v for k, v in call.items() if k in self.chosen}
        for name, value in call.items():
            if name in self.fixed:
                self._check_fixed(name, value)
            elif name in self.derived:
                self._check_source(name, call)
        named = {k: v for k, v in call.items() if k in self._index}
        if not named:
            return tuple(args), rest, expect
        return place(self.kernel, self.params, args, named), rest, expect

    def check(self, variant: VariantSpec, expect: Mapping[str, Any]) -> None:
        """The variant chosen for the call has the constexprs and launch options it gave."""
        for name, value in expect.items():
            have = (getattr(variant, name, _UNSET.get(name)) if name in LAUNCH_OPTIONS
                    else variant.meta.get(name))  # fmt: skip
            if not _same(value, have):
                how = "the build chose it for this bucket"
                if name in self.derived:
                    how = f"the recipe derives it: {name} = {self.derived[name]}"
                raise ArgumentError(
                    f"{self.kernel}() got {name}={value!r}, and the variant the bundle "
                    f"launches for this call has {name} = {have!r} ({how}); leave it out to "
                    "run that, or write the rule the call follows in the recipe (a derived "
                    "value, or a constraint on num_warps) and rebuild"
                )

    def _check_source(self, name: str, call: Mapping[str, Any]) -> None:
        """A derived constexpr given where the call value it is computed from is not (the
        caller's choice, ``GEMMA = "GEMMA_ != 0"``): that call value is what to pass."""
        needed = sorted(
            parse(self.derived[name], predicate=True).names & self._keyword_values - set(call)
        )
        if needed:
            raise ArgumentError(
                f"{self.kernel}() got {name}=..., which the bundle computes per call ({name} "
                f"is derived: {name} = {self.derived[name]}); pass {needed[0]}=... instead"
            )

    def _check_fixed(self, name: str, value: Any) -> None:
        want = self.fixed[name]
        if not _same(value, want):
            raise ArgumentError(
                f"{self.kernel}() got {name}={value!r}, and every variant in the bundle was "
                f"built with {name} = {_toml(want)} (the recipe's fixed, or its default): pass "
                f"that or leave it out, or add a [[kernel]] entry with fixed.{name} = "
                f"{_toml(value)} and rebuild"
            )


def place(
    name: str, params: Sequence[str], args: Sequence[Any], named: Mapping[str, Any]
) -> tuple[Any, ...]:
    """``args`` followed by the parameters after them, given by keyword in ``named`` (every
    key a parameter); ``name`` is the callee, for the errors."""
    twice = [n for n in named if params.index(n) < len(args)]
    if twice:
        raise ArgumentError(f"{name}() got multiple values for argument {twice[0]!r}")
    missing = [p for p in params[len(args) :] if p not in named]
    if missing:
        raise ArgumentError(
            f"{name}() is missing argument{'s' if len(missing) > 1 else ''} "
            f"{', '.join(map(repr, missing))} (it takes {', '.join(params)}, "
            "in order or by keyword)"
        )
    return (*args, *(named[p] for p in params[len(args) :]))


def _same(a: Any, b: Any) -> bool:
    """Equal as constexpr values: ``True`` is not the integer 1 here."""
    return isinstance(a, bool) == isinstance(b, bool) and a == b


def _toml(value: Any) -> str:
    """A value as a recipe writes it."""
    if isinstance(value, bool):
        return "true" if value else "false"
    return json.dumps(value) if isinstance(value, str) else repr(value)
