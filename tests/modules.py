"""Loading a Python file that is not on the import path (a recipe's kernels or references,
a benchmark script) as a module of its own."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType


def load_module(path: Path, as_name: str) -> ModuleType:
    """``path`` run as the module ``as_name``, registered in ``sys.modules`` first
    (dataclasses look their module up while it runs)."""
    spec = importlib.util.spec_from_file_location(as_name, path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[as_name] = module
    spec.loader.exec_module(module)
    return module
