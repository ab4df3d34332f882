"""A fake GPU for testing the tuner on the CPU: a timing table instead of measurements.

``FakeWorker`` answers the same requests as the real benchmark worker. Times come from a
smooth function of the config with its minimum at a known point; configs can be planted
to fault (the worker "dies"), to hang, or to compute wrong results (verification fails).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from aot.tune.gpu import GpuInfo

H100 = GpuInfo(0, "NVIDIA H100 80GB HBM3", (9, 0))


def bowl(values: dict[str, int], n: int) -> float:
    """A table with one best config: BLOCK=512, num_warps=4 (time in ms)."""
    import math

    b, w = values["BLOCK"], values["num_warps"]
    return (n / 1e6) * (1 + 0.3 * abs(math.log2(b / 512)) + 0.2 * abs(math.log2(w / 4)))


@dataclass
class FakeWorker:
    gpu: GpuInfo = H100
    table: Callable[[dict[str, int], int], float] = bowl
    fault: set[tuple[int, int]] = field(default_factory=set)  # (BLOCK, num_warps)
    hang: set[tuple[int, int]] = field(default_factory=set)
    wrong: set[tuple[int, int]] = field(default_factory=set)
    interrupt_after: int | None = None
    requests: list[dict[str, Any]] = field(default_factory=list)
    restarts: int = 0
    killed: bool = False

    def kill(self) -> None:
        self.killed = True

    def request(self, msg: dict[str, Any], timeout: float | None = None) -> dict[str, Any]:
        if self.interrupt_after is not None and len(self.requests) >= self.interrupt_after:
            raise KeyboardInterrupt  # the build is killed here
        self.requests.append(msg)
        if msg["op"] == "baseline":
            return {"ok": True, "ms": 1.0, "samples": [1.0]}
        (inst,) = msg["spec"]["instances"]
        # The variant a real worker runs: the most specialized one valid for the call
        # (the choice lists them most specialized first; these tests' calls fit them all).
        first = inst["choices"][0]["variants"][0]
        v = next(x for x in inst["variants"] if x["id"] == first)
        values = {**v["meta"], "num_warps": v["num_warps"], "num_stages": v["num_stages"]}
        key = (values["BLOCK"], values["num_warps"])
        if key in self.fault:
            self.restarts += 1
            return {
                "ok": False,
                "fatal": True,
                "reason": "RuntimeError: CUDA error: an illegal memory access",
            }
        if key in self.hang:
            self.restarts += 1
            return {"ok": False, "fatal": True, "reason": "hang: no result after 5s (killed)"}
        if msg["op"] == "verify":
            bad = key in self.wrong
            return {
                "ok": not bad,
                "error": 0.5 if bad else 1e-7,
                "tolerance": msg["tolerance"],
                "reason": "wrong result: out_ptr relative error 5.00e-01 > 1e-03" if bad else "",
            }
        ms = self.table(values, msg["sizes"]["n"])
        return {"ok": True, "ms": ms, "samples": [ms] * 5, "variant": v["id"]}

    def close(self) -> None:
        pass
