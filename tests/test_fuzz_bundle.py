"""The bundle fuzz suite (tests/fuzz_bundle.py) in CI: about 3,000 hostile bundles through
every reader, none of which may crash, hang or go over the memory cap. It runs in a
process of its own, so that its address-space cap and time limits bind it alone; the
counts by category are printed (and are what RESULTS.md reports)."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from loader.errors import BundleError
from tests import fuzz_bundle

ROOT = Path(__file__).resolve().parents[1]


def test_bundle_fuzz_suite(capsys: pytest.CaptureFixture[str]) -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "tests.fuzz_bundle", "--json"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=900,  # a hang inside C code, where the per-case alarm cannot reach
    )
    assert proc.stdout, proc.stderr[-3000:]
    report = json.loads(proc.stdout.splitlines()[-1])
    with capsys.disabled():
        print(f"\nbundle fuzz suite ({report['cpu_seconds']:.0f} s CPU):\n{report['table']}")
    assert not report["failures"], "\n".join(report["failures"][:30])
    assert sum(report["cases"].values()) == sum(fuzz_bundle.DEFAULT_CASES.values())
    assert proc.returncode == 0, proc.stderr[-3000:]


# --- the harness can fail: each kind of failure is caught and reported -----------------------


def _one_case(monkeypatch: pytest.MonkeyPatch, reader: Any) -> fuzz_bundle.Report:
    monkeypatch.setattr(fuzz_bundle, "READERS", {"probe": (reader, (BundleError,))})
    monkeypatch.setattr(fuzz_bundle, "TRACED_READERS", ("probe",))
    return fuzz_bundle.run({"truncation": 1}, traced=("truncation",))


def test_harness_reports_an_undocumented_exception(monkeypatch: pytest.MonkeyPatch) -> None:
    report = _one_case(monkeypatch, lambda path: {}["missing"])
    assert len(report.crashes) == 1 and "KeyError" in report.crashes[0]


def test_harness_counts_a_documented_refusal(monkeypatch: pytest.MonkeyPatch) -> None:
    def refuse(path: Path) -> None:
        raise BundleError("no")

    report = _one_case(monkeypatch, refuse)
    assert not report.failures and report.refused["truncation"] == 1


def test_harness_reports_a_hang(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(fuzz_bundle, "CASE_SECONDS", 0.2)

    def hang(path: Path) -> None:
        while True:
            time.sleep(0.01)

    report = _one_case(monkeypatch, hang)
    assert len(report.hangs) == 1 and not report.crashes


def test_harness_reports_memory_over_the_cap(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(fuzz_bundle, "TRACED_CAP_BYTES", 2**20)
    report = _one_case(monkeypatch, lambda path: bytearray(4 * 2**20))
    assert len(report.over_memory) == 1 and "traced" in report.over_memory[0]
    report = _one_case(monkeypatch, lambda path: (_ for _ in ()).throw(MemoryError()))
    assert len(report.over_memory) == 1 and "address-space" in report.over_memory[0]
