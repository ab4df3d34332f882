"""The benchmark worker's supervisor: a crash, a GPU fault or a hang costs one result and
a restart, never the build."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from aot.tune.gpu import GpuInfo, GpuWorker, WorkerDied
from tests import fakeserve

GPU = GpuInfo(0, "fake", (9, 0))


@pytest.fixture
def worker() -> GpuWorker:
    w = GpuWorker(GPU, timeout=3.0, serve=fakeserve.serve)
    yield w
    w.close()


def test_crash_fault_and_hang_become_results_and_the_worker_restarts(worker: GpuWorker) -> None:
    first = worker.request({"op": "ok"})["pid"]
    crashed = worker.request({"op": "crash"})
    assert not crashed["ok"] and "worker died (exit code 11)" in crashed["reason"]
    second = worker.request({"op": "ok"})["pid"]
    fault = worker.request({"op": "fault"})
    assert not fault["ok"] and "illegal memory access" in fault["reason"]
    third = worker.request({"op": "ok"})["pid"]
    hang = worker.request({"op": "hang"}, timeout=1.0)
    assert not hang["ok"] and hang["reason"].startswith("hang: no result after 1s")
    fourth = worker.request({"op": "ok"})["pid"]
    assert len({first, second, third, fourth}) == 4
    assert worker.restarts == 3


def test_a_worker_that_cannot_start_says_why() -> None:
    w = GpuWorker(GPU, serve=fakeserve.broken)
    with pytest.raises(WorkerDied, match="no CUDA GPU"):
        w.request({"op": "ok"})


def test_verification_poisons_each_output_by_its_dtype() -> None:
    """Before a verified launch every expected output is poisoned, so that an element the
    kernel never writes fails the comparison: NaN, or an integer type's most negative
    value (fill_(nan) is an error on an integer tensor); zero where the author resets it."""
    torch = pytest.importorskip("torch")
    from aot.tune.worker import _poison

    f, i, b = torch.ones(3), torch.ones(3, dtype=torch.int32), torch.zeros(2, dtype=torch.bool)
    for t in (f, i, b):
        _poison(torch, t, zero=False)
    assert bool(f.isnan().all()) and i.tolist() == [-(2**31)] * 3 and b.tolist() == [True] * 2
    _poison(torch, i, zero=True)
    assert i.tolist() == [0] * 3


def test_verification_compares_integer_outputs_exactly() -> None:
    """A norm-relative error would let an index off by a few pass among thousands; an
    integer output is right, or wrong by more than any tolerance."""
    torch = pytest.importorskip("torch")
    from aot.tune.worker import _error

    ref = torch.arange(1000)
    assert _error(torch, ref.to(torch.int32), ref) == (0.0, True)
    off = ref.clone().to(torch.int32)
    off[7] += 1
    err, finite = _error(torch, off, ref)
    assert finite and err > 1.0
    assert _error(torch, torch.full((3,), float("nan")), torch.ones(3))[1] is False


def test_a_sentinel_in_the_reference_is_matched_and_left_out_of_the_norm() -> None:
    """An empty split's maximum (-3e38) would swamp a norm: a real maximum off by 1 must
    still fail, and a sentinel not written must fail too."""
    torch = pytest.importorskip("torch")
    from aot.tune.worker import _error

    ref = torch.tensor([-3e38, 4.0, 5.0], dtype=torch.float64)
    good = ref.float()
    assert _error(torch, good, ref)[0] < 1e-6
    off = good.clone()
    off[1] += 1.0
    assert _error(torch, off, ref)[0] > 0.1
    unwritten = good.clone()
    unwritten[0] = 0.0
    assert _error(torch, unwritten, ref)[0] > 1.0


def test_inputs_and_reference_receive_the_candidates_config_where_they_take_one() -> None:
    """Host data (tokens padded to BLOCK_SIZE_M) and expected partials (a split-KV
    kernel's ranges of MIN_SPLIT tokens) may depend on a meta-parameter: the tuner passes
    the candidate's config to ``inputs`` and ``reference`` that take ``config``, and calls
    the others as before."""

    from aot.tune.worker import with_config

    def takes(*args: Any, config: Any = None) -> Any:
        return args, config

    def plain(*args: Any) -> Any:
        return args

    config = {"MIN_SPLIT": 128}
    assert with_config(takes, config)(1, 2) == ((1, 2), config)
    assert with_config(plain, config)(1, 2) == (1, 2)
    assert with_config(takes, None)(1) == ((1,), None)


def _worker(tmp_path: Path, tensor: str, l2: int) -> tuple[Any, str]:
    """A worker's input side (no GPU) and an ``inputs`` taking the config, whose first
    value is ``tensor`` (an expression of ``sizes``) and second the config's BLOCK."""
    from collections import OrderedDict

    import torch

    from aot.tune.worker import Worker

    (tmp_path / "inputs.py").write_text(
        f"import torch\ndef make(sizes, dtypes, config):\n    return [{tensor}, config['BLOCK']]\n"
    )
    w = Worker.__new__(Worker)
    w.torch, w.l2, w.inputs = torch, l2, OrderedDict()
    return w, f"{tmp_path / 'inputs.py'}:make"


def test_every_candidate_config_gets_the_same_random_inputs(tmp_path: Path) -> None:
    """An ``inputs`` that takes the config (an MoE aligning its random routing to the block
    size) must draw the same random data for every candidate: drawn afresh, a few tokens
    reach a different number of experts per candidate, and the timings compare different
    work. Input sets past the first (rotated for a cold L2) differ from each other."""
    torch = pytest.importorskip("torch")
    w, ref = _worker(tmp_path, "torch.randn(sizes['n'])", l2=1 << 20)
    a = w.input_sets(ref, {"n": 64}, {"T": "fp32"}, {"BLOCK": 16})
    b = w.input_sets(ref, {"n": 64}, {"T": "fp32"}, {"BLOCK": 32})
    assert [s[1] for s in a[:1] + b[:1]] == [16, 32]  # each laid out for its own config
    assert len(a) == len(b) > 1
    for x, y in zip(a, b, strict=True):
        assert torch.equal(x[0], y[0])
    assert not torch.equal(a[0][0], a[1][0])


def test_draws_time_a_config_on_several_independent_inputs(tmp_path: Path) -> None:
    """`tune.draws`: work that depends on the data (an MoE's routing) is timed over several
    draws in rotation, the same draws for every config, even where one set misses L2."""
    torch = pytest.importorskip("torch")
    w, ref = _worker(tmp_path, "torch.randint(0, 8, (sizes['n'],))", l2=64)  # no L2 copies
    assert len(w.input_sets(ref, {"n": 64}, {"T": "fp32"}, {"BLOCK": 16})) == 1
    a = w.input_sets(ref, {"n": 64}, {"T": "fp32"}, {"BLOCK": 16}, draws=4)
    b = w.input_sets(ref, {"n": 64}, {"T": "fp32"}, {"BLOCK": 32}, draws=4)
    assert len(a) == len(b) == 4
    assert all(torch.equal(x[0], y[0]) for x, y in zip(a, b, strict=True))
    assert len({tuple(s[0].tolist()) for s in a}) == 4


def test_a_time_over_draws_is_the_mean_of_each_draws_median() -> None:
    """Launches rotate over the draws; the median of the mixture would be one draw's time
    or another's depending on the count, the mean of the draws' medians is steady."""
    from aot.tune.worker import _typical

    samples = [1.0, 2.0, 9.0, 10.0] * 5 + [1.0, 2.0]  # 4 draws, the first two once more
    assert _typical(samples, 4, {"draws": 4}) == (1.0 + 2.0 + 9.0 + 10.0) / 4
    assert _typical(samples, 4, {}) == 2.0  # one draw: the median launch
