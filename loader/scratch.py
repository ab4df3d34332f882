"""Global scratch memory for kernels that need it (in-kernel TMA descriptors, made by
``tl.make_tensor_descriptor``, live there): one growing buffer per (device, stream).

Triton's launcher asks its allocator for ``grid size * per-program size`` bytes at every
launch. A bundle's launcher asks this pool instead: the buffer of the launch's stream is
reused while it is large enough, so steady-state calls allocate nothing. Work on one
stream runs in order, so every launch on it may use the same buffer. When a call needs
more, the stream is synchronized, the old buffer freed, and one of the next power of two
allocated. ``reserve`` sizes the buffer ahead, before a CUDA graph is captured (where
allocating is not allowed); the graph keeps the address, so that stream's buffers are
never freed after that.
"""

from __future__ import annotations

import threading

from . import driver as _driver

_MIN_BYTES = 1 << 16


class ScratchPool:
    def __init__(self, drv: _driver.Driver):
        self._drv = drv
        self._buffers: dict[int, tuple[int, int]] = {}  # stream -> (address, bytes)
        self._captured: set[int] = set()  # streams graphs were captured on
        self._kept: list[int] = []  # outgrown buffers a captured graph may point at
        self._lock = threading.Lock()

    def get(self, stream: int, nbytes: int) -> int:
        """An address of at least ``nbytes`` (256-byte aligned, as cuMemAlloc's are) that
        launches on ``stream`` may use."""
        have = self._buffers.get(stream)
        if have is not None and have[1] >= nbytes:
            return have[0]
        with self._lock:
            have = self._buffers.get(stream)
            if have is not None and have[1] >= nbytes:
                return have[0]
            size = max(_MIN_BYTES, 1 << (nbytes - 1).bit_length())
            if have is not None:
                del self._buffers[stream]
                if stream in self._captured:  # a captured graph may still point at it
                    self._kept.append(have[0])
                else:
                    self._drv.synchronize(stream or None)  # work still queued may use it
                    self._drv.mem_free(have[0])
            address = self._drv.mem_alloc(size)
            self._buffers[stream] = (address, size)
            return address

    def reserve(self, stream: int, nbytes: int) -> None:
        """Size ``stream``'s buffer before a CUDA graph is captured on it: the graph keeps
        the address, so from now on this stream's buffers are never freed."""
        self._captured.add(stream)
        self.get(stream, nbytes)
