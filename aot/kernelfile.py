"""Importing the kernel files a recipe names, safely, once per process."""

from __future__ import annotations

import contextlib
import hashlib
import importlib.util
import io
import multiprocessing
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

from .shipped import Shipped, unwrap

_modules: dict[Path, ModuleType] = {}


class KernelImportError(Exception):
    """A kernel file ended the process, or tried to, while being imported."""


def load_module(path: Path) -> ModuleType:
    """Execute a kernel file once per process, with its folder importable (for helpers).

    A file inside a package (its folder has an ``__init__.py``, as a kernel library's
    ``ops/`` has) is imported as that package's module, with the package's parent folder
    importable, so that its relative and absolute imports of the package's other modules
    work as they do for the library's users. Any other file runs as a module of its own.

    The file runs as an imported module would: ``sys.argv`` is just its own path (so a
    module-level ``argparse`` sees no aotc options), ``sys.exit`` becomes a
    ``KernelImportError`` instead of ending aotc, and what it prints is held back, then
    written to stderr under a line that names the file, never into aotc's own output
    (once: a worker process importing the file again does not repeat it).
    """
    path = path.resolve()
    mod = _modules.get(path)
    if mod is None:
        dotted, root = _package_module(path)
        folder = str(root)
        if folder not in sys.path:
            sys.path.insert(0, folder)
        printed = io.StringIO()
        argv, sys.argv = sys.argv, [str(path)]
        try:
            with contextlib.redirect_stdout(printed), contextlib.redirect_stderr(printed):
                mod = _import(path, dotted)
        except SystemExit as exc:
            raise KernelImportError(_exited(path, exc, printed.getvalue())) from None
        except BaseException:
            _echo(path, printed.getvalue(), failed=True)
            raise
        finally:
            sys.argv = argv
        _echo(path, printed.getvalue())
        _modules[path] = mod
    return mod


def _package_module(path: Path) -> tuple[str | None, Path]:
    """(the file's dotted module name, the folder to import it from) when its folder is a
    package; (None, its folder) otherwise."""
    parts = [path.stem]
    folder = path.parent
    while (folder / "__init__.py").is_file() and folder.name.isidentifier():
        parts.insert(0, folder.name)
        folder = folder.parent
    if len(parts) == 1 or not path.stem.isidentifier():
        return None, path.parent
    return ".".join(parts), folder


def _import(path: Path, dotted: str | None) -> ModuleType:
    if dotted is not None:
        try:
            mod = importlib.import_module(dotted)
        except BaseException:
            for name in [n for n in sys.modules if n == dotted or n.startswith(dotted + ".")]:
                del sys.modules[name]
            raise
        found = Path(getattr(mod, "__file__", "") or "").resolve()
        if found != path:
            raise KernelImportError(
                f"{path.name}: importing it as {dotted} found {found} instead (another "
                f"{dotted.split('.')[0]} was imported first, by a recipe file or from the "
                "installed packages); name that copy's file in the recipe, or uninstall it"
            )
        return mod
    name = "aotc_src_" + hashlib.sha256(str(path).encode()).hexdigest()[:16]
    spec = importlib.util.spec_from_file_location(name, path)
    if spec is None or spec.loader is None:
        raise KernelImportError(f"{path.name} is not a Python file; name a .py file")
    mod = importlib.util.module_from_spec(spec)
    sys.modules[name] = mod
    try:
        spec.loader.exec_module(mod)
    except BaseException:
        del sys.modules[name]
        raise
    return mod


# What torch, triton and kernel libraries say without a GPU ("0 active drivers" is triton's,
# "No device were detected" a kernel library's own probe).
# unsloth's probe says "cannot find any torch accelerator? You need a GPU."
_NO_GPU = ("cuda", "nvidia driver", "no gpu", "need a gpu", "no device", "active drivers")


def import_failure(name: str, exc: BaseException) -> str:
    """The message for a kernel or recipe file whose import raised ``exc``, naming where
    it was raised when that is another file (a package's ``__init__.py`` it runs first, a
    helper); with a hint when the file reached for a GPU while being imported (a CPU-only
    builder has none)."""
    said = " ".join(str(exc).split())  # one line, however the library wrapped it
    text = f"importing {name} failed: {type(exc).__name__}: {said}{_raised_in(name, exc)}"
    if any(word in str(exc).lower() for word in _NO_GPU):
        text += (
            ". It seems to use the GPU while being imported, and aotc imports it on machines "
            "without one (a CPU-only CI runner): move that code into a function, or guard it "
            "with torch.cuda.is_available()"
        )
    return text


def _raised_in(name: str, exc: BaseException) -> str:
    """`` (raised at A:1 < B:2 ...)``: the files of ``exc``'s traceback from the innermost
    out, past the import machinery and aotc, where one is not the named file (a package's
    ``__init__.py`` that Python runs first, a helper it imports); else ``""``."""
    chain: list[tuple[Path, int]] = []
    tb = exc.__traceback__
    while tb is not None:
        file = tb.tb_frame.f_code.co_filename
        if not file.startswith("<") and not _machinery(Path(file)):
            if chain and chain[-1][0] == Path(file):
                chain.pop()
            chain.append((Path(file), tb.tb_lineno))
        tb = tb.tb_next
    if not chain or all(file.name == Path(name).name for file, _ in chain):
        return ""
    where = " < ".join(f"{file}:{line}" for file, line in reversed(chain[-4:]))
    inits = [file for file, _ in chain if file.name == "__init__.py"]
    if not inits:
        return f" (raised at {where})"
    return (
        f" (raised at {where}; Python runs {inits[0]} first, the package's __init__.py, "
        f"to import {Path(name).name} as a module of the package: what it imports must be "
        "importable where aotc runs, so install the package's dependencies)"
    )


def _machinery(file: Path) -> bool:
    """Whether ``file`` is aotc's own or importlib's (frames on the way to the import)."""
    return Path(__file__).parent in file.parents or file.parent.name == "importlib"


def load_function(ref: str) -> Any:
    """The function a recipe names as ``"path.py:function"`` (the path absolute, or
    relative to the current folder): its file imported once per process, as
    ``load_module`` does."""
    file, _, name = ref.rpartition(":")
    return getattr(load_module(Path(file)), name)


def _exited(path: Path, exc: SystemExit, printed: str) -> str:
    lines = printed.strip().splitlines()
    said = f"; it printed: {' / '.join(lines[-5:])}" if lines else ""
    return (
        f"{path.name} called sys.exit({exc.code!r}) while being imported{said}. Importing a "
        "kernel file must only define things: move its command-line code (argparse, "
        'sys.exit) under `if __name__ == "__main__":`'
    )


def _echo(path: Path, printed: str, *, failed: bool = False) -> None:
    # A build's compile and tuning workers import the file again: what it printed was
    # shown once already, when aotc itself imported it (unless the import fails here).
    if printed and (failed or multiprocessing.parent_process() is None):
        sys.stderr.write(f"aotc: importing {path.name} printed:\n")
        sys.stderr.write("".join(f"  | {line}\n" for line in printed.splitlines()))


def shipped(path: Path, name: str) -> Shipped:
    """The kernel ``name`` of the file at ``path``, unwrapped from its decorators."""
    obj = getattr(load_module(path), name, None)
    if obj is None:
        raise AttributeError(name)
    return unwrap(obj)


def jit_function(path: Path, name: str) -> Any:
    """The ``@triton.jit`` function under the decorators of ``name``."""
    return shipped(path, name).jit
