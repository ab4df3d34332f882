"""The one table of GPU properties that planning, pruning and the heuristic read.

Figures are NVIDIA's published per-architecture limits (CUDA C Programming Guide,
"Technical Specifications per Compute Capability") and product datasheets; peak rates
are dense fp16/bf16 tensor-core TFLOP/s and memory bandwidth in GB/s. Where a card's
ceilings were measured (``measured_tflops``, ``measured_gbps``: the H200's, see
benchmarks/RESULTS.md), the tuning report compares against those instead. An arch-only
target (``sm_90``) uses its reference product's figures and matches any GPU of that arch.
"""

from __future__ import annotations

import difflib
from dataclasses import dataclass

from loader.manifest import Target


@dataclass(frozen=True)
class GPU:
    name: str
    arch: str
    sms: int
    smem_per_block: int  # bytes, the opt-in maximum of dynamic shared memory per block
    smem_per_sm: int
    regs_per_sm: int
    max_threads_per_sm: int
    max_blocks_per_sm: int
    tflops_16: float
    gbps: float
    device_names: tuple[str, ...] = ()  # substrings of cuDeviceGetName; empty for arch-only
    max_threads_per_block: int = 1024
    max_regs_per_thread: int = 255
    # Ceilings measured on a real card (dense bf16 matmul on random data; device-to-device
    # copy counting bytes read and written); None where we have not measured one.
    measured_tflops: float | None = None
    measured_gbps: float | None = None

    @property
    def ceiling_tflops(self) -> float:
        return self.measured_tflops or self.tflops_16

    @property
    def ceiling_gbps(self) -> float:
        return self.measured_gbps or self.gbps

    @property
    def cc(self) -> tuple[int, int]:
        digits = self.arch.removeprefix("sm_")
        return int(digits[:-1]), int(digits[-1])

    @property
    def family(self) -> int:
        return self.cc[0]

    def to_target(self) -> Target:
        return Target(self.name, self.arch, self.cc, self.sms, self.device_names)

    def properties(self) -> dict[str, int]:
        """Names a recipe's constraints may read."""
        return {
            "SMEM": self.smem_per_block,
            "NUM_SMS": self.sms,
            "REGS_PER_SM": self.regs_per_sm,
            "MAX_THREADS": self.max_threads_per_block,
        }


_AMPERE = dict(
    smem_per_block=166912,
    smem_per_sm=167936,
    regs_per_sm=65536,
    max_threads_per_sm=2048,
    max_blocks_per_sm=32,
)
_AMPERE_SMALL = dict(
    smem_per_block=101376,
    smem_per_sm=102400,
    regs_per_sm=65536,
    max_threads_per_sm=1536,
    max_blocks_per_sm=16,
)
_ADA = dict(
    smem_per_block=101376,
    smem_per_sm=102400,
    regs_per_sm=65536,
    max_threads_per_sm=1536,
    max_blocks_per_sm=24,
)
_HOPPER = dict(
    smem_per_block=232448,
    smem_per_sm=233472,
    regs_per_sm=65536,
    max_threads_per_sm=2048,
    max_blocks_per_sm=32,
)

GPUS: tuple[GPU, ...] = (
    GPU("A100", "sm_80", 108, tflops_16=312, gbps=2039, device_names=("A100",), **_AMPERE),
    GPU("A30", "sm_80", 56, tflops_16=165, gbps=933, device_names=("A30",), **_AMPERE),
    GPU("A10", "sm_86", 72, tflops_16=125, gbps=600, device_names=("A10",), **_AMPERE_SMALL),
    GPU("A10G", "sm_86", 80, tflops_16=70, gbps=600, device_names=("A10G",), **_AMPERE_SMALL),
    GPU("L4", "sm_89", 58, tflops_16=121, gbps=300, device_names=("L4",), **_ADA),
    GPU("L40S", "sm_89", 142, tflops_16=362, gbps=864, device_names=("L40S",), **_ADA),
    GPU("RTX4090", "sm_89", 128, tflops_16=165, gbps=1008, device_names=("4090",), **_ADA),
    GPU("H100", "sm_90", 132, tflops_16=989, gbps=3350, device_names=("H100",), **_HOPPER),
    GPU(
        "H100-PCIE", "sm_90", 114, tflops_16=756, gbps=2000, device_names=("H100 PCIe",), **_HOPPER
    ),
    GPU("H20", "sm_90", 78, tflops_16=148, gbps=4000, device_names=("H20",), **_HOPPER),
    GPU(
        "H200",
        "sm_90",
        132,
        tflops_16=989,
        gbps=4800,
        device_names=("H200",),
        measured_tflops=790,
        measured_gbps=4300,
        **_HOPPER,
    ),
    GPU("GH200", "sm_90", 132, tflops_16=989, gbps=4000, device_names=("GH200",), **_HOPPER),
)
# Arch-only targets take a reference product's figures and match any GPU of the arch.
_ARCH_REFERENCE = {"sm_80": "A100", "sm_86": "A10", "sm_89": "L40S", "sm_90": "H100"}
ARCHS: tuple[GPU, ...] = tuple(
    GPU(
        **{**{f: getattr(g, f) for f in GPU.__dataclass_fields__}, "name": arch, "device_names": ()}
    )
    for arch, ref in _ARCH_REFERENCE.items()
    for g in GPUS
    if g.name == ref
)
_BY_NAME = {g.name.lower(): g for g in (*GPUS, *ARCHS)}


def label(name: str, arch: str, sms: int) -> str:
    """How reports name a target: ``H100 (sm_90, 132 SMs)`` or ``sm_90 (132 SMs)``."""
    return f"{name} ({sms} SMs)" if name == arch else f"{name} ({arch}, {sms} SMs)"


class UnknownTarget(ValueError):
    pass


def resolve(name: str) -> GPU:
    """A target by product name (``H100``, case-insensitive) or by arch (``sm_90``)."""
    key = name.strip().lower()
    gpu = _BY_NAME.get(key) or _BY_NAME.get(key.replace("_", "-"))
    if gpu is None:
        known = sorted(g.name for g in (*GPUS, *ARCHS))
        close = difflib.get_close_matches(name, known, n=1, cutoff=0.5)
        hint = f"did you mean {close[0]!r}? " if close else ""
        raise UnknownTarget(f"unknown GPU {name!r}; {hint}known: {', '.join(known)}")
    return gpu
