"""The cubin reader lives in the loader (loader/cubin.py), which checks each cubin's
parameters before launching it; the builder reads the same facts through it."""

from loader.cubin import EIATTR_KPARAM_INFO, EIATTR_REGCOUNT, CubinError, CubinInfo, inspect

__all__ = [
    "EIATTR_KPARAM_INFO",
    "EIATTR_REGCOUNT",
    "CubinError",
    "CubinInfo",
    "inspect",
    "local_bytes",
]


def local_bytes(data: bytes, function: str) -> int:
    """The kernel's stack frame, bytes per thread: spilled registers, in Triton's kernels."""
    frames = inspect(data).frames
    return frames.get(function, max(frames.values(), default=0))
