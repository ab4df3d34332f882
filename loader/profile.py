"""Where a kernel call's host time goes: the pieces of one call, each callable on its own.

``Kernel.host_path(*args, **call)`` makes the call once (which teaches the fast path its
signature, as a service's first call does), then returns a ``HostPath`` whose callables
each repeat one piece of that same call, so that a benchmark can time them in a loop:
benchmarks/launch_overhead.py on a GPU, benchmarks/host_path_cpu.py on the CPU (their
figures are in benchmarks/RESULTS.md). The pieces that launch (``call``, ``checked``,
``launch``, the driver calls) launch the kernel again on the same arguments, so use
arguments it may run on repeatedly. For measuring only: a service calls the kernel.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from .manifest import VariantSpec


@dataclass(frozen=True)
class HostPath:
    """One call's host path, piece by piece (see the module docstring)."""

    call: Callable[[], None]  # the whole call as a service makes it: kernel(*args, **call)
    checked: Callable[[], None]  # the checked path: every argument converted, the binding
    # and variant chosen, the fast path taught, the launch
    lookup: Callable[[], Any]  # the fast path's lookup: signature, pointers, bucket, variant
    stream: Callable[[], int]  # the current-stream query (PyTorch's current stream, or 0)
    launch: Callable[[], None]  # Launcher.launch: pack, grid, cuLaunchKernel
    pack_grid: Callable[[], Any]  # the parameter buffer packed and the grid computed
    driver_call: Callable[[], int]  # cuLaunchKernel alone, untyped, its arguments prebuilt
    driver_call_typed: Callable[[], int]  # the same through the binding with argtypes
    driver_call_params: Callable[[], int]  # untyped, a pointer per parameter (kernelParams),
    # where driver_call hands the driver the parameter buffer whole
    variant: VariantSpec  # the variant the call launches
