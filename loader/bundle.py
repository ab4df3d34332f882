"""Open a bundle for the running GPU and launch its kernels.

Only the manifest is read at open. A variant's cubin is decompressed, checked and loaded
into the CUDA context the first time a call needs it, once, under a lock. Everything a
launch needs (parameter buffer, grid function, assumption tests) is prepared when the
kernel is first looked up.

A call takes one of two paths. The fast path (loader/fastcall.py) answers a call whose
argument signature (tensor dtypes, scalar types) an earlier call had been accepted with,
through one function generated for the kernel's parameter list. Every other call takes
the checked path: ``convert`` (every argument, with clear errors), ``_instance`` (dtype
binding), ``select`` (bucket and variant); it then teaches the fast path the signature.
Both end in ``Launcher.launch``: one struct.pack_into, the grid, cuLaunchKernel.
"""

from __future__ import annotations

import ctypes
import os
import threading
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from typing import Any, Protocol

from . import args as _args
from . import cubin as _cubin
from . import driver as _driver
from . import signature as _signature
from .buckets import BucketGrid, kernel_grid, warm
from .dispatch import assumption_checks, choose_target, order_variants
from .errors import ArgumentError, BundleError, CudaError, NoTargetError
from .expr import compile_function, parse
from .fastcall import PACK_ERRORS, FastPath, ParamBuffer, choice_table
from .format import BundleFile
from .manifest import (
    GIVEN,
    NONE,
    CallValue,
    KernelSpec,
    Manifest,
    ManifestError,
    Param,
    Target,
    VariantSpec,
)
from .pipeline import Pipeline
from .validity import CallValues, explain, value_names, variant_test

CUDA_ERROR_INVALID_CONTEXT = _driver.CUDA_ERROR_INVALID_CONTEXT
_MAX_GRID = (2**31 - 1, 65535, 65535)
_MAX_X, _MAX_YZ = _MAX_GRID[0], _MAX_GRID[1]
# What a fast-path launch raises only before anything reached the driver: the checked path
# then runs the call again and says what is wrong (or launches, e.g. an fp32 value too
# large for struct, which it rounds to inf as the kernel would see it).
_RETRY_CHECKED = (*PACK_ERRORS, ArgumentError)


def open(
    path: str | os.PathLike[str],
    *,
    device: int | None = None,
    digest: str | None = None,
    cache_dir: str | os.PathLike[str] | None = None,
    trusted_keys: Sequence[_signature.KeySource] | None = None,
) -> Bundle:
    """Open ``path`` for the GPU of the current CUDA context (or ``device``).

    ``path`` may be ``oci://HOST/REPO:TAG``: the bundle is pulled once into a local cache
    (``cache_dir``, default ``$AOTC_BUNDLE_CACHE`` or ``~/.cache/aotc/bundles``) and opened
    from there; see ``loader/oci.py``. ``digest="sha256:..."`` pins the exact bundle file.

    ``trusted_keys``: Ed25519 public keys (PEM bytes, or paths of PEM files), default
    ``$AOTC_TRUSTED_KEYS`` (``:``-separated paths). With any configured, the bundle must be
    signed by one of them (``aotc sign``), or ``SignatureError`` is raised; a pulled bundle
    is checked each time it is opened from the cache. See loader/signature.py.
    """
    # Keys are read before anything is pulled: a bad key file fails fast, offline.
    keys = _signature.configured(trusted_keys, os.environ)
    local = locate_bundle(path, digest=digest, cache_dir=cache_dir)
    return Bundle(local, device=device, trusted_keys=keys or None)


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

    def make_current(self) -> None:
        self.drv.set_current(self.context)


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


class Bundle:
    def __init__(
        self,
        path: str | os.PathLike[str],
        *,
        device: int | None = None,
        trusted_keys: Sequence[_signature.KeySource] | None = None,
    ):
        self.file = BundleFile(path)  # header, manifest, typed and checked: see format.py
        self.manifest: Manifest = self.file.spec
        try:
            # Before the driver: a bundle refused here has touched no GPU. ``signed_by`` is
            # the trusted key that signed it, None when no keys are configured.
            signer = _signature.check(self.file, trusted_keys)
            self.signed_by: str | None = signer.key_id if signer is not None else None
            self.manifest.require_complete()
            self.device = Device(_driver.get(), device)
        except ManifestError as exc:
            self.file.close()
            raise BundleError(f"{path}: {exc}") from None
        except BaseException:
            self.file.close()
            raise
        target = choose_target(self.manifest.targets, self.device.cc, self.device.name)
        if target is None:
            self.file.close()
            have = ", ".join(f"{t.name} ({t.arch})" for t in self.manifest.targets) or "nothing"
            raise NoTargetError(
                f"{path}: no code for this GPU ({self.device.name}, "
                f"sm_{self.device.cc[0]}{self.device.cc[1]}); the bundle holds: {have}. "
                f"Add sm_{self.device.cc[0]}{self.device.cc[1]} to the recipe's targets "
                "and rebuild."
            )
        self.target: Target = target
        self._kernels: dict[str, Kernel] = {}
        self._pipelines: list[Pipeline] = []
        self._lock = threading.Lock()

    @property
    def kernel_names(self) -> list[str]:
        return [k.name for k in self.manifest.kernels]

    def kernel(self, name: str) -> Kernel:
        k = self._kernels.get(name)
        if k is None:
            with self._lock:
                k = self._kernels.get(name)
                if k is None:
                    try:
                        spec = self.manifest.kernel(name)
                    except KeyError:
                        raise KeyError(
                            f"no kernel {name!r} in {self.file.path}; it has: "
                            f"{', '.join(self.kernel_names)}"
                        ) from None
                    k = self._kernels[name] = Kernel(self, spec, self.target.name)
        return k

    __getitem__ = kernel

    def __iter__(self) -> Iterator[str]:
        return iter(self.kernel_names)

    def warmup(self) -> int:
        """Load every module this GPU can use now, instead of at first call: every
        kernel's ``warmup()``. Returns how many modules are loaded."""
        return sum(self.kernel(n).warmup() for n in self.kernel_names)

    @property
    def pipeline_names(self) -> list[str]:
        return [p.name for p in self.manifest.pipelines]

    def pipeline(self, name: str, **weights: Any) -> Pipeline:
        """The pipeline ``name`` with its weights bound (by keyword, tensors): a callable
        that replays one CUDA graph per bucket, captured at first use or ``warmup``."""
        try:
            spec = self.manifest.pipeline(name)
        except KeyError:
            have = ", ".join(self.pipeline_names) or "none"
            raise KeyError(f"no pipeline {name!r} in {self.file.path}; it has: {have}") from None
        p = Pipeline(self, spec, weights)
        with self._lock:
            self._pipelines.append(p)
        return p

    def read_entry(self, name: str) -> bytes:
        return self.file.read_entry(name)

    def close(self) -> None:
        with self._lock:
            pipelines, self._pipelines = self._pipelines, []
        for p in pipelines:
            p.close()
        self.file.close()

    def __enter__(self) -> Bundle:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


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
        consts = {**variant.meta, "NUM_SMS": source.device.sms}
        self.grid: Callable[..., tuple[int, ...]] = compile_function(
            [parse(g) for g in spec.grid], names, consts
        )
        types = {p.name: p.type for p in spec.params}
        self.positions = tuple(param_index[n] for n in variant.abi)
        self.abi_types = tuple(types[n] for n in variant.abi)
        self._buffer = ParamBuffer(self.abi_types, self.positions, variant.scratch_args)
        self.holders = self._buffer.holders
        self.params = self._buffer.params
        self.function = 0
        self._function_arg: ctypes.c_void_p | None = None  # what cuLaunchKernel is passed
        self._launch = source.device.drv.launch_untyped
        self._lock = threading.Lock()

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
            self._check_abi(image)
            drv = dev.drv
            module = drv.load_module(image)
            fn = drv.get_function(module, self.variant.function)
            if self.shared > 49152:
                drv.set_max_dynamic_shared(fn, dev.max_shared)
            self._function_arg = ctypes.c_void_p(fn)
            self.function = fn

    def _check_abi(self, image: bytes) -> None:
        """The cubin's own parameter list must be the one this launcher packs: the driver
        copies each parameter by the cubin's size, so any difference reads past our buffer."""
        v = self.variant
        what = f"kernel {self.kernel!r}, variant {v.id} ({v.entry})"
        try:
            sizes = _cubin.param_sizes(image, v.function)
        except _cubin.CubinError as exc:
            raise BundleError(f"{what}: not a cubin the loader can check: {exc}") from None
        ours = tuple(ctypes.sizeof(h) for h in self.holders)
        if sizes != ours:
            raise BundleError(
                f"{what}: the cubin takes {len(sizes)} parameters of {list(sizes)} bytes; the "
                f"manifest's ABI gives {len(ours)} ({len(v.abi)} + {v.scratch_args} scratch) of "
                f"{list(ours)} bytes. The bundle was modified or built by an incompatible aotc"
            )

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
            self._buffer.pack(values)
            try:
                gx, gy, gz = self.grid(*values)
            except ArithmeticError as exc:  # a division by zero, for these values
                raise ArgumentError(
                    f"{self.kernel}(): its grid ({self.grid_text}) cannot be computed for "
                    f"these arguments: {exc}"
                ) from None
            if not (0 < gx <= _MAX_X and 0 < gy <= _MAX_YZ and 0 < gz <= _MAX_YZ):
                if gx <= 0 or gy <= 0 or gz <= 0:
                    return
                raise ArgumentError(f"grid ({gx}, {gy}, {gz}) exceeds the CUDA limits {_MAX_GRID}")
            code = self._launch(
                self._function_arg, gx, gy, gz, self.block, 1, 1, self.shared, handle,
                self.params, None,
            )  # fmt: skip
            if code == CUDA_ERROR_INVALID_CONTEXT:
                # A thread that never touched CUDA has no current context: give it ours.
                self.source.device.make_current()
                code = self._launch(
                    self._function_arg, gx, gy, gz, self.block, 1, 1, self.shared, handle,
                    self.params, None,
                )  # fmt: skip
        if code:
            self.source.device.drv.check(code, "cuLaunchKernel", f"variant {self.variant.id}")


class _Instance:
    """A kernel's launchers for one binding (dtypes, optional pointers) on one target."""

    def __init__(
        self, source: EntrySource, spec: KernelSpec, inst: Any, param_index: dict[str, int]
    ):
        self.dtypes: Mapping[str, str] = inst.dtypes
        self.variants: list[VariantSpec] = list(inst.variants.values())
        launchers = {
            vid: Launcher(source, spec, v, param_index) for vid, v in inst.variants.items()
        }
        self.launchers = launchers
        self.choices = [
            [launchers[v.id] for v in order_variants([inst.variants[i] for i in c.variants])]
            for c in inst.choices
        ]
        self.hows = [c.how for c in inst.choices]
        self.fast_choices = choice_table(self.choices)
        # Where a call's own bucket has no variant valid for it: every variant, in bucket
        # order, most specialized first within each (a valid one runs it, perhaps slower).
        seen: dict[str, Launcher] = {}
        for bucket in self.choices:
            for launcher in bucket:
                seen.setdefault(launcher.variant.id, launcher)
        self.fallback = list(seen.values())


class Kernel:
    """A callable kernel: ``kernel(*args, stream=None, **call_values)`` picks the bucket
    and a variant valid for the call, and launches it."""

    def __init__(self, source: EntrySource, spec: KernelSpec, target: str):
        self.source = source
        self.target = target
        self.spec = spec
        self.name = spec.name
        self.params: tuple[Param, ...] = spec.params
        self._call = CallValues(spec)
        index = {n: i for i, n in enumerate(self._call.all_names)}
        self._key_positions = tuple(index[k] for k in spec.bucket_keys)
        self.grid: BucketGrid = kernel_grid(spec.bucket_keys, spec.buckets, f"kernel {self.name!r}")
        self._instances: dict[tuple[str, ...], _Instance] = {}
        self._vars = tuple(sorted(spec.dtype_vars))
        self._optional = spec.nullable
        self._binding = self._vars + self._optional
        for inst in spec.instances:
            if inst.target == target:
                key = tuple(inst.dtypes[v] for v in self._binding)
                self._instances[key] = _Instance(source, spec, inst, index)
        if not self._instances:
            raise NoTargetError(
                f"kernel {self.name!r} has no variants for target {target} "
                "(every candidate failed to compile?); see `aotc inspect`"
            )
        # For each dtype variable, the pointer params whose element type it names.
        self._var_params = {
            v: [i for i, p in enumerate(spec.params) if p.type == f"*{v}"] for v in self._vars
        }
        self._stream = _args.CurrentStream(source.device.ordinal)
        grid_names = set().union(*(parse(g).names for g in spec.grid))
        keyword = [*spec.call, *(CallValue(h) for h in spec.host)]
        self._fast = FastPath(spec.params, self._key_positions, self.grid, grid_names,
                              optional=spec.nullable, call=keyword)  # fmt: skip

    def __repr__(self) -> str:
        sig = ", ".join(f"{p.name}: {p.type}" for p in self.params)
        return f"<aotc kernel {self.name}({sig}) on {self.target}>"

    def convert(
        self, args: Sequence[Any], call: Mapping[str, Any] | None = None
    ) -> tuple[list[Any], dict[int, str]]:
        """The call's values (the arguments converted, then its call values), and the
        element type of each typed pointer (``NONE`` for an optional one passed None)."""
        if len(args) != len(self.params):
            raise ArgumentError(
                f"{self.name}() takes {len(self.params)} arguments "
                f"({', '.join(p.name for p in self.params)}), got {len(args)}"
            )
        values: list[Any] = []
        dtypes: dict[int, str] = {}
        for i, (p, a) in enumerate(zip(self.params, args, strict=True)):
            if p.type[0] != "*":
                values.append(_args.scalar(a, p.type, p.name))
            elif a is None and p.name in self._optional:
                values.append(0)  # compiled in as None: never passed
                dtypes[i] = NONE
            else:
                addr, dt = _args.pointer(a, p.name)
                values.append(addr)
                if dt is not None:
                    dtypes[i] = dt
        self._call.extend(values, args, call or {})
        return values, dtypes

    def _instance(self, dtypes: dict[int, str], given: Mapping[str, str] | None) -> _Instance:
        binding = dict(given or {})
        for var in self._vars:
            if var not in binding:
                seen = [dtypes[i] for i in self._var_params[var] if i in dtypes]
                seen = [t for t in seen if t != NONE]
                if seen:
                    binding[var] = seen[0]
        for name in self._optional:
            i = next(j for j, p in enumerate(self.params) if p.name == name)
            binding[name] = NONE if dtypes.get(i) == NONE else GIVEN
        if len(self._instances) == 1 and len(binding) < len(self._binding):
            inst = next(iter(self._instances.values()))
        else:
            missing = [v for v in self._vars if v not in binding]
            if missing:
                raise ArgumentError(
                    f"{self.name}(): cannot tell the element type {', '.join(missing)} from raw "
                    f"pointers; pass tensors or dtypes={{'{missing[0]}': ...}}"
                )
            found = self._instances.get(tuple(binding[v] for v in self._binding))
            if found is None:
                have = ", ".join(
                    str(dict(zip(self._binding, k, strict=True))) for k in self._instances
                )
                raise ArgumentError(
                    f"{self.name}(): no variant for element types {binding}; the bundle has {have}"
                )
            inst = found
        # Every typed pointer must carry the element type the variant was compiled for.
        for i, dt in dtypes.items():
            p = self.params[i]
            want = inst.dtypes.get(p.type[1:], p.type[1:])
            if dt != want and dt != NONE:
                raise ArgumentError(
                    f"{self.name}(): argument {p.name!r} has element type {dt}, expected {want}"
                )
        return inst

    def _bucket(self, values: Sequence[Any]) -> int:
        return self.grid.index([values[i] for i in self._key_positions])

    def select(self, values: Sequence[Any], inst: _Instance) -> tuple[int, Launcher]:
        """The bucket, and the first variant valid for the call: of the bucket's choice,
        else of any bucket; ArgumentError if none is (saying what the bundle holds)."""
        b = self._bucket(values)
        for launcher in inst.choices[b]:
            if launcher.fits is None or launcher.fits(values):
                return b, launcher
        for launcher in inst.fallback:
            if launcher.fits is None or launcher.fits(values):
                return b, launcher
        why = explain(self.spec, inst.variants, values)
        raise ArgumentError(
            f"{self.name}(): no variant in the bundle was built for this call: {why}. "
            "Add the value to the recipe's sizes (or buckets) and rebuild"
        )

    def variant_for(
        self, *args: Any, dtypes: Mapping[str, str] | None = None, **call: Any
    ) -> VariantSpec:
        """The variant a call with ``args`` would launch (for tests and inspection)."""
        values, seen = self.convert(args, call)
        return self.select(values, self._instance(seen, dtypes))[1].variant

    def launch_config(
        self, dtypes: Mapping[str, str] | None = None, **sizes: int
    ) -> dict[str, Any]:
        """The constexprs and launch options a call with these sizes would launch, before
        the call (host code that depends on them, such as padding tokens to BLOCK_SIZE_M,
        asks first). ``sizes`` gives every bucket key (arguments or call values) by name;
        a derived constexpr is included when ``sizes`` has every value it reads, and one
        the bundle has no variant for is refused as the call would be. ``dtypes`` picks
        the binding (dtype variables, optional pointers as "given"/"none"); it may be left
        out when every binding would launch the same."""
        missing = [k for k in self.spec.bucket_keys if k not in sizes]
        if missing:
            raise ArgumentError(f"{self.name}.launch_config() needs {', '.join(missing)}=...")
        b = self.grid.index([sizes[k] for k in self.spec.bucket_keys])
        given = dict(dtypes or {})
        found = [i for i in self._instances.values()
                 if all(i.dtypes.get(k) == v for k, v in given.items())]  # fmt: skip
        answers = [self._config_of(inst, b, sizes) for inst in found]
        if not answers or any(a != answers[0] for a in answers):
            have = [dict(i.dtypes) for i in self._instances.values()]
            raise ArgumentError(f"{self.name}.launch_config(): the bindings launch different "
                                f"configs here; give dtypes= naming one of {have}")  # fmt: skip
        return answers[0]

    def _config_of(self, inst: _Instance, b: int, sizes: Mapping[str, int]) -> dict[str, Any]:
        variant = inst.choices[b][-1].variant  # the generic one: same config, fewest assumptions
        derived = {d.name for d in self.spec.derived}
        out: dict[str, Any] = {k: v for k, v in variant.meta.items() if k not in derived}
        for d in self.spec.derived:
            e = parse(d.expr, predicate=True)
            if e.names <= set(sizes) | set(out):
                value = e.evaluate({**out, **sizes})
                held = {v.meta.get(d.name) for v in inst.variants}
                if value not in held:
                    at = ", ".join(f"{n}={sizes[n]}" for n in sorted(e.names & set(sizes)))
                    raise ArgumentError(
                        f"{self.name}: {d.name} = {d.expr} is {value!r} at {at}, and the "
                        f"bundle's variants have {d.name} in {sorted(held, key=repr)}. Add "
                        "the value to the recipe's sizes (or buckets) and rebuild"
                    )
                out[d.name] = value
        return {**out, "num_warps": variant.num_warps, "num_stages": variant.num_stages}

    def __call__(
        self, *args: Any, stream: Any = None, dtypes: Mapping[str, str] | None = None, **call: Any
    ) -> None:
        if dtypes is None:
            found = self._fast.lookup(args, call)
            if found is not None:
                launcher, values = found
                try:
                    handle = self._stream() if stream is None else _args.stream_handle(stream)
                    launcher.launch(values, handle)
                    return
                except _RETRY_CHECKED:
                    pass  # nothing was launched; the checked path says what is wrong
        self._call_checked(args, stream, dtypes, call)

    def _call_checked(
        self,
        args: Sequence[Any],
        stream: Any,
        dtypes: Mapping[str, str] | None,
        call: Mapping[str, Any] | None = None,
    ) -> None:
        """The full path: every argument checked and converted, every error explained."""
        values, seen = self.convert(args, call)
        inst = self._instance(seen, dtypes)
        launcher = self.select(values, inst)[1]
        handle = self._stream() if stream is None else _args.stream_handle(stream)
        if dtypes is None:
            self._fast.learn(args, inst.fast_choices)
        launcher.launch(values, handle)

    def warmup(self, **sizes: int | Iterable[int]) -> int:
        """Load the modules of the buckets that hold ``sizes`` now instead of at first call:
        every bucket, or those of the given bucket keys' sizes (``warmup(M=[1, 16])``;
        every bucket of a key not given), for every dtype binding. Returns how many
        modules are loaded for them (loader/buckets.py: ``warm``)."""
        return warm(self.grid, sizes, self._load_bucket)

    def _load_bucket(self, index: int) -> list[Launcher]:
        launchers = [
            launcher for inst in self._instances.values() for launcher in inst.choices[index]
        ]
        for launcher in launchers:
            launcher.load()
        return launchers


def locate_bundle(
    path: str | os.PathLike[str],
    *,
    digest: str | None = None,
    cache_dir: str | os.PathLike[str] | None = None,
) -> str | os.PathLike[str]:
    """The local file of ``path``, as ``open`` and ``load_model`` take it: an
    ``oci://HOST/REPO:TAG`` reference is pulled into the cache (``cache_dir``) first, and
    ``digest="sha256:..."`` pins the file; see loader/oci.py, which only they import."""
    if digest is None and not (isinstance(path, str) and path.startswith("oci://")):
        return path
    from .oci import locate

    return locate(path, digest=digest, cache_dir=cache_dir)
