"""The environment for a benchmark's fresh processes, so that Python code is imported the way
a deployed service imports it: from compiled bytecode, which ``pip install`` writes, not
compiled from source in every process (what happens where PYTHONDONTWRITEBYTECODE is set,
as on our GPU machines: about 50 ms for the loader's modules on our CPU machine). Both
sides of a comparison get it: aotc's loader and the JIT path's torch and triton.

    env = bytecode_env(tmp)   # bytecode under tmp/pycache, written by one warm-up import
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def bytecode_env(tmp: Path, imports: str = "torch, triton, loader") -> dict[str, str]:
    """os.environ with bytecode written to and read from ``tmp/pycache``, the repository on
    PYTHONPATH, and ``imports`` imported once in a child so that the bytecode exists."""
    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    env["PYTHONPYCACHEPREFIX"] = str(tmp / "pycache")
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), env.get("PYTHONPATH", "")]))
    subprocess.run([sys.executable, "-c", f"import {imports}"], env=env, check=True,
                   capture_output=True, timeout=600)  # fmt: skip
    return env
