"""Running a test module's kernels under Triton's interpreter, in a child process.

``TRITON_INTERPRET=1`` must be set before Triton is imported (its own library, tl.cdiv and
the like, is decorated at import), so a test module runs itself as a script with it set:
its ``__main__`` block computes every case and prints one line, ``mark`` followed by the
results as JSON, which ``run`` returns to the parent's fixture.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]


def run(script: str, mark: str, cwd: Path) -> dict[str, Any]:
    # The script imports this module as tests.interpreted: the repository on its path.
    path = os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))
    env = {**os.environ, "TRITON_INTERPRET": "1", "PYTHONPATH": path}
    proc = subprocess.run([sys.executable, script], env=env, capture_output=True, text=True,
                          timeout=600, cwd=str(cwd))  # fmt: skip
    line = next((x for x in proc.stdout.splitlines() if x.startswith(mark)), None)
    assert proc.returncode == 0 and line is not None, proc.stdout[-3000:] + proc.stderr[-3000:]
    results: dict[str, Any] = json.loads(line[len(mark) :])
    return results
