"""Translating a ``triton.Config`` ``pre_hook`` that sets host descriptors' block shapes.

A TMA kernel tuned with ``@triton.autotune`` takes ``TensorDescriptor`` arguments whose
block shape must follow the config, so its author sets them in each config's pre_hook
(the pattern of Triton's own tutorials)::

    def set_block_shapes(nargs):
        BLOCK_M = nargs["BLOCK_M"]
        nargs["a_desc"].block_shape = [BLOCK_M, nargs["BLOCK_K"]]
        nargs["c_desc"].block_shape = [BLOCK_M, nargs["BLOCK_N"]]

That is what a recipe's ``descriptors`` table says, so the hook is read from its source, as
``@triton.heuristics`` rules are (aot/heuristics.py), and becomes that table. A hook may
hold a docstring, local names bound to expressions of the arguments, the guard
``if not isinstance(nargs["x"], TensorDescriptor): return`` (for device-side descriptors),
and block-shape assignments. Anything else is refused with its line, and the recipe's
``descriptors`` replaces the hook.
"""

from __future__ import annotations

import ast
import copy
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from .heuristics import Rewrite, Untranslatable, find_definition


def block_shapes(hook: Callable[..., Any]) -> dict[str, tuple[str, ...]]:
    """Descriptor argument -> its block shape as expressions, or ``Untranslatable``."""
    node = find_definition(hook)
    if isinstance(node, ast.Lambda):
        raise Untranslatable("it is a lambda, which cannot assign block shapes")
    if len(node.args.args) != 1 or node.args.vararg or node.args.kwarg:
        raise Untranslatable("it does not take exactly one argument (the arguments dict)")
    nargs = node.args.args[0].arg
    rewrite = Rewrite(nargs, getattr(hook, "__globals__", {}))
    local: dict[str, ast.expr] = {}
    out: dict[str, tuple[str, ...]] = {}
    for stmt in node.body:
        if _docstring(stmt) or _guard(stmt, nargs):
            continue
        target = (
            stmt.targets[0] if isinstance(stmt, ast.Assign) and len(stmt.targets) == 1 else None
        )
        if isinstance(target, ast.Name) and isinstance(stmt, ast.Assign):
            local[target.id] = _Inline(local).visit(copy.deepcopy(stmt.value))
            continue
        desc = _descriptor(target, nargs)
        if desc is not None and isinstance(stmt, ast.Assign):
            if not isinstance(stmt.value, ast.List | ast.Tuple):
                raise Untranslatable(f"line {stmt.lineno}: the block shape of {desc!r} is not "
                                     "a list")  # fmt: skip
            out[desc] = tuple(
                ast.unparse(rewrite.visit(_Inline(local).visit(copy.deepcopy(e))))
                for e in stmt.value.elts
            )
            continue
        raise Untranslatable(f"line {stmt.lineno}: `{ast.unparse(stmt)}` is not a block-shape "
                             "assignment")  # fmt: skip
    if not out:
        raise Untranslatable("it sets no descriptor's block_shape")
    return out


def _docstring(stmt: ast.stmt) -> bool:
    return isinstance(stmt, ast.Expr) and isinstance(stmt.value, ast.Constant)


def _descriptor(target: ast.expr | None, nargs: str) -> str | None:
    """``nargs["x"].block_shape`` -> "x"."""
    if not (isinstance(target, ast.Attribute) and target.attr == "block_shape"):
        return None
    sub = target.value
    if (
        isinstance(sub, ast.Subscript)
        and isinstance(sub.value, ast.Name)
        and sub.value.id == nargs
        and isinstance(sub.slice, ast.Constant)
        and isinstance(sub.slice.value, str)
    ):
        return sub.slice.value
    return None


def _guard(stmt: ast.stmt, nargs: str) -> bool:
    """``if not isinstance(nargs["x"], ...): return``: the hook leaves device-side
    descriptors alone; the recipe's arguments are host descriptors."""
    if not isinstance(stmt, ast.If) or stmt.orelse:
        return False
    test = stmt.test
    returns = len(stmt.body) == 1 and isinstance(stmt.body[0], ast.Return)
    return (
        returns
        and isinstance(test, ast.UnaryOp)
        and isinstance(test.op, ast.Not)
        and isinstance(test.operand, ast.Call)
        and isinstance(test.operand.func, ast.Name)
        and test.operand.func.id == "isinstance"
        and bool(test.operand.args)
        and _descriptor(ast.Attribute(test.operand.args[0], "block_shape"), nargs) is not None
    )


class _Inline(ast.NodeTransformer):
    """Local names replaced by the expressions they were bound to."""

    def __init__(self, local: Mapping[str, ast.expr]):
        self.local = local

    def visit_Name(self, node: ast.Name) -> ast.AST:
        bound = self.local.get(node.id)
        return copy.deepcopy(bound) if bound is not None else node


def configs_hooks_translate(configs: Sequence[Any]) -> bool:
    """Whether autotune configs can be the search space as far as their pre_hooks go: none
    has one, or all set the same descriptor block shapes."""
    if not any(c.pre_hook for c in configs):
        return True
    try:
        shapes = [block_shapes(c.hook) if c.pre_hook else None for c in configs]
    except Untranslatable:
        return False
    return all(s is not None and s == shapes[0] for s in shapes)
