"""The GPU this process launches on: found from the current CUDA context (or an ordinal),
with what dispatch and launches read of it (name, compute capability, SMs, shared memory).
"""

from __future__ import annotations

from . import driver as _driver
from .errors import CudaError
from .scratch import ScratchPool


class Device:
    """The GPU this process launches on, with the context made current for our calls."""

    def __init__(self, drv: _driver.Driver, ordinal: int | None):
        self.drv = drv
        ctx = drv.current_context()
        if ctx is not None and ordinal is None:
            self.handle = drv.context_device()
            ordinal = next(
                (i for i in range(drv.device_count()) if drv.device(i) == self.handle), 0
            )
        else:
            count = drv.device_count()
            ordinal = 0 if ordinal is None else ordinal
            if not 0 <= ordinal < count:
                raise CudaError(101, "CUDA_ERROR_INVALID_DEVICE", "cuDeviceGet", f"{count} GPUs")
            self.handle = drv.device(ordinal)
            ctx = drv.retain_primary_context(self.handle)
            drv.set_current(ctx)
        self.context: int = ctx
        # The device's index, as torch numbers it too (same process, same visible devices).
        self.ordinal: int = ordinal
        self.name = drv.device_name(self.handle)
        self.cc = (
            drv.attribute(_driver.CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, self.handle),
            drv.attribute(_driver.CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR, self.handle),
        )
        self.sms = drv.attribute(_driver.CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT, self.handle)
        self.max_shared = drv.attribute(
            _driver.CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN, self.handle
        )

        # Global scratch memory for the kernels that need it, per stream (loader/scratch.py).
        self.scratch = ScratchPool(drv)

    def make_current(self) -> None:
        self.drv.set_current(self.context)
