"""A tie under sustained load is broken by the screening benchmark (timed from an idle
GPU): the gallery's softmax at 256 × 32000 had BLOCK_N 4096 and 8192 at 17.23 and 17.25 µs
under load, rounds overlapping, and 17.95 against 16.67 µs screened; the bench, timed
after a pause, found 8192 3.5% faster (benchmarks/RESULTS.md, issue 18)."""

from __future__ import annotations

from aot.tune.db import Record
from aot.tune.decide import _winner


def _bench(config: str, ms: float) -> Record:
    return Record("k", "s", "3.6.0", "NVIDIA H200", "sm_90", {}, {"n": 1}, config, "bench",
                  True, ms=ms)  # fmt: skip


def test_overlapping_rounds_are_a_tie_the_screening_breaks() -> None:
    rounds = {"a": [17.18, 17.22, 17.28], "b": [17.20, 17.25, 17.30]}
    finalists = [(17.22, "a"), (17.25, "b")]
    bench = {"a": _bench("a", 17.95), "b": _bench("b", 16.67)}
    assert _winner(finalists, rounds, bench) == (17.25, "b")


def test_rounds_apart_are_no_tie() -> None:
    rounds = {"a": [17.0, 17.1, 17.2], "b": [17.3, 17.4, 17.5]}
    bench = {"a": _bench("a", 18.0), "b": _bench("b", 16.0)}
    assert _winner([(17.1, "a"), (17.4, "b")], rounds, bench) == (17.1, "a")


def test_a_tie_without_a_screening_time_keeps_the_median() -> None:
    rounds = {"a": [17.18, 17.22, 17.28], "b": [17.20, 17.25, 17.30]}
    assert _winner([(17.22, "a"), (17.25, "b")], rounds, {}) == (17.22, "a")
