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

import ast
from collections.abc import Set
from dataclasses import dataclass
from typing import Any

from loader.expr import Expr, none_test, parse

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
    pointers: frozenset[str] = frozenset()  # pointer arguments

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

    def check_sized(self, v: Validator, key: str, read: Set[str]) -> None:
        """Every integer argument of ``read`` (the names expressions read) has a value at
        every bucket."""
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

    def derived(self, v: Validator, key: str, e: Expr) -> Expr:
        """A constexpr computed per call reads integer arguments, call values and other
        meta-parameters; the integers need a value where the build evaluates it. Returns
        it with its None tests made exact (``pointer_none_tests``)."""
        unknown = e.names - self.arguments - self.meta
        if unknown:
            v.fail(key, f"unknown name(s) {sorted_names(unknown)}; a derived value reads "
                   "arguments ('x is None' tests whether a call passed None), call values "
                   "and meta-parameters")  # fmt: skip
        self.check_sized(v, key, e.names - e.presence)
        return pointer_none_tests(e, self.pointers)

    def per_bucket(self, v: Validator, raw: Any, key: str) -> Expr:
        """An expression evaluated once per bucket (``tune.flops``, ``tune.bytes``)."""
        e = v.parse_expr(raw, key)
        unknown = e.names - self.arguments - self.meta - self.constants
        if unknown:
            v.fail(key, f"unknown name(s) {sorted_names(unknown)}; it reads bucket keys, "
                   "sizes and fixed values")  # fmt: skip
        self.check_sized(v, key, e.names)
        _no_value(v, key, e.names & self.searched, "searched meta-parameter (in space)",
                  "it is evaluated once per bucket, whatever the config")  # fmt: skip
        _no_value(v, key, e.names & (self.arguments - self.ints), "pointer or float argument",
                  "it has no integer value at build time")  # fmt: skip
        return e


def _no_value(v: Validator, key: str, names: Set[str], what: str, why: str) -> None:
    if names:
        v.fail(key, f"reads {sorted_names(names)}, a {what}: {why}; use bucket keys, sizes "
               "and fixed values")  # fmt: skip


def pointer_none_tests(e: Expr, pointers: Set[str]) -> Expr:
    """``e`` with each None test of a pointer as a comparison with 0: ``b is not None``
    becomes ``b != 0``. The loader passes a pointer given as None as the address 0, and
    refuses a null one otherwise, so the two agree, and the expression stays one of
    integers. A scalar keeps ``x is None``: given as 0.0 it is not None, and the loader
    passes one given as None as None."""
    tree = ast.parse(e.text, mode="eval")
    if not any((n := none_test(node)) is not None and n.id in pointers for node in ast.walk(tree)):
        return e  # kept as written

    class Rewrite(ast.NodeTransformer):
        def visit_Compare(self, node: ast.Compare) -> ast.AST:
            name = none_test(node)
            if name is None or name.id not in pointers:
                return self.generic_visit(node)
            op: ast.cmpop = ast.Eq() if isinstance(node.ops[0], ast.Is) else ast.NotEq()
            return ast.Compare(name, [op], [ast.Constant(0)])

    return parse(ast.unparse(Rewrite().visit(tree)), predicate=True)
