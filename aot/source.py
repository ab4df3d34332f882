"""Loading the ``@triton.jit`` functions a recipe names, and hashing what they depend on."""

from __future__ import annotations

import contextlib
import hashlib
import importlib.util
import io
import sys
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import Any

from .errors import RecipeError
from .recipe import KernelRecipe, Recipe

_modules: dict[Path, ModuleType] = {}


class KernelImportError(Exception):
    """A kernel file ended the process, or tried to, while being imported."""


def load_module(path: Path) -> ModuleType:
    """Execute a kernel file once per process, with its folder importable (for helpers).

    The file runs as an imported module would: ``sys.argv`` is just its own path (so a
    module-level ``argparse`` sees no aotc options), ``sys.exit`` becomes a
    ``KernelImportError`` instead of ending aotc, and what it prints is held back, then
    written to stderr under a line that names the file, never into aotc's own output.
    """
    path = path.resolve()
    mod = _modules.get(path)
    if mod is None:
        name = "aotc_src_" + hashlib.sha256(str(path).encode()).hexdigest()[:16]
        spec = importlib.util.spec_from_file_location(name, path)
        if spec is None or spec.loader is None:
            raise KernelImportError(f"{path.name} is not a Python file; name a .py file")
        mod = importlib.util.module_from_spec(spec)
        folder = str(path.parent)
        if folder not in sys.path:
            sys.path.insert(0, folder)
        sys.modules[name] = mod
        printed = io.StringIO()
        argv, sys.argv = sys.argv, [str(path)]
        try:
            with contextlib.redirect_stdout(printed), contextlib.redirect_stderr(printed):
                spec.loader.exec_module(mod)
        except SystemExit as exc:
            del sys.modules[name]
            raise KernelImportError(_exited(path, exc, printed.getvalue())) from None
        except BaseException:
            del sys.modules[name]
            _echo(path, printed.getvalue())
            raise
        finally:
            sys.argv = argv
        _echo(path, printed.getvalue())
        _modules[path] = mod
    return mod


def _exited(path: Path, exc: SystemExit, printed: str) -> str:
    lines = printed.strip().splitlines()
    said = f"; it printed: {' / '.join(lines[-5:])}" if lines else ""
    return (
        f"{path.name} called sys.exit({exc.code!r}) while being imported{said}. Importing a "
        "kernel file must only define things: move its command-line code (argparse, "
        'sys.exit) under `if __name__ == "__main__":`'
    )


def _echo(path: Path, printed: str) -> None:
    if printed:
        sys.stderr.write(f"aotc: importing {path.name} printed:\n")
        sys.stderr.write("".join(f"  | {line}\n" for line in printed.splitlines()))


def jit_function(path: Path, name: str) -> Any:
    fn = getattr(load_module(path), name, None)
    if fn is None:
        raise AttributeError(name)
    return fn


@dataclass(frozen=True)
class KernelSource:
    """A recipe kernel matched against its Triton function."""

    fn: Any  # triton.runtime.JITFunction
    arg_names: tuple[str, ...]  # every parameter, in order
    constexprs: tuple[str, ...]  # the constexpr parameters
    cache_key: str  # Triton's hash of the source and the jit functions it calls
    file_sha256: str


def resolve(recipe: Recipe, kr: KernelRecipe) -> KernelSource:
    """Import the kernel and check the recipe against its real parameter list."""
    from triton.runtime.jit import JITFunction

    key = f"{kr.where}.source"
    try:
        module = load_module(kr.source)
    except KernelImportError as exc:
        raise RecipeError(recipe.path, key, str(exc)) from None
    except Exception as exc:  # an AttributeError here is the file's own, not a missing name
        raise RecipeError(
            recipe.path, key, f"importing {kr.source.name} failed: {type(exc).__name__}: {exc}"
        ) from None
    fn = getattr(module, kr.function, None)
    if fn is None:
        raise RecipeError(recipe.path, key, f"{kr.source.name} defines no {kr.function!r}")
    if not isinstance(fn, JITFunction):
        raise RecipeError(
            recipe.path, key, f"{kr.function} is not a @triton.jit function ({type(fn).__name__})"
        )
    arg_names = tuple(p.name for p in fn.params)
    constexprs = tuple(p.name for p in fn.params if p.is_constexpr)
    runtime = [a for a in arg_names if a not in constexprs]
    sig_key = f"{kr.where}.signature"
    missing = [a for a in runtime if a not in kr.signature]
    if missing:
        raise RecipeError(
            recipe.path, sig_key, f"{kr.function} takes {', '.join(missing)}; give each a type"
        )
    extra = [a for a in kr.signature if a not in runtime]
    if extra:
        what = "is a constexpr parameter" if extra[0] in constexprs else "is not a parameter"
        raise RecipeError(
            recipe.path, f"{sig_key}.{extra[0]}", f"{what} of {kr.function}; remove it"
        )
    if list(kr.signature) != runtime:
        raise RecipeError(
            recipe.path,
            sig_key,
            f"list the arguments in the function's order: {', '.join(runtime)}",
        )
    given = set(kr.fixed) | set(kr.space)
    for c in constexprs:
        if c not in given:
            raise RecipeError(
                recipe.path,
                f"{kr.where}.fixed",
                f"constexpr {c} of {kr.function} has no value; add it to fixed or space",
            )
    for m in sorted(given - set(constexprs) - {"num_warps", "num_stages"}):
        where = "fixed" if m in kr.fixed else "space"
        raise RecipeError(
            recipe.path, f"{kr.where}.{where}.{m}", f"{kr.function} has no constexpr named {m}"
        )
    return KernelSource(
        fn=fn,
        arg_names=arg_names,
        constexprs=constexprs,
        cache_key=fn.cache_key,
        file_sha256=hashlib.sha256(kr.source.read_bytes()).hexdigest(),
    )
