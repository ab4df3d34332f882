"""The loader's promise: importing it pulls in none of aot, triton or torch."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def test_import_loader_pulls_in_no_builder_or_frameworks() -> None:
    code = (
        "import sys, loader, loader.bundle, loader.driver, loader.format, loader.manifest\n"
        "bad = sorted(m for m in sys.modules if m.split('.')[0] in ('aot', 'triton', 'torch'))\n"
        "print(','.join(bad))"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, check=True
    )
    assert out.stdout.strip() == ""


def test_loader_sources_never_import_builder_or_frameworks() -> None:
    banned = re.compile(r"^\s*(import|from)\s+(aot|triton|torch|pickle)\b", re.M)
    for path in (ROOT / "loader").glob("*.py"):
        match = banned.search(path.read_text())
        assert match is None, f"{path.name}: {match.group(0) if match else ''}"


def test_no_pickle_in_the_builder() -> None:
    for path in (ROOT / "aot").glob("*.py"):
        assert "import pickle" not in path.read_text(), path.name
