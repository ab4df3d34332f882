"""A bundle's kernel as a callable: binding, bucket and variant chosen per call.

A call takes one of two paths. The fast path (loader/fastcall.py) answers a call whose
argument signature (tensor dtypes, scalar types) an earlier call had been accepted with,
through one function generated for the kernel's parameter list. Every other call takes
the checked path: ``convert`` (every argument, with clear errors), ``_instance`` (dtype
binding), ``select`` (bucket and variant); it then teaches the fast path the signature.
Both end in ``Launcher.launch`` (loader/launch.py): one struct.pack_into, the grid,
cuLaunchKernel.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from . import args as _args
from . import descriptors as _descriptors
from .buckets import BucketGrid, kernel_grid, warm
from .dispatch import order_variants
from .errors import ArgumentError, NoTargetError
from .expr import parse
from .fastcall import PACK_ERRORS, FastPath, choice_table
from .launch import EntrySource, Launcher
from .manifest import GIVEN, NONE, CallValue, KernelSpec, Param, VariantSpec
from .validity import CallValues, explain

if TYPE_CHECKING:
    from .keywords import Keywords
    from .profile import HostPath

# What a fast-path launch raises only before anything reached the driver: the checked path
# then runs the call again and says what is wrong (or launches, e.g. an fp32 value too
# large for struct, which it rounds to inf as the kernel would see it).
_RETRY_CHECKED = (*PACK_ERRORS, ArgumentError)


class _Instance:
    """A kernel's launchers for one binding (dtypes, optional arguments) on one target."""

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
        self._keyword_args: Keywords | None = None  # built on the first call by keyword
        self._call_names = frozenset(self._call.names)
        index = {n: i for i, n in enumerate(self._call.all_names)}
        self._key_positions = tuple(index[k] for k in spec.bucket_keys)
        self.grid: BucketGrid = kernel_grid(spec.bucket_keys, spec.buckets, f"kernel {self.name!r}")
        self._instances: dict[tuple[str, ...], _Instance] = {}
        self._vars = tuple(sorted(spec.dtype_vars))
        self._optional = spec.nullable
        self._always_none = frozenset(spec.always_none)
        self._descriptors = frozenset(spec.descriptors)
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
        self._device = {"NUM_SMS": source.device.sms, "SMEM": source.device.max_shared}
        grid_names = set().union(*(parse(g).names for g in spec.grid))
        keyword = [*spec.call, *(CallValue(h) for h in spec.host)]
        self._fast = FastPath(spec.params, self._key_positions, self.grid, grid_names,
                              optional=spec.nullable, call=keyword,
                              descriptors=spec.descriptors)  # fmt: skip

    @property
    def binding_keys(self) -> tuple[str, ...]:
        """The dtype variables, then the nullable pointers: what a binding's values name."""
        return self._binding

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
            if a is None and p.name in self._optional:
                # Compiled in as None, never passed: a pointer reads as 0 (a null one is
                # refused), a scalar as None (a given 0.0 is not None).
                values.append(0 if p.type[0] == "*" else None)
                dtypes[i] = NONE
            elif p.type[0] != "*":
                if a is None:
                    raise ArgumentError(
                        f"{self.name}(): argument {p.name!r} is None, and the bundle was built "
                        f"for a value ({p.type}): pass one, or list {p.name} under the "
                        "recipe's optional to build both forms"
                    )
                values.append(_args.scalar(a, p.type, p.name))
            elif p.name in self._always_none:
                raise ArgumentError(
                    f"{self.name}(): argument {p.name!r} is compiled in as None (the recipe's "
                    f"inputs passed None for it), got {type(a).__name__}: pass None, or "
                    f"rebuild with a value for it in inputs (and {p.name} under the recipe's "
                    "optional to build both forms)"
                )
            elif p.name in self._descriptors:  # (address, shape, strides): see descriptors.py
                value, dt = _descriptors.tensor(a, p.name)
                values.append(value)
                if dt is not None:
                    dtypes[i] = dt
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

    def binding(
        self, args: Sequence[Any], dtypes: Mapping[str, str] | None = None
    ) -> tuple[str, ...]:
        """The binding a call with ``args`` runs under: each dtype variable's element type,
        then GIVEN or NONE for each optional argument (an op routes by it)."""
        seen: dict[int, str] = {}
        for i, (p, a) in enumerate(zip(self.params, args, strict=True)):
            if a is None and p.name in self._optional:
                seen[i] = NONE
                continue
            if p.type[0] != "*":
                continue
            reader = _descriptors.tensor if p.name in self._descriptors else _args.pointer
            dt = reader(a, p.name)[1]
            if dt is not None:
                seen[i] = dt
        inst = self._instance(seen, dtypes)
        return tuple(inst.dtypes[k] for k in self._binding)

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
        why = explain(self.spec, inst.variants, values, self._device)
        raise ArgumentError(
            f"{self.name}(): no variant in the bundle was built for this call: {why}"
        )

    def variant_for(
        self, *args: Any, dtypes: Mapping[str, str] | None = None, **call: Any
    ) -> VariantSpec:
        """The variant a call with ``args`` would launch (for tests and inspection)."""
        args, call, expect = self._keywords.bind(args, call) if call else (args, call, {})
        values, seen = self.convert(args, call)
        variant = self.select(values, self._instance(seen, dtypes))[1].variant
        self._keywords.check(variant, expect)
        return variant

    def launch_config(
        self, dtypes: Mapping[str, str] | None = None, **sizes: int
    ) -> dict[str, Any]:
        """The constexprs and launch options a call with these sizes would launch, before
        the call (host code that depends on them, such as padding tokens to BLOCK_SIZE_M,
        asks first). ``sizes`` gives every bucket key (arguments or call values) by name;
        a derived constexpr is included when ``sizes`` has every value it reads, and one
        the bundle has no variant for is refused as the call would be. ``dtypes`` picks
        the binding (dtype variables, optional arguments as "given"/"none"); it may be left
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
            # Whether an argument is None is the binding's: `scale is not None` is known.
            given = {n: None if inst.dtypes.get(n) == NONE else 1 for n in e.presence}
            if e.names <= set(sizes) | set(out) | set(given):
                value = e.evaluate({**given, **out, **sizes})
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
        if call and not self._call_names.issuperset(call):
            args, call, expect = self._keywords.bind(args, call)  # arguments by keyword
            if expect:  # constexprs or launch options the chosen variant must have
                return self._call_checked(args, stream, dtypes, call, expect)
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
        expect: Mapping[str, Any] | None = None,
    ) -> None:
        """The full path: every argument checked and converted, every error explained."""
        values, seen = self.convert(args, call)
        inst = self._instance(seen, dtypes)
        launcher = self.select(values, inst)[1]
        if expect:
            self._keywords.check(launcher.variant, expect)
        handle = self._stream() if stream is None else _args.stream_handle(stream)
        if dtypes is None and not expect:
            self._fast.learn(args, inst.fast_choices)
        launcher.launch(values, handle)

    def host_path(self, *args: Any, **call: Any) -> HostPath:
        """The pieces of the call ``kernel(*args, **call)``, each callable alone, to measure
        where its host time goes (loader/profile.py). Makes the call once; ArgumentError if
        it does not then take the fast path (raw pointers, say)."""
        self(*args, **call)
        args, call, _ = self._keywords.bind(args, call) if call else (args, call, {})
        found = self._fast.lookup(args, call)
        if found is None:
            raise ArgumentError(
                f"{self.name}.host_path(): these arguments do not take the fast path; pass "
                "tensors of the kernel's element types"
            )
        launcher, values = found
        fast, handle = self._fast, self._stream()
        launch, pack_grid, driver_call, driver_call_typed, driver_call_params = launcher.host_parts(
            values, handle
        )
        from .profile import HostPath  # for benchmarks only: not imported at start-up

        return HostPath(
            call=lambda: self(*args, **call),
            checked=lambda: self._call_checked(args, None, None, call),
            lookup=lambda: fast.lookup(args, call),
            stream=self._stream,
            launch=launch,
            pack_grid=pack_grid,
            driver_call=driver_call,
            driver_call_typed=driver_call_typed,
            driver_call_params=driver_call_params,
            variant=launcher.variant,
        )

    @property
    def _keywords(self) -> Keywords:
        """Arguments, constexprs and launch options by keyword (loader/keywords.py):
        imported on the first call that names one, not at start-up."""
        if self._keyword_args is None:
            from .keywords import Keywords

            self._keyword_args = Keywords(self.spec, self.target)
        return self._keyword_args

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
