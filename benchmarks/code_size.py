"""Module and function sizes of aot/ and loader/, and ruff's complexity findings, for a
checkout (issue 17's before/after figures).

    python benchmarks/code_size.py [ROOT]    # ROOT: a checkout (default: this one)

Counts every ``*.py`` module under ``aot/`` and ``loader/`` and every function in them
(nested ones too), with the limits tests/test_repo.py holds the code to: modules of at
most 400 lines, functions of at most 60; then runs ``ruff --isolated`` with McCabe
complexity ≤ 15 (C901) and ≤ 50 statements (PLR0915), whatever the checkout configures.
"""

from __future__ import annotations

import ast
import re
import subprocess
import sys
from pathlib import Path


def sizes(root: Path) -> str:
    mods: list[tuple[int, str]] = []
    fns: list[tuple[int, str]] = []
    for pkg in ("aot", "loader"):
        for p in sorted((root / pkg).rglob("*.py")):
            src = p.read_text()
            name = str(p.relative_to(root))
            mods.append((len(src.splitlines()), name))
            for node in ast.walk(ast.parse(src)):
                if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                    assert node.end_lineno is not None
                    fns.append((node.end_lineno - node.lineno + 1, f"{name}:{node.name}"))
    big_m = sorted((m for m in mods if m[0] > 400), reverse=True)
    big_f = sorted((f for f in fns if f[0] > 60), reverse=True)
    return (
        f"{len(mods)} modules, {len(big_m)} over 400 lines "
        f"(largest: {', '.join(f'{n} {p}' for n, p in big_m[:3]) or '-'})\n"
        f"{len(fns)} functions, {len(big_f)} over 60 lines "
        f"(largest: {', '.join(f'{n} {p}' for n, p in big_f[:3]) or '-'})"
    )


def complexity(root: Path) -> str:
    cmd = [sys.executable, "-m", "ruff", "check", "--isolated", "--select", "C901,PLR0915",
           "--config", "lint.mccabe.max-complexity = 15",
           "--config", "lint.pylint.max-statements = 50", "--output-format", "concise",
           "aot", "loader"]  # fmt: skip
    out = subprocess.run(cmd, cwd=root, capture_output=True, text=True).stdout
    found = [line for line in out.splitlines() if ": C901 " in line or ": PLR0915 " in line]
    worst = max((int(m[1]) for w in found if (m := re.search(r"too complex \((\d+) >", w))),
                default=0)  # fmt: skip
    return f"ruff C901/PLR0915 findings: {len(found)} (highest complexity {worst or '-'})"


if __name__ == "__main__":
    root = Path(sys.argv[1] if len(sys.argv) > 1 else Path(__file__).resolve().parents[1])
    print(sizes(root))
    print(complexity(root))
