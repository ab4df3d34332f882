"""The ``aotc`` command line (click): ``commands.py`` holds one command per verb,
``options.py`` the options several commands share and the parameter types.

click comes with the ``build`` extra; a loader-only install has the ``aotc`` script but not
click, so ``main`` imports the commands only when called and says what to install.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence

HINT = "aotc: error: the aotc command needs the build extra: pip install 'aotc[build]'"


def main(argv: Sequence[str] | None = None) -> int:
    """Run ``aotc`` with ``argv`` (default: the process's arguments); the exit code."""
    try:
        from .commands import run
    except ModuleNotFoundError as exc:
        if exc.name != "click":
            raise
        print(HINT, file=sys.stderr)
        return 2
    return run(argv)
