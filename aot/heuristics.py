"""Translating ``@triton.heuristics`` rules into the loader's expression language.

A rule is a Python function of the launch's arguments dict, e.g.
``lambda args: args["K"] % (args["BLOCK_K"] * args["SPLIT_K"]) == 0``. The loader never
imports the kernel's module, so the rule is read from its source (the exact lambda or
``def`` found by matching compiled code) and rewritten into an expression over argument
and meta-parameter names: ``K % (BLOCK_K * SPLIT_K) == 0``; ``args["b"] is not None`` becomes
``b is not None``. What has no counterpart in the expression language (attribute access
such as ``.dtype``, calls of the author's helpers) is refused with the reason, and the
recipe key that replaces the rule.
"""

from __future__ import annotations

import ast
import copy
import functools
import os
import types
from collections.abc import Callable, Mapping
from typing import Any

# Calls a rule may make, by the name they go by (after "triton." is dropped).
CALLS = {"next_power_of_2": "next_power_of_2", "cdiv": "cdiv", "min": "min", "max": "max"}
_BINOPS = (ast.Add, ast.Sub, ast.Mult, ast.FloorDiv, ast.Mod)
_CMPOPS = (ast.Lt, ast.LtE, ast.Gt, ast.GtE, ast.Eq, ast.NotEq)


class Untranslatable(ValueError):
    """The rule cannot become an expression; the message says why."""


class PassThrough(Untranslatable):
    """The rule hands back the caller's own value of the parameter it sets
    (``"GEMMA": lambda args: bool(args["GEMMA"])``): Triton runs it on the launch's
    arguments, so the value is whatever the caller launched with, which no expression of
    the other arguments computes. The message says how a recipe takes it."""

    def __init__(self, name: str, written: str, kind: str):
        self.name, self.written, self.kind = name, written, kind  # kind: "bool", "int" or ""
        super().__init__(f"{self.lead}. {self.fix}")

    @property
    def lead(self) -> str:
        n = self.name
        return f"passes the caller's own {n} through ({self.written}): {n} is what the caller " + (
            "launches with"
        )

    @property
    def fix(self) -> str:
        n = self.name
        if self.kind == "bool":
            return (
                f"Give the value the callers use in fixed, fixed = {{ {n} = false }} (one "
                f"[[kernel]] entry per value), or take it per call with both values built: "
                f'call = {{ {n}_ = "keyword" }}, sizes = {{ {n}_ = 1 }}, derived = '
                f'{{ {n} = "{n}_ != 0" }} (the caller passes {n}_=0 or {n}_=1)'
            )
        return (
            f"Give the value the callers use in fixed, fixed = {{ {n} = ... }} (one [[kernel]] "
            f"entry per value), or take it per call, one variant per listed value: call = "
            f'{{ {n}_ = "keyword" }}, sizes = {{ {n}_ = [...] }}, derived = {{ {n} = "{n}_" }} '
            f"(the caller passes {n}_=...)"
        )


def translate(rule: Callable[..., Any], name: str = "") -> str:
    """The rule as an expression in the loader's language, or ``Untranslatable``
    (``PassThrough`` where the rule for ``name`` only hands back the caller's ``name``)."""
    body, arg = _returned(find_definition(rule))
    found = _pass_through(body, arg, name)
    if found is not None:
        raise found
    globals_ = getattr(rule, "__globals__", {})
    return ast.unparse(Rewrite(arg, globals_).visit(body))


def pass_through(rule: Callable[..., Any], name: str) -> PassThrough | None:
    """Whether the rule for ``name`` only hands back the caller's own ``name``, and how."""
    try:
        return _pass_through(*_returned(find_definition(rule)), name)
    except Untranslatable:
        return None


def _returned(node: ast.Lambda | ast.FunctionDef) -> tuple[ast.expr, str]:
    """What the rule returns, and the name of its one parameter (the arguments dict)."""
    if isinstance(node, ast.Lambda):
        body, arg = node.body, node.args
    else:
        statements = [s for s in node.body if not _is_docstring(s)]
        if len(statements) != 1 or not isinstance(statements[0], ast.Return):
            raise Untranslatable("its body is more than one return statement")
        returned = statements[0].value
        if returned is None:
            raise Untranslatable("it returns nothing")
        body, arg = returned, node.args
    if len(arg.args) != 1 or arg.vararg or arg.kwarg or arg.kwonlyargs:
        raise Untranslatable("it does not take exactly one argument (the arguments dict)")
    return body, arg.args[0].arg


def _pass_through(body: ast.expr, args: str, name: str) -> PassThrough | None:
    """``args["X"]``, ``bool(args["X"])`` or ``int(args["X"])`` in the rule for X."""
    read, kind = body, ""
    if (
        isinstance(body, ast.Call)
        and isinstance(body.func, ast.Name)
        and body.func.id in ("bool", "int")
        and len(body.args) == 1
        and not body.keywords
    ):
        read, kind = body.args[0], body.func.id
    if (
        name
        and isinstance(read, ast.Subscript)
        and isinstance(read.value, ast.Name)
        and read.value.id == args
        and isinstance(read.slice, ast.Constant)
        and read.slice.value == name
    ):
        return PassThrough(name, ast.unparse(body), kind)
    return None


def _is_docstring(stmt: ast.stmt) -> bool:
    return isinstance(stmt, ast.Expr) and isinstance(stmt.value, ast.Constant)


def find_definition(rule: Callable[..., Any]) -> ast.Lambda | ast.FunctionDef:
    """The lambda or def in the rule's file that compiled to the rule's code: the
    innermost one that spans every position the code's instructions came from and reads
    the same names and constants."""
    code = getattr(rule, "__code__", None)
    if not isinstance(code, types.CodeType):
        raise Untranslatable(f"it is a {type(rule).__name__}, not a Python function")
    tree = _parsed(code.co_filename, _stamp(code.co_filename))
    if tree is None:
        raise Untranslatable(f"its source ({code.co_filename}) cannot be read")
    # RESUME and the implicit return sit at column 0; the body's instructions place it.
    spots = [(p[0], p[2]) for p in code.co_positions() if p[0] is not None and p[2]]
    found: list[ast.Lambda | ast.FunctionDef] = []
    for node in ast.walk(tree):
        if not isinstance(node, ast.Lambda | ast.FunctionDef) or node.end_lineno is None:
            continue
        start, end = (node.lineno, node.col_offset), (node.end_lineno, node.end_col_offset or 0)
        if all(start <= spot <= end for spot in spots) and _same_names(node, code):
            found.append(node)
    if not found:
        raise Untranslatable("its source does not match the running code (edited since import?)")
    return min(found, key=lambda n: (n.end_lineno or 0) - n.lineno)


def _stamp(filename: str) -> tuple[int, int]:
    try:
        st = os.stat(filename)
    except OSError:
        return (0, 0)
    return st.st_mtime_ns, st.st_size


@functools.cache
def _parsed(filename: str, stamp: tuple[int, int]) -> ast.Module | None:
    """The file's syntax tree, parsed once per version of the file (``stamp``)."""
    try:
        with open(filename, encoding="utf-8") as f:
            return ast.parse(f.read(), filename)
    except (OSError, SyntaxError, ValueError):
        return None


def _same_names(node: ast.Lambda | ast.FunctionDef, code: types.CodeType) -> bool:
    """Whether ``node`` compiles to code with ``code``'s names and constants."""
    if isinstance(node, ast.FunctionDef):
        bare = copy.copy(node)
        bare.decorator_list = []
        module: ast.Module | ast.Expression = ast.Module([bare], [])
    else:
        module = ast.Expression(node)
    ast.fix_missing_locations(module)
    try:
        top = compile(module, "<rule>", "exec" if isinstance(module, ast.Module) else "eval")
    except (SyntaxError, ValueError):
        return False
    inner = [c for c in top.co_consts if isinstance(c, types.CodeType)]
    return any(_names(c) == _names(code) for c in inner)


def _names(code: types.CodeType) -> tuple[Any, ...]:
    consts = tuple(c for c in code.co_consts if not isinstance(c, types.CodeType))
    return code.co_names, code.co_varnames, consts


class Rewrite(ast.NodeTransformer):
    """``args["K"]`` → ``K``; module constants inlined; anything else refused."""

    def __init__(self, args: str, globals_: Mapping[str, Any]):
        self.args = args
        self.globals = globals_

    def generic_visit(self, node: ast.AST) -> ast.AST:
        raise Untranslatable(f"`{ast.unparse(node)}` has no counterpart in aotc's expressions")

    def visit_Subscript(self, node: ast.Subscript) -> ast.AST:
        key = node.slice
        if (
            isinstance(node.value, ast.Name)
            and node.value.id == self.args
            and isinstance(key, ast.Constant)
            and isinstance(key.value, str)
        ):
            return ast.Name(key.value, ast.Load())
        raise Untranslatable(f"`{ast.unparse(node)}` is not a read of one argument")

    def visit_Name(self, node: ast.Name) -> ast.AST:
        if node.id == self.args:
            raise Untranslatable("it uses the arguments dict other than as args['NAME']")
        value = self.globals.get(node.id, _MISSING)
        if type(value) in (int, bool):
            return ast.Constant(value)
        raise Untranslatable(f"it reads `{node.id}`, which is not an integer constant")

    def visit_Constant(self, node: ast.Constant) -> ast.AST:
        if type(node.value) not in (int, bool):
            raise Untranslatable(f"the literal {node.value!r} is not an integer or boolean")
        return node

    def visit_BinOp(self, node: ast.BinOp) -> ast.AST:
        if not isinstance(node.op, _BINOPS):
            raise Untranslatable(f"the operator in `{ast.unparse(node)}` (use //, not /)")
        return ast.BinOp(self.visit(node.left), node.op, self.visit(node.right))

    def visit_UnaryOp(self, node: ast.UnaryOp) -> ast.AST:
        if not isinstance(node.op, ast.USub | ast.UAdd | ast.Not):
            raise Untranslatable(f"the operator in `{ast.unparse(node)}`")
        return ast.UnaryOp(node.op, self.visit(node.operand))

    def visit_Compare(self, node: ast.Compare) -> ast.AST:
        none_test = self._none_test(node)
        if none_test is not None:
            return none_test
        if not all(isinstance(op, _CMPOPS) for op in node.ops):
            raise Untranslatable(f"the comparison `{ast.unparse(node)}`")
        return ast.Compare(
            self.visit(node.left), node.ops, [self.visit(c) for c in node.comparators]
        )

    def _none_test(self, node: ast.Compare) -> ast.AST | None:
        """``args["b"] is None`` → ``b is None``; the recipe then makes it exact for the
        argument's kind (``pointer_none_tests`` in aot/recipe/kernel_names.py)."""
        if len(node.ops) != 1 or not isinstance(node.ops[0], ast.Is | ast.IsNot):
            return None
        right = node.comparators[0]
        if not (isinstance(right, ast.Constant) and right.value is None):
            return None
        left = self.visit(node.left)
        if not isinstance(left, ast.Name):
            raise Untranslatable(f"`{ast.unparse(node)}` tests an expression, not an argument")
        return ast.Compare(left, [node.ops[0]], [ast.Constant(None)])

    def visit_BoolOp(self, node: ast.BoolOp) -> ast.AST:
        return ast.BoolOp(node.op, [self.visit(v) for v in node.values])

    def visit_IfExp(self, node: ast.IfExp) -> ast.AST:
        return ast.IfExp(self.visit(node.test), self.visit(node.body), self.visit(node.orelse))

    def visit_Call(self, node: ast.Call) -> ast.AST:
        func = node.func
        name = None
        if isinstance(func, ast.Name):
            name = func.id
        elif (
            isinstance(func, ast.Attribute)
            and isinstance(func.value, ast.Name)
            and func.value.id in ("triton", "tl")
        ):
            name = func.attr
        if name not in CALLS or node.keywords:
            raise Untranslatable(f"it calls `{ast.unparse(func)}`")
        return ast.Call(ast.Name(CALLS[name], ast.Load()), [self.visit(a) for a in node.args], [])


_MISSING = object()
