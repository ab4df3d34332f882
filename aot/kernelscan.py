"""What a kernel file holds, for ``aotc init``: its kernels, and what its source says
that the kernel objects do not.

The kernels are the module-level Triton kernels the file itself defines, device functions
(called by other kernels, or returning a value) left out. A kernel object holds its
parameters, autotune's configs and heuristics, but not what each runtime argument is
(pointer, size, stride, float), nor the grid its host wrapper launches it with. Both are
read here from the source, as guesses for a draft recipe: a parameter is a pointer when a
load or store reads through it (or its ``.dtype`` is read), a size when it bounds a loop, a
``cdiv``, a comparison or a ``%``; a launch is a ``kernel[grid](...)`` call, its grid
rewritten into the loader's expression language where it can be. Nothing here is trusted
by a build: the recipe's own checks are.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from types import ModuleType
from typing import Any

from loader.expr import ExprError, parse

from .shipped import NotAKernel, Shipped, unwrap

# Calls whose first argument is a pointer (through offsets added to it).
_MEMORY = {
    "load", "store", "atomic_add", "atomic_max", "atomic_min", "atomic_cas", "atomic_xchg",
    "atomic_and", "atomic_or", "atomic_xor", "make_block_ptr", "make_tensor_descriptor",
    "advance",
}  # fmt: skip
_BOUNDING = {"range", "static_range", "cdiv", "multiple_of"}  # calls whose args are sizes
_GRID_CALLS = {"cdiv": "cdiv", "next_power_of_2": "next_power_of_2", "min": "min", "max": "max"}


def find_kernels(module: ModuleType, file: Path) -> tuple[list[tuple[str, Shipped]], list[str]]:
    """The module-level kernels ``file`` defines, in definition order (not those it imports,
    nor a @triton.jit function a module-level autotune/heuristics wraps, nor device
    functions), and what was skipped with why."""
    from triton.runtime.autotuner import Autotuner, Heuristics
    from triton.runtime.jit import JITFunction

    objects = [(a, o) for a, o in vars(module).items()
               if isinstance(o, JITFunction | Autotuner | Heuristics)]  # fmt: skip
    wrapped = {id(_inner(o)) for _, o in objects if not isinstance(o, JITFunction)}
    seen: set[int] = set()
    found: list[tuple[str, Shipped]] = []
    skipped: list[str] = []
    for attr, obj in objects:
        if id(obj) in seen or (isinstance(obj, JITFunction) and id(obj) in wrapped):
            continue
        seen.add(id(obj))
        try:
            k = unwrap(obj)
        except NotAKernel as exc:
            skipped.append(f"{attr}: it {exc}")
            continue
        if _filename(k) != file.resolve():
            continue  # imported from another file: its own file's recipe drafts it
        found.append((attr, k))
    called = set().union(*(usage_of(k).calls for _, k in found)) if found else set()
    kernels = []
    for attr, k in found:
        usage = usage_of(k)
        if usage.returns_value or (attr in called and k.layers == ("jit",)):
            skipped.append(f"{attr}: a device function (it returns a value, or other "
                           "kernels call it), not a kernel")  # fmt: skip
        else:
            kernels.append((attr, k))
    return kernels, skipped


def _inner(obj: Any) -> Any:
    for _ in range(16):
        if not hasattr(obj, "fn") or type(obj).__name__ == "JITFunction":
            break
        obj = obj.fn
    return obj


def _filename(k: Shipped) -> Path | None:
    code = getattr(getattr(k.jit, "fn", None), "__code__", None)
    return Path(code.co_filename).resolve() if code is not None else None


def usage_of(k: Shipped) -> Usage:
    """How the kernel's own body uses its parameters."""
    return scan(str(getattr(k.jit, "src", "")), [p.name for p in k.params])


@dataclass(frozen=True)
class Usage:
    """How a kernel's body uses its parameters."""

    pointers: frozenset[str] = frozenset()
    sizes: frozenset[str] = frozenset()
    none_tested: frozenset[str] = frozenset()  # `x is None` / `x is not None`
    returns_value: bool = False  # a device function, not a kernel
    calls: frozenset[str] = frozenset()  # the bare names it calls (helpers)


def scan(src: str, params: Sequence[str]) -> Usage:
    """The usage of ``params`` in the function whose source is ``src`` (a ``def``)."""
    try:
        tree = ast.parse(src)
    except (SyntaxError, ValueError):
        return Usage()
    fn = next((n for n in tree.body if isinstance(n, ast.FunctionDef)), None)
    if fn is None:
        return Usage()
    known = set(params)
    assigned = _assignments(fn)
    pointers: set[str] = set()
    sizes: set[str] = set()
    nones: set[str] = set()
    calls: set[str] = set()
    for node in _own_nodes(fn):
        if isinstance(node, ast.Call):
            name = _call_name(node.func)
            if isinstance(node.func, ast.Name):
                calls.add(node.func.id)
            if name in _MEMORY and node.args:
                pointers |= _bases(node.args[0], assigned, set()) & known
            elif name in _BOUNDING:
                sizes |= {n for a in node.args for n in _names(a)} & known
        elif isinstance(node, ast.Attribute) and node.attr == "dtype":
            if isinstance(node.value, ast.Name) and node.value.id in known:
                pointers.add(node.value.id)
        elif isinstance(node, ast.Compare):
            none = _none_test(node)
            if none is not None:
                nones.add(none)
            else:
                sizes |= {n for part in (node.left, *node.comparators) for n in _names(part)}
        elif isinstance(node, ast.BinOp) and isinstance(node.op, ast.Mod | ast.FloorDiv):
            sizes |= {n for n in (_bare(node.left), _bare(node.right)) if n}
    returns = any(isinstance(n, ast.Return) and n.value is not None for n in _own_nodes(fn))
    return Usage(frozenset(pointers), frozenset((sizes & known) - pointers),
                 frozenset(nones & known), returns, frozenset(calls))  # fmt: skip


def _own_nodes(fn: ast.FunctionDef) -> Iterator[ast.AST]:
    """Every node of ``fn``'s body, not descending into nested functions."""
    stack: list[ast.AST] = list(fn.body)
    while stack:
        node = stack.pop()
        yield node
        for child in ast.iter_child_nodes(node):
            if not isinstance(child, ast.FunctionDef | ast.Lambda):
                stack.append(child)


def _assignments(fn: ast.FunctionDef) -> dict[str, list[ast.expr]]:
    out: dict[str, list[ast.expr]] = {}
    for node in _own_nodes(fn):
        if isinstance(node, ast.Assign):
            for target in node.targets:
                if isinstance(target, ast.Name):
                    out.setdefault(target.id, []).append(node.value)
        elif (
            isinstance(node, ast.AugAssign | ast.AnnAssign)
            and node.value is not None
            and isinstance(node.target, ast.Name)
        ):
            out.setdefault(node.target.id, []).append(node.value)
    return out


def _bases(e: ast.expr, assigned: dict[str, list[ast.expr]], seen: set[str]) -> set[str]:
    """The names a pointer expression is based on: the left end of its sums, through the
    locals it was built in (``a_tile = a_ptr + offs`` → a_ptr)."""
    if isinstance(e, ast.BinOp) and isinstance(e.op, ast.Add | ast.Sub):
        return _bases(e.left, assigned, seen)
    if isinstance(e, ast.Subscript):
        return _bases(e.value, assigned, seen)
    if isinstance(e, ast.IfExp):
        return _bases(e.body, assigned, seen) | _bases(e.orelse, assigned, seen)
    if isinstance(e, ast.Call) and _call_name(e.func) in _MEMORY and e.args:
        return _bases(e.args[0], assigned, seen)  # tl.advance(block_ptr, ...)
    if isinstance(e, ast.Call):  # tl.make_block_ptr(base=X, ...)
        return {n for k in e.keywords if k.arg == "base" for n in _bases(k.value, assigned, seen)}
    if isinstance(e, ast.Name):
        if e.id in seen:
            return set()
        seen.add(e.id)
        out = {e.id}
        for value in assigned.get(e.id, []):
            out |= _bases(value, assigned, seen)
        return out
    return set()


def _call_name(func: ast.expr) -> str:
    if isinstance(func, ast.Attribute):
        return func.attr
    return func.id if isinstance(func, ast.Name) else ""


def _names(e: ast.expr) -> set[str]:
    return {n.id for n in ast.walk(e) if isinstance(n, ast.Name)}


def _bare(e: ast.expr) -> str:
    return e.id if isinstance(e, ast.Name) else ""


def _none_test(node: ast.Compare) -> str | None:
    if len(node.ops) != 1 or not isinstance(node.ops[0], ast.Is | ast.IsNot):
        return None
    right = node.comparators[0]
    if isinstance(right, ast.Constant) and right.value is None and isinstance(node.left, ast.Name):
        return node.left.id
    return None


@dataclass(frozen=True)
class Launch:
    """A ``kernel[grid](...)`` call in the kernel's file."""

    caller: str  # the function it is in ("" at module level)
    written: str  # the grid as the author wrote it
    grid: tuple[str, ...] | None  # in aotc's expression language, if it translates
    names: frozenset[str] = frozenset()  # the names the translated grid reads
    # The arguments as written (``X.stride(0)``): positional (up to a *args), then by
    # keyword; launches are told apart by their grids only.
    args: tuple[str, ...] = field(default=(), compare=False)
    keywords: tuple[tuple[str, str], ...] = field(default=(), compare=False)
    # The names its function binds (parameters, assignments): a name passed that is none
    # of them is the module's (swiglu_fg_kernel's BLOCK_SIZE = BLOCK_SIZE, a constant).
    bound: frozenset[str] = field(default=frozenset(), compare=False)

    def passes(self, params: Sequence[str]) -> dict[str, str]:
        """What the launch passes for each of the kernel's ``params`` it gives, as written."""
        return {**dict(zip(params, self.args, strict=False)), **dict(self.keywords)}


def launches(path: Path, attr: str) -> list[Launch]:
    """Every launch of the module-level object ``attr`` in the file at ``path``, directly or
    through a local it was assigned to (``fx = attr if gemma else other; fx[grid](...)``)."""
    try:
        tree = ast.parse(path.read_text(encoding="utf-8"))
    except (OSError, SyntaxError, ValueError):
        return []
    out: list[Launch] = []
    for scope, body, params in _scopes(tree):
        own = [s for s in body if not isinstance(s, ast.FunctionDef | ast.ClassDef)]
        bound = frozenset(params) | _bound(body) if scope else frozenset()
        names = _aliases(body, attr)
        for node in (n for stmt in own for n in ast.walk(stmt)):
            if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Subscript)):
                continue
            if _bare(node.func.value) not in names:
                continue
            given = node.func.slice
            grid = _resolve(given, body, node.lineno)
            launch = _launch(scope, ast.unparse(grid if grid is not None else given), grid)
            launch = replace(
                launch,
                args=_positional(node),
                keywords=tuple(
                    (k.arg, ast.unparse(k.value)) for k in node.keywords if k.arg is not None
                ),
                bound=bound,
            )
            if launch not in out:
                out.append(launch)
    return out


def _positional(call: ast.Call) -> tuple[str, ...]:
    out: list[str] = []
    for a in call.args:
        if isinstance(a, ast.Starred):
            break
        out.append(ast.unparse(a))
    return tuple(out)


def _scopes(tree: ast.Module) -> Iterator[tuple[str, list[ast.stmt], list[str]]]:
    """Each function's statements and parameters, and the module's."""
    for fn in (n for n in ast.walk(tree) if isinstance(n, ast.FunctionDef)):
        a = fn.args
        params = [x.arg for x in (*a.posonlyargs, *a.args, *a.kwonlyargs, a.vararg, a.kwarg) if x]
        yield fn.name, fn.body, params
    yield "", tree.body, []


def _bound(body: list[ast.stmt]) -> frozenset[str]:
    """The names a function's statements bind (assigned, looped over, imported, ...)."""
    stores = (n.id for s in _statements(body) for n in ast.walk(s)
              if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Store))  # fmt: skip
    imports = (a.asname or a.name.split(".")[0] for s in _statements(body)
               if isinstance(s, ast.Import | ast.ImportFrom) for a in s.names)  # fmt: skip
    return frozenset(stores) | frozenset(imports)


def _statements(body: list[ast.stmt]) -> Iterator[ast.stmt]:
    """The scope's statements, those nested in its if/with/for/try blocks included, and
    its nested functions (not what they hold)."""
    stack: list[ast.AST] = list(reversed(body))
    while stack:
        node = stack.pop()
        if isinstance(node, ast.stmt):
            yield node
        if not isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef | ast.Lambda):
            stack.extend(reversed(list(ast.iter_child_nodes(node))))


def _aliases(body: list[ast.stmt], attr: str) -> set[str]:
    """``attr`` and the locals of the scope assigned it, or a choice that may be it
    (``fx = attr if gemma else other``, and locals assigned those)."""
    pairs = [(t.id, s.value) for s in _statements(body) if isinstance(s, ast.Assign)
             for t in s.targets if isinstance(t, ast.Name)]  # fmt: skip
    names, grown = {attr}, True
    while grown:
        new = {n for n, value in pairs if n not in names and _may_be(value, names)}
        names |= new
        grown = bool(new)
    return names


def _may_be(value: ast.expr, names: set[str]) -> bool:
    if isinstance(value, ast.IfExp):
        return _may_be(value.body, names) or _may_be(value.orelse, names)
    return _bare(value) in names


def _resolve(given: ast.expr, body: list[ast.stmt], line: int) -> ast.expr | None:
    """The grid a name stands for: a ``def grid(meta)`` returning it, ``grid = lambda
    meta: ...`` or ``grid = (...)`` in the same scope (in a block of it too; the last one
    before the launch at ``line``, else the last); the expression itself if it is no name;
    None when the name is not found there (a parameter, say)."""
    if not isinstance(given, ast.Name):
        return given
    found: list[tuple[int, ast.expr]] = []  # in the source's order
    for stmt in _statements(body):
        if isinstance(stmt, ast.Assign) and any(_bare(t) == given.id for t in stmt.targets):
            found.append((stmt.lineno, stmt.value))
        elif isinstance(stmt, ast.FunctionDef) and stmt.name == given.id:
            returns = [s for s in stmt.body if isinstance(s, ast.Return)]
            if len(stmt.body) == 1 and returns and returns[0].value is not None:
                found.append((stmt.lineno, ast.Lambda(stmt.args, returns[0].value)))
    before = [value for at, value in found if at <= line]
    return before[-1] if before else found[-1][1] if found else None


def _launch(caller: str, written: str, grid: ast.expr | None) -> Launch:
    if grid is None:
        return Launch(caller, written, None)
    meta = ""
    if isinstance(grid, ast.Lambda) and len(grid.args.args) == 1:
        meta, grid = grid.args.args[0].arg, grid.body
    items = list(grid.elts) if isinstance(grid, ast.Tuple | ast.List) else [grid]
    try:
        texts = [ast.unparse(_GridRewrite(meta).visit(item)) for item in items]
        exprs = [parse(t) for t in texts]
    except (_NotGrid, ExprError):
        return Launch(caller, written, None)
    while len(texts) > 1 and texts[-1] == "1":
        texts.pop()
    names = frozenset().union(*(e.names for e in exprs))
    return Launch(caller, written, tuple(texts), names)


class _NotGrid(ValueError):
    pass


class _GridRewrite(ast.NodeTransformer):
    """``meta["BLOCK_M"]`` → ``BLOCK_M``, ``triton.cdiv`` → ``cdiv``; the rest as is, to be
    checked by the loader's parser."""

    def __init__(self, meta: str):
        self.meta = meta

    def visit_Subscript(self, node: ast.Subscript) -> ast.AST:
        key = node.slice
        if (
            _bare(node.value) == self.meta
            and isinstance(key, ast.Constant)
            and isinstance(key.value, str)
        ):
            return ast.Name(key.value, ast.Load())
        raise _NotGrid

    def visit_Call(self, node: ast.Call) -> ast.AST:
        name = _GRID_CALLS.get(_call_name(node.func))
        if name is None or node.keywords:
            raise _NotGrid
        return ast.Call(ast.Name(name, ast.Load()), [self.visit(a) for a in node.args], [])

    def visit_Attribute(self, node: ast.Attribute) -> ast.AST:
        raise _NotGrid
