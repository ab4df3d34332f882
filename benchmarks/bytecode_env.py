"""Bytecode for a benchmark's fresh processes, so that they import this repository's Python
the way a deployed service imports an installed package: from compiled bytecode (pip writes
it at install), not compiled from source in every process, which is what happens where
PYTHONDONTWRITEBYTECODE is set, as on our GPU machines (about 50 ms for the loader's
modules on our CPU machine). Installed packages (torch, triton) already have theirs, and
both sides of a comparison read them as before.

    compile_bytecode(ROOT / "loader", ROOT / "recipes" / "decode")
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def compile_bytecode(*folders: Path) -> None:
    """Write the bytecode of ``folders``' Python files into their ``__pycache__`` (which
    ``compileall`` does whatever PYTHONDONTWRITEBYTECODE says, and imports then read)."""
    subprocess.run([sys.executable, "-m", "compileall", "-q", *map(str, folders)],
                   check=True, capture_output=True, timeout=600)  # fmt: skip
