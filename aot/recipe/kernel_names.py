"""Which names a kernel's expressions may read, and which of them have a value where the
build evaluates each expression.

A name that parses but has no value where it is evaluated would pass ``aotc plan`` and
fail the build later (after all the tuning, for ``tune.flops``), so every expression is
checked here, against the values its evaluation will have:

- the grid: integer arguments, meta-parameters and ``NUM_SMS``, evaluated per bucket and
  config; every integer argument it reads needs a value (a bucket key, or in ``sizes``);
- constraints: meta-parameters, ``sizes`` and the target's limits, once per config;
- ``tune.flops`` and ``tune.bytes``: bucket keys, ``sizes`` and ``fixed``, once per bucket,
  whatever the config.
"""

from __future__ import annotations

from collections.abc import Set
from dataclasses import dataclass
from typing import Any

from loader.expr import Expr

from .validate import Validator, show, sorted_names

GRID_BUILTINS = ("NUM_SMS",)
CONSTRAINT_BUILTINS = ("SMEM", "NUM_SMS", "REGS_PER_SM", "MAX_THREADS")


@dataclass(frozen=True)
class Names:
    w: str  # the kernel's key path, for hints
    ints: frozenset[str]  # integer runtime arguments
    arguments: frozenset[str]  # every runtime argument (pointers and floats too)
    buckets: frozenset[str]  # bucket keys
    sizes: frozenset[str]  # the other integer arguments given a representative value
    fixed: frozenset[str]
    searched: frozenset[str]  # space, with num_warps and num_stages
    # Sizes that are neither arguments nor call values (num_experts): values for size
    # expressions, tune.flops/bytes and inputs at build time, never read at run time.
    constants: frozenset[str] = frozenset()

    @property
    def sized(self) -> frozenset[str]:
        """Integer arguments with a value at every bucket."""
        return self.buckets | self.sizes

    @property
    def meta(self) -> frozenset[str]:
        return self.fixed | self.searched

    def grid(self, v: Validator, raw: Any, key: str) -> Expr:
        e = v.parse_expr(raw, key)
        unknown = e.names - self.ints - self.meta - set(GRID_BUILTINS)
        if unknown:
            v.fail(key, f"unknown name(s) {sorted_names(unknown)}; a grid reads integer "
                   f"arguments, meta-parameters and {', '.join(GRID_BUILTINS)}")  # fmt: skip
        return e

    def check_sized(self, v: Validator, key: str, exprs: tuple[Expr, ...]) -> None:
        """Every integer argument the expressions read has a value at every bucket."""
        read: set[str] = set().union(*(e.names for e in exprs))
        unsized = sorted((read & self.ints) - self.sized)
        if unsized:
            v.fail(key, f"reads {', '.join(unsized)}, which is neither a bucket key nor in "
                   f"sizes; give it a representative value under {self.w}.sizes")  # fmt: skip

    def constraint(self, v: Validator, raw: Any, key: str) -> Expr:
        if not isinstance(raw, str):
            v.fail(key, f"expected an expression string, got {type(raw).__name__} {show(raw)}")
        e = v.parse_expr(raw, key, predicate=True)
        allowed = self.meta | self.sized | set(CONSTRAINT_BUILTINS)
        unknown = e.names - allowed
        if unknown:
            v.fail(key, f"unknown name(s) {sorted_names(unknown)}; constraints read "
                   f"{sorted_names(allowed)}")  # fmt: skip
        return e

    def derived(self, v: Validator, key: str, e: Expr) -> None:
        """A constexpr computed per call reads integer arguments, call values and other
        meta-parameters; the integers need a value where the build evaluates it."""
        unknown = e.names - self.arguments - self.meta
        if unknown:
            v.fail(key, f"unknown name(s) {sorted_names(unknown)}; a derived value reads "
                   "arguments (a pointer as 0 when it is None), call values and "
                   "meta-parameters")  # fmt: skip
        self.check_sized(v, key, (e,))

    def per_bucket(self, v: Validator, raw: Any, key: str) -> Expr:
        """An expression evaluated once per bucket (``tune.flops``, ``tune.bytes``)."""
        e = v.parse_expr(raw, key)
        unknown = e.names - self.arguments - self.meta - self.constants
        if unknown:
            v.fail(key, f"unknown name(s) {sorted_names(unknown)}; it reads bucket keys, "
                   "sizes and fixed values")  # fmt: skip
        self.check_sized(v, key, (e,))
        _no_value(v, key, e.names & self.searched, "searched meta-parameter (in space)",
                  "it is evaluated once per bucket, whatever the config")  # fmt: skip
        _no_value(v, key, e.names & (self.arguments - self.ints), "pointer or float argument",
                  "it has no integer value at build time")  # fmt: skip
        return e


def _no_value(v: Validator, key: str, names: Set[str], what: str, why: str) -> None:
    if names:
        v.fail(key, f"reads {sorted_names(names)}, a {what}: {why}; use bucket keys, sizes "
               "and fixed values")  # fmt: skip
