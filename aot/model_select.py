"""Per bucket, the faster of the compiled artifact and the module's own eager forward.

Why. Compiled is not always faster. On the H200, the transformer layer of
``recipes/layer.toml``, compiled by AOTInductor at max-autotune, ran 0.82-0.90x eager
PyTorch from 8192 rows (batch x seq) up, and so did ``torch.compile`` max-autotune. The
matmuls are the cause: eager's ``F.linear`` runs cuBLASLt kernels with the bias fused
(288 µs for the layer's four matmuls at 8192 rows), while Inductor's C++ wrapper offers
only Triton templates and an ``addmm`` that adds the bias separately (its faster
``bias_addmm`` choice has no C++ implementation), and its best took 337 µs. At small
sizes the compiled artifact wins by 1.3-3.5x (fused kernels, no launch gaps).

So with ``[model].select = "fastest"`` (the default) the build times both, the way the
loader serves them: on CUDA each captured once as a CUDA graph over static inputs and
replayed (``loader.model.capture_graph``); on the CPU called directly. Calls alternate
between the two in rounds, so a clock or thermal drift falls on both alike. The median
wins; the bundle records both times, and the loser ships nothing (an eager bucket has no
artifact: the loader replays the service's own module). Nothing about the choice is
cached: every build measures it again on its own GPU. A forward that cannot be captured
as a CUDA graph (one that synchronizes with the host, say) cannot be served eager: the
bucket stays compiled, and the report says why.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from loader.model import capture_graph

ROUNDS = 5  # alternations between the two implementations
PER_ROUND = 10  # timed calls of each in a round
WARMUP = 5  # untimed calls of each before the first round


@dataclass(frozen=True)
class Choice:
    impl: str  # loader.manifest.MODEL_IMPLS: "compiled" or "eager"
    compiled_us: float  # median of one call, as served
    eager_us: float  # NaN when eager could not be served (eager_error)
    eager_error: str = ""


def choose(compiled_us: float, eager_us: float) -> str:
    """The implementation to ship: eager only when it measured strictly faster."""
    return "eager" if eager_us < compiled_us else "compiled"


def measure(
    torch: Any, compiled: Callable[..., list[Any]], eager: Callable[..., list[Any]],
    inputs: Sequence[Any], device: Any,
) -> Choice:  # fmt: skip
    """Time ``compiled`` and ``eager`` (each ``run(*inputs) -> outputs``) as served. An
    error serving ``compiled`` propagates (the loader could not serve it either); one
    serving ``eager`` makes the choice ``compiled``."""
    calls = [_served(torch, compiled, inputs, device)]
    try:
        calls.append(_served(torch, eager, inputs, device))
    except Exception as exc:  # e.g. torch's "operation not permitted when stream is capturing"
        only = statistics.median(calls[0](WARMUP + ROUNDS * PER_ROUND)[WARMUP:])
        return Choice("compiled", only, float("nan"), f"{type(exc).__name__}: {exc}")
    for call in calls:
        call(WARMUP)
    times: list[list[float]] = [[], []]
    for _ in range(ROUNDS):
        for i, call in enumerate(calls):
            times[i] += call(PER_ROUND)
    c, e = (statistics.median(t) for t in times)
    return Choice(choose(c, e), c, e)


def _served(
    torch: Any, run: Callable[..., list[Any]], inputs: Sequence[Any], device: Any
) -> Callable[[int], list[float]]:
    """A function timing n calls of ``run`` as the loader makes them: µs of each. (The
    loader's copies into the graph's input buffers and out of its outputs are the same
    for both implementations, so they are left out.)"""
    if device.type != "cuda":
        run(*inputs)  # fails here, as a capture would on CUDA, if it cannot be served

        def direct(n: int) -> list[float]:
            out = []
            for _ in range(n):
                t = time.perf_counter()
                run(*inputs)
                out.append((time.perf_counter() - t) * 1e6)
            return out

        return direct
    static = [x.clone() for x in inputs]
    graph, _ = capture_graph(torch, run, static, device)

    def replay(n: int) -> list[float]:
        out = []
        for _ in range(n):  # each from an idle GPU, as the loader's latency is measured
            start = torch.cuda.Event(enable_timing=True)
            end = torch.cuda.Event(enable_timing=True)
            start.record()
            graph.replay()
            end.record()
            end.synchronize()
            out.append(start.elapsed_time(end) * 1000)
        return out

    return replay
