"""A small, safe integer expression language for launch grids and recipe constraints.

Recipes write grids such as ``cdiv(M, BLOCK_M) * cdiv(N, BLOCK_N)``. The text is parsed with
Python's own parser and then checked node by node against a whitelist: integer literals,
names, ``+ - * // %``, unary minus, parentheses and calls to ``cdiv``, ``min``, ``max``
and ``next_power_of_2`` (plus comparisons, ``and``/``or``/``not``, ``True``/``False``,
``a if c else b`` and ``x is None``/``x is not None`` in predicates and in the values
derived per call from ``@triton.heuristics`` rules). Only a tree that passed the
check is compiled, so no arbitrary text ever reaches ``eval``. Compiled grids are plain
Python lambdas, which keeps the loader's per-call cost to one function call.
"""

from __future__ import annotations

import ast
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

FUNCTIONS = ("cdiv", "min", "max", "next_power_of_2")
_ARITY = {"cdiv": 2, "next_power_of_2": 1}  # min and max take two or more
# Limits on untrusted text (bundles are untrusted): Python's parser and compiler recurse,
# so a long chain like "1+1+...+1" would otherwise end in a RecursionError.
MAX_LENGTH = 1000
MAX_DEPTH = 100

_BINOPS: dict[type[ast.operator], str] = {
    ast.Add: "+",
    ast.Sub: "-",
    ast.Mult: "*",
    ast.FloorDiv: "//",
    ast.Mod: "%",
}
_CMPOPS = (ast.Lt, ast.LtE, ast.Gt, ast.GtE, ast.Eq, ast.NotEq)


class ExprError(ValueError):
    """The expression text is not in the language; the message says what and how to fix it."""


def _show(text: str) -> str:
    """``text`` quoted for a message, cut short if long."""
    return repr(text if len(text) <= 80 else text[:77] + "...")


def _cdiv(a: int, b: int) -> int:
    return -(-a // b)


def _next_power_of_2(n: int) -> int:
    """As ``triton.next_power_of_2``: the smallest power of two >= n (0 for n <= 0)."""
    return 0 if n <= 0 else 1 << (n - 1).bit_length()


_GLOBALS: dict[str, Any] = {"__builtins__": {}, "cdiv": _cdiv, "min": min, "max": max,
                            "next_power_of_2": _next_power_of_2}  # fmt: skip
_evaluators: dict[tuple[str, tuple[str, ...]], Callable[..., tuple[int, ...]]] = {}
_functions: dict[tuple[Any, ...], Callable[..., tuple[int, ...]]] = {}  # compile_function's
_MAX_FUNCTIONS = 4096  # then start again: a service opening bundle after bundle stays bounded
_parsed: dict[tuple[str, bool], Expr] = {}  # parse's, bounded the same way


@dataclass(frozen=True)
class Expr:
    """A parsed, checked expression. ``names`` are the free variables it reads;
    ``presence``, those of them it reads only in ``x is None`` tests (their values do
    not matter, only whether the call passed None)."""

    text: str
    names: frozenset[str]
    tree: ast.expr = field(repr=False, compare=False)
    presence: frozenset[str] = frozenset()

    def evaluate(self, env: Mapping[str, Any]) -> int:
        missing = self.names - env.keys()
        if missing:
            raise ExprError(f"{_show(self.text)}: no value for {', '.join(sorted(missing))}")
        names = tuple(sorted(self.names))
        fn = _evaluators.get((self.text, names))
        if fn is None:
            fn = _evaluators[(self.text, names)] = compile_function([self], names)
        result: int = fn(*(env[n] for n in names))[0]
        return result


def parse(text: str, *, predicate: bool = False) -> Expr:
    """Parse ``text``; ``predicate`` also admits comparisons and boolean operators. A
    kernel's variants share their grid and checks: each text is parsed once (an ``Expr`` is
    immutable, so sharing one is safe)."""
    if isinstance(text, str):
        found = _parsed.get((text, predicate))
        if found is not None:
            return found
    expr = _parse(text, predicate)
    if len(_parsed) >= _MAX_FUNCTIONS:
        _parsed.clear()
    _parsed[(text, predicate)] = expr
    return expr


def _parse(text: str, predicate: bool) -> Expr:
    if not isinstance(text, str):
        raise ExprError(f"expected an expression string, got {type(text).__name__} "
                        f"{_show(repr(text))}")  # fmt: skip
    if len(text) > MAX_LENGTH:
        raise ExprError(f"{_show(text)}: an expression is at most {MAX_LENGTH} characters")
    try:
        tree = ast.parse(text.strip(), mode="eval").body
    except SyntaxError as exc:
        raise ExprError(f"{_show(text)} is not a valid expression ({exc.msg})") from None
    except (RecursionError, MemoryError):
        raise ExprError(f"{_show(text)} is nested too deeply") from None
    read: set[str] = set()
    tested: set[str] = set()
    _check(tree, text, predicate, read, tested)
    return Expr(text=text.strip(), names=frozenset(read | tested), tree=tree,
                presence=frozenset(tested - read))  # fmt: skip


def none_test(node: ast.AST) -> ast.Name | None:
    """The name ``node`` tests, if it is ``NAME is None`` or ``NAME is not None``."""
    if (
        isinstance(node, ast.Compare)
        and len(node.ops) == 1
        and isinstance(node.ops[0], ast.Is | ast.IsNot)
        and isinstance(node.left, ast.Name)
        and isinstance(node.comparators[0], ast.Constant)
        and node.comparators[0].value is None
    ):
        return node.left
    return None


def _check(tree: ast.AST, text: str, predicate: bool, read: set[str], tested: set[str]) -> None:
    """Check every node of ``tree`` against the language, collecting in ``read`` the free
    names it reads other than in None tests, in ``tested`` those it None-tests; walked
    with a stack, so that depth is bounded here and not by Python's recursion."""
    stack = [(tree, 0)]
    while stack:
        node, depth = stack.pop()
        if depth > MAX_DEPTH:
            raise ExprError(f"{_show(text)} is nested more than {MAX_DEPTH} levels deep")
        tested_name = none_test(node) if predicate else None
        if tested_name is not None:
            tested.add(tested_name.id)
            continue
        children = _children(node, text, predicate, read)
        stack.extend((c, depth + 1) for c in reversed(children))  # left to right


def _bad(text: str, predicate: bool, what: str) -> ExprError:
    return ExprError(
        f"{_show(text)}: {what} is not allowed; use integers, argument and meta-parameter "
        f"names, + - * // % and {', '.join(FUNCTIONS)}()"
        + (
            ", comparisons, and/or/not, True/False, 'a if c else b' and 'x is None'"
            if predicate
            else ""
        )
    )


def _children(node: ast.AST, text: str, predicate: bool, names: set[str]) -> list[ast.expr]:
    """The sub-expressions of an allowed ``node`` (its name recorded); ExprError if it is
    not allowed."""
    if isinstance(node, ast.Constant):
        if type(node.value) is not int and not (predicate and type(node.value) is bool):
            raise _bad(text, predicate, f"the literal {node.value!r}")
        return []
    if isinstance(node, ast.Name):
        if node.id in FUNCTIONS:
            raise _bad(text, predicate, f"the bare name {node.id!r}")
        names.add(node.id)
        return []
    if isinstance(node, ast.BinOp):
        if type(node.op) not in _BINOPS:
            if isinstance(node.op, ast.Div):
                raise ExprError(f"{_show(text)}: '/' is not allowed; use '//' or cdiv(a, b)")
            raise _bad(text, predicate, f"the operator {type(node.op).__name__}")
        return [node.left, node.right]
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub | ast.UAdd):
        return [node.operand]
    if isinstance(node, ast.Call):
        return _call_args(node, text, predicate)
    if predicate and isinstance(node, ast.Compare):
        if not all(isinstance(op, _CMPOPS) for op in node.ops):
            raise _bad(text, predicate, "that comparison")
        return [node.left, *node.comparators]
    if predicate and isinstance(node, ast.BoolOp):
        return list(node.values)
    if predicate and isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.Not):
        return [node.operand]
    if predicate and isinstance(node, ast.IfExp):
        return [node.test, node.body, node.orelse]
    raise _bad(text, predicate, _segment(text, node))


def _segment(text: str, node: ast.AST) -> str:
    """The source of ``node``, quoted (cut from the text: unparsing a deep tree recurses)."""
    segment = ast.get_source_segment(text.strip(), node) or type(node).__name__
    return repr(segment) if len(segment) <= 60 else repr(segment[:57] + "...")


def _call_args(node: ast.Call, text: str, predicate: bool) -> list[ast.expr]:
    if not isinstance(node.func, ast.Name) or node.func.id not in FUNCTIONS:
        raise _bad(text, predicate, f"the call {_segment(text, node.func)[1:-1]}()")
    if node.keywords:
        raise _bad(text, predicate, "a keyword argument")
    want = _ARITY.get(node.func.id)
    if len(node.args) != want if want is not None else len(node.args) < 2:
        takes = want or "at least 2"
        raise ExprError(f"{_show(text)}: {node.func.id}() takes {takes} arguments")
    return list(node.args)


class _Bind(ast.NodeTransformer):
    def __init__(self, consts: Mapping[str, Any], text: str):
        self.consts = consts
        self.text = text

    def visit_Name(self, node: ast.Name) -> ast.AST:
        if node.id in self.consts:
            value = self.consts[node.id]
            if not isinstance(value, int):  # a string, float or None constexpr
                raise ExprError(f"{_show(self.text)}: {node.id} is {value!r}, not an integer")
            return ast.copy_location(ast.Constant(value), node)
        return node

    def visit_Compare(self, node: ast.Compare) -> ast.AST:
        name = none_test(node)
        if name is not None and name.id in self.consts:  # any constexpr may be None-tested
            is_none = self.consts[name.id] is None
            return ast.copy_location(ast.Constant(is_none == isinstance(node.ops[0], ast.Is)), node)
        return self.generic_visit(node)


def compile_function(
    exprs: Sequence[Expr], params: Iterable[str], consts: Mapping[str, Any] | None = None
) -> Callable[..., tuple[int, ...]]:
    """Compile checked expressions into ``f(*params) -> tuple`` with ``consts`` folded in.

    Every free name must be a parameter or a constant. Parameters a given expression does
    not read are accepted and ignored, so a grid function can take a kernel's whole
    argument list positionally.
    """
    params = list(params)
    consts = dict(consts or {})
    for e in exprs:
        unknown = e.names - set(params) - consts.keys()
        if unknown:
            raise ExprError(f"{_show(e.text)}: unknown name(s) {', '.join(sorted(unknown))}")
    # A kernel's variants share their grids and checks, and often their constants: each
    # distinct function is compiled once (compiling is most of what opening a kernel
    # costs). The functions are pure, so sharing one is safe. Types are part of the key,
    # so that True and 1 (equal, and equal in hash) stay apart; repr keeps -0.0 from 0.0.
    key = (
        tuple(e.text for e in exprs),
        tuple(params),
        tuple((k, type(v), repr(v)) for k, v in consts.items()),
    )
    fn = _functions.get(key)
    if fn is None:
        if len(_functions) >= _MAX_FUNCTIONS:
            _functions.clear()
        fn = _functions[key] = _compile(exprs, params, consts)
    return fn


def _compile(
    exprs: Sequence[Expr], params: list[str], consts: Mapping[str, Any]
) -> Callable[..., tuple[int, ...]]:
    bound = [_Bind(consts, e.text).visit(ast.parse(e.text, mode="eval").body) for e in exprs]
    lam = ast.Lambda(
        args=ast.arguments(
            posonlyargs=[],
            args=[ast.arg(arg=f"_{p}") for p in params],
            kwonlyargs=[],
            kw_defaults=[],
            defaults=[],
        ),
        body=ast.Tuple(elts=[_Rename().visit(b) for b in bound], ctx=ast.Load()),
    )
    module = ast.Expression(body=lam)
    ast.fix_missing_locations(module)
    fn: Callable[..., tuple[int, ...]] = eval(compile(module, "<aotc-expr>", "eval"), _GLOBALS)
    return fn


class _Rename(ast.NodeTransformer):
    # Parameters are prefixed so that a kernel argument named like a helper (say ``min``)
    # can never shadow cdiv/min/max inside the compiled lambda.
    def visit_Name(self, node: ast.Name) -> ast.AST:
        return ast.copy_location(ast.Name(id=f"_{node.id}", ctx=ast.Load()), node)

    def visit_Call(self, node: ast.Call) -> ast.AST:
        node.args = [self.visit(a) for a in node.args]
        return node
