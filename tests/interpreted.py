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
import traceback
from collections.abc import Callable, Mapping
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


def child(cases: Mapping[str, Callable[[dict[str, Any]], Any]],
          modules: Callable[[], dict[str, Any]], mark: str) -> None:  # fmt: skip
    """In the interpreted child: Triton's interpreter patched (see
    tests/test_gallery_interpreted.py), the kernels' modules loaded, every case run; prints
    ``mark`` and {case: its result, or the traceback's tail}."""
    sys.path.insert(0, str(ROOT))
    from tests.test_gallery_interpreted import _patch_interpreter

    _patch_interpreter()
    mods = modules()
    results: dict[str, Any] = {}
    for case_id, case in cases.items():
        try:
            results[case_id] = case(mods)
        except Exception:  # reported per case by the parent
            results[case_id] = traceback.format_exc(limit=-3)
    print(mark + json.dumps(results))
