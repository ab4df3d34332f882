"""One variant of a kernel made launchable: module, function, parameter buffer, grid.

A ``Launcher`` loads its cubin the first time a call needs it (once, under a lock),
checks the cubin's own parameter list against the manifest's ABI, and launches with one
struct.pack_into, the grid function and cuLaunchKernel. The kernels of a bundle
(loader/kernel.py) and the builder's tuner (through ``InMemory``) launch through it alike.
"""

from __future__ import annotations

import ctypes
import functools
import threading
from collections.abc import Callable, Mapping, Sequence
from typing import Any, Protocol

from . import cubin as _cubin
from . import driver as _driver
from .descriptors import Expander, slot_types
from .device import Device
from .dispatch import assumption_checks
from .errors import ArgumentError, BundleError, CudaError
from .expr import compile_function, parse
from .fastcall import ParamBuffer, slot_sizes
from .manifest import KernelSpec, VariantSpec
from .validity import value_names, variant_test

CUDA_ERROR_INVALID_CONTEXT = _driver.CUDA_ERROR_INVALID_CONTEXT
_MAX_GRID = (2**31 - 1, 65535, 65535)
_MAX_X, _MAX_YZ = _MAX_GRID[0], _MAX_GRID[1]
_MAX_PARAM_OFFSET = 32764  # a kernel's parameters fit in 32764 bytes (CUDA 12.1+, sm_70+)


class EntrySource(Protocol):
    """Where launchers get their device and cubins: a Bundle, or InMemory for the tuner."""

    device: Device

    def read_entry(self, name: str) -> bytes: ...


class InMemory:
    """Cubins held in memory, launched through the same path as a bundle's. The builder's
    tuner uses this to benchmark exactly what a bundle will ship before it exists."""

    def __init__(self, device: Device, entries: Mapping[str, bytes]):
        self.device = device
        self.entries = dict(entries)

    def read_entry(self, name: str) -> bytes:
        return self.entries[name]


class Launcher:
    """One variant made launchable: module, function, parameter buffer, grid function."""

    def __init__(
        self,
        source: EntrySource,
        spec: KernelSpec,
        variant: VariantSpec,
        param_index: dict[str, int],
    ):
        self.variant = variant
        self.source = source
        self.kernel = spec.name
        self.grid_text = ", ".join(spec.grid)
        device = {"NUM_SMS": source.device.sms, "SMEM": source.device.max_shared}
        # Whether this variant may serve a call at its values (None: at every call).
        self.fits = variant_test(spec, variant, assumption_checks(variant, param_index), device)
        self.block = variant.num_warps * 32
        self.shared = variant.shared
        names = value_names(spec)
        # A kernel compiled with its own NUM_SMS (a persistent loop's stride) must get the
        # grid it was compiled for, whatever this GPU has: its meta-parameter comes first.
        self._grid_parts = ([parse(g) for g in spec.grid], names,
                            {"NUM_SMS": source.device.sms, **variant.meta})  # fmt: skip
        self._expand, self.abi_types, self.positions, scratch = _layout(
            spec, variant, param_index, source.device
        )
        self.scratch_slots = scratch  # null pointers after the packed slots
        # The parameter buffer (``_buffer``, ``params``, ``holders``, ``extra``) is made by
        # ``load``, before a first launch: a kernel with many variants opens without making
        # theirs.
        self.function = 0
        self._function_arg: ctypes.c_void_p | None = None  # what cuLaunchKernel is passed
        self._launch = source.device.drv.launch_untyped
        self._lock = threading.Lock()

    @functools.cached_property
    def grid(self) -> Callable[..., tuple[int, ...]]:
        """The grid function, ``grid(*values) -> (x, y, z)``, with this variant's
        meta-parameters folded in: compiled at first use, not for every variant at open."""
        return compile_function(*self._grid_parts)

    def load(self) -> None:
        with self._lock:
            if self.function:
                return
            dev = self.source.device
            if self.shared > dev.max_shared:
                raise CudaError(
                    1,
                    "CUDA_ERROR_INVALID_VALUE",
                    "load",
                    f"variant {self.variant.id} needs {self.shared} bytes of shared memory; "
                    f"{dev.name} allows {dev.max_shared}",
                )
            image = self.source.read_entry(self.variant.entry)
            # The buffer laid out as the cubin lays out its parameters, so that the driver
            # copies it whole (``extra``) rather than a parameter at a time.
            offsets = self._check_abi(image)
            self._buffer = ParamBuffer(self.abi_types, self.positions, self.scratch_slots,
                                       offsets)  # fmt: skip
            self.holders = self._buffer.holders
            self.params = self._buffer.params
            self.extra = self._buffer.extra
            drv = dev.drv
            module = drv.load_module(image)
            fn = drv.get_function(module, self.variant.function)
            if self.shared > 49152:
                drv.set_max_dynamic_shared(fn, dev.max_shared)
            self._function_arg = ctypes.c_void_p(fn)
            self.function = fn

    def _check_abi(self, image: bytes) -> tuple[int, ...]:
        """The cubin's own parameter list must be the one this launcher packs: the driver
        copies each parameter by the cubin's size, so any difference reads past our buffer.
        Returns the cubin's offset of each parameter, where the buffer places it."""
        v = self.variant
        what = f"kernel {self.kernel!r}, variant {v.id} ({v.entry})"
        try:
            layout = _cubin.param_layout(image, v.function)
        except _cubin.CubinError as exc:
            raise BundleError(f"{what}: not a cubin the loader can check: {exc}") from None
        sizes = tuple(size for _, size in layout)
        ours = slot_sizes(self.abi_types, self.scratch_slots)
        if sizes != ours:
            raise BundleError(
                f"{what}: the cubin takes {len(sizes)} parameters of {list(sizes)} bytes; the "
                f"manifest's ABI gives {len(ours)} ({len(v.abi)} + {v.scratch_args} scratch) of "
                f"{list(ours)} bytes. The bundle was modified or built by an incompatible aotc"
            )
        end = 0
        for offset, size in layout:
            if offset < end or offset > _MAX_PARAM_OFFSET:
                raise BundleError(f"{what}: the cubin's parameters overlap or lie past "
                                  f"{_MAX_PARAM_OFFSET} bytes ({list(layout)})")  # fmt: skip
            end = offset + size
        return tuple(offset for offset, _ in layout)

    def launch(self, values: Sequence[Any], stream: int) -> None:
        """Launch on ``values`` (converted, in the kernel's parameter order) on ``stream``.

        Raises, before anything reaches the driver: for a value struct cannot pack, one of
        fastcall.PACK_ERRORS (only the fast path's unconverted values can cause that); for a
        grid beyond the CUDA limits, ArgumentError. An empty grid launches nothing.
        """
        if not self.function:
            self.load()
        handle = ctypes.c_void_p(stream) if stream else None
        # Held from pack to launch: threads share the buffer, and the driver copies it at
        # the call. Packing first checks the values even when the grid turns out empty.
        with self._lock:
            if self._expand is None:
                self._buffer.pack(values)
                gx, gy, gz = self._grid_of(values)
            else:  # descriptors to encode, scratch to find: the ABI's extra slots
                gx, gy, gz = self._grid_of(values)
                if gx <= 0 or gy <= 0 or gz <= 0:
                    return  # nothing runs: an empty tensor has no tensor map
                self._buffer.pack(self._expand(values, (gx, gy, gz), stream))
            if not (0 < gx <= _MAX_X and 0 < gy <= _MAX_YZ and 0 < gz <= _MAX_YZ):
                if gx <= 0 or gy <= 0 or gz <= 0:
                    return
                raise ArgumentError(f"grid ({gx}, {gy}, {gz}) exceeds the CUDA limits {_MAX_GRID}")
            code = self._launch(
                self._function_arg, gx, gy, gz, self.block, 1, 1, self.shared, handle,
                None, self.extra,
            )  # fmt: skip
            if code == CUDA_ERROR_INVALID_CONTEXT:
                # A thread that never touched CUDA has no current context: give it ours.
                self.source.device.make_current()
                code = self._launch(
                    self._function_arg, gx, gy, gz, self.block, 1, 1, self.shared, handle,
                    None, self.extra,
                )  # fmt: skip
        if code:
            self.source.device.drv.check(code, "cuLaunchKernel", f"variant {self.variant.id}")

    def slot_values(self, values: Sequence[Any], stream: int) -> Sequence[Any]:
        """``values`` with the ABI's extra slots appended (descriptors' tensor maps, the
        scratch pointer from ``stream``'s buffer), as ``launch`` packs them."""
        if self._expand is None:
            return values
        with self._lock:
            return self._expand(values, self._grid_of(values), stream)

    def reserve_scratch(self, values: Sequence[Any], stream: int) -> None:
        """Size ``stream``'s scratch buffer for a launch on ``values`` now, so that the
        launch allocates nothing (a CUDA graph's capture may not allocate)."""
        if self.variant.global_scratch:
            gx, gy, gz = self._grid_of(values)
            self.source.device.scratch.reserve(stream, gx * gy * gz * self.variant.global_scratch)

    def _grid_of(self, values: Sequence[Any]) -> tuple[int, int, int]:
        try:
            gx, gy, gz = self.grid(*values)
        except ArithmeticError as exc:  # a division by zero, for these values
            raise ArgumentError(
                f"{self.kernel}(): its grid ({self.grid_text}) cannot be computed for "
                f"these arguments: {exc}"
            ) from None
        return gx, gy, gz

    def host_parts(
        self, values: Sequence[Any], stream: int
    ) -> tuple[Callable[[], None], Callable[[], Any], Callable[[], int], Callable[[], int],
               Callable[[], int]]:  # fmt: skip
        """``launch(values, stream)`` and its pieces, each callable alone
        (loader/profile.py): the whole launch; packing and the grid; the driver call with
        its arguments prebuilt, untyped as ``launch`` makes it, through the binding with
        argtypes, and untyped with a pointer per parameter (kernelParams) where ``launch``
        may pass the buffer whole. The buffer is packed with ``values`` first, so that a
        driver call alone launches them."""
        self.load()
        packed = self.slot_values(values, stream)
        self._buffer.pack(packed)
        gx, gy, gz = self.grid(*values)
        handle = ctypes.c_void_p(stream) if stream else None
        untyped, typed = self._launch, self.source.device.drv.launch_raw
        fn, fn_arg, block, shared, params = (
            self.function, self._function_arg, self.block, self.shared, self.params
        )  # fmt: skip
        extra = self.extra

        def pack_grid() -> tuple[int, ...]:
            self._buffer.pack(packed)
            return self.grid(*values)

        return (
            lambda: self.launch(values, stream),
            pack_grid,
            lambda: untyped(fn_arg, gx, gy, gz, block, 1, 1, shared, handle, None, extra),
            lambda: typed(fn, gx, gy, gz, block, 1, 1, shared, stream, None, extra),
            lambda: untyped(fn_arg, gx, gy, gz, block, 1, 1, shared, handle, params, None),
        )


Extra = Callable[[Sequence[Any], tuple[int, int, int], int], list[Any]]


def _layout(
    spec: KernelSpec, variant: VariantSpec, param_index: dict[str, int], device: Device
) -> tuple[Extra | None, tuple[str, ...], tuple[int, ...], int]:
    """The launcher's ABI: (the function that appends the extra slots' values to a call's
    values, or None if there are none; each slot's type; each slot's position among the
    values, extras included; the null scratch pointers that follow)."""
    types = {p.name: p.type for p in spec.params}
    scratch = variant.scratch_args
    if not variant.descriptors and not variant.global_scratch:
        return (
            None,
            tuple(types[n] for n in variant.abi),
            tuple(param_index[n] for n in variant.abi),
            scratch,
        )
    nvalues = len(param_index)
    expander = Expander(spec.name, variant.descriptors, param_index, nvalues, device.drv)
    described = {d.param: d for d in variant.descriptors}
    abi: list[str] = []
    positions: list[int] = []
    for n in variant.abi:
        if n in described:
            slots = slot_types(described[n])
            abi += slots
            positions += range(expander.starts[n], expander.starts[n] + len(slots))
        else:
            abi.append(types[n])
            positions.append(param_index[n])
    per_program = variant.global_scratch
    if per_program:  # the first scratch pointer is packed: it points into the pool
        abi.append("*")
        positions.append(nvalues + expander.size)
        scratch -= 1
    pool = device.scratch

    def extra(values: Sequence[Any], grid: tuple[int, int, int], stream: int) -> list[Any]:
        out = expander(values) if described else list(values)
        if per_program:
            nbytes = grid[0] * grid[1] * grid[2] * per_program
            out.append(pool.get(stream, nbytes) if nbytes > 0 else 0)
        return out

    return extra, tuple(abi), tuple(positions), scratch
