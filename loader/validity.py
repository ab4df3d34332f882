"""Whether a variant may serve a call: never a config the build did not verify for it.

A bucket's choice is a performance decision; whether a variant is *valid* for a call is
not. A variant serves a call only when, at the call's values:

- its specialisation assumptions hold (an argument divisible by 16, or equal to 1);
- every constexpr the kernel derives per call (``@triton.heuristics`` rules, a recipe's
  ``derived``) has the value the variant was compiled with;
- every constraint of the recipe that reads the call's values (``BLOCK_N >= N``) holds
  for the variant's meta-parameters.

A call's values are its arguments in order, then its call values (launch values that are
not arguments: passed by keyword, or read off an argument: a dimension of its shape or its
stride). Each test is one generated function per variant (loader/expr.py), so checking a
candidate costs a function call.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

from .args import shape_of
from .descriptors import is_host_descriptor
from .errors import ArgumentError
from .expr import compile_function, parse
from .manifest import KernelSpec, VariantSpec

Values = Sequence[Any]
Fits = Callable[[Values], bool]

_assumption_tests: dict[tuple[tuple[int, int], ...], Fits] = {}  # _assumptions'
_MAX_TESTS = 4096  # then start again (a service opening bundle after bundle)


class CallValues:
    """A kernel's call values: their names, and how a call gives each."""

    def __init__(self, spec: KernelSpec):
        self.kernel = spec.name
        self.params = [p.name for p in spec.params]
        self.names = [c.name for c in spec.call] + list(spec.host)
        self.host = frozenset(spec.host)
        index = {p: i for i, p in enumerate(self.params)}
        self._from = [(c.name, index.get(c.tensor) if c.tensor else None, c.dim, c.rank,
                       c.stride_of is not None) for c in spec.call]  # fmt: skip
        self._from += [(h, None, 0, None, False) for h in spec.host]

    @property
    def all_names(self) -> list[str]:
        """Every value a call has, in order: the parameters, the call values, the host
        values."""
        return self.params + self.names

    def extend(self, values: list[Any], args: Sequence[Any], given: Mapping[str, Any]) -> None:
        """Append the call values to the converted ``values`` of the arguments ``args``."""
        unknown = sorted(set(given) - set(self.names))
        if unknown:
            have = ", ".join(self.names) or "none"
            name = unknown[0]
            # (a constexpr by keyword never gets here: loader/keywords.py binds it first)
            raise ArgumentError(f"{self.kernel}() got an unexpected keyword {name!r}; "
                                f"its call values are: {have}")  # fmt: skip
        for name, arg, dim, rank, stride in self._from:
            if name in given:
                value = given[name]
            elif name in self.host:
                raise ArgumentError(f"{self.kernel}() needs {name}=..., the value the host "
                                    "data was prepared for (launch_config() gives it)")  # fmt: skip
            elif arg is None:
                raise ArgumentError(f"{self.kernel}() needs the call value {name}=... (a "
                                    "launch value that is not a kernel argument)")  # fmt: skip
            else:
                try:
                    value = _read(self.kernel, name, args[arg], self.params[arg], dim, rank,
                                  stride)  # fmt: skip
                except _OtherRank as exc:  # one fix for every value read off such a tensor
                    keys = ", ".join(f"{n}=..." for n in self._other_rank(args, given))
                    raise ArgumentError(f"{exc}: pass {keys} by keyword, or reshape") from None
            if isinstance(value, bool) or not isinstance(value, int):
                raise ArgumentError(f"{self.kernel}(): call value {name} must be an int, got "
                                    f"{type(value).__name__}")  # fmt: skip
            values.append(value)

    def _other_rank(self, args: Sequence[Any], given: Mapping[str, Any]) -> list[str]:
        """The call values not given by keyword that read a tensor argument of another
        rank than the build saw."""

        def other(arg: int, rank: int) -> bool:
            shape = shape_of(args[arg])
            return shape is not None and len(shape) != rank

        return [n for n, arg, _, rank, _ in self._from if n not in given and arg is not None
                and rank is not None and other(arg, rank)]  # fmt: skip


class _OtherRank(ArgumentError):
    """A call value's tensor has another rank than the build saw (the caller's fix names
    every value read off it)."""


def _read(
    kernel: str, name: str, tensor: Any, param: str, dim: int, rank: int | None, stride: bool
) -> int:
    """Dimension ``dim`` of the argument's shape, or its stride (in elements)."""
    shape = shape_of(tensor)
    what = (f"the stride of dimension {dim} of {param}" if stride
            else f"dimension {dim} of {param}'s shape")  # fmt: skip
    if shape is None or dim >= len(shape):
        raise ArgumentError(f"{kernel}(): {name} is {what}, which this argument does not "
                            f"have; pass {name}=... by keyword")  # fmt: skip
    if rank is not None and len(shape) != rank:
        raise _OtherRank(f"{kernel}(): {name} is {what}, which the bundle was built for as "
                         f"{rank}-D; this {param} is {len(shape)}-D")  # fmt: skip
    if not stride:
        return shape[dim]
    if shape[dim] == 1:  # never stepped along: the stride a dense tensor has there
        return math.prod(shape[dim + 1 :])
    strides = _strides(tensor, shape)
    if isinstance(strides, str):
        raise ArgumentError(f"{kernel}(): {name} is {what}: {strides}; pass {name}=... by "
                            "keyword")  # fmt: skip
    return strides[dim]


def _strides(tensor: Any, shape: tuple[int, ...]) -> tuple[int, ...] | str:
    """A tensor's strides in elements, as torch's ``stride()`` gives them (a host
    TensorDescriptor's are its ``strides``), or why they cannot be known. An array
    interface's are in bytes, and absent for a row-major, dense array."""
    if is_host_descriptor(tensor):
        return tuple(int(s) for s in tensor.strides)
    method = getattr(tensor, "stride", None)
    if callable(method):
        return tuple(int(s) for s in method())
    cai = getattr(tensor, "__cuda_array_interface__", None)
    if not isinstance(cai, dict):
        return f"a {type(tensor).__name__} has a shape but no stride()"
    if cai.get("strides") is None:
        return tuple(math.prod(shape[i + 1 :]) for i in range(len(shape)))
    typestr = str(cai.get("typestr", ""))
    size = int(typestr[2:]) if typestr[2:].isdigit() else 0
    strides = tuple(int(s) for s in cai["strides"])
    if not size or any(s % size for s in strides):
        return (f"its __cuda_array_interface__ strides {list(strides)} (bytes) are no "
                f"multiples of its element size ({typestr!r})")  # fmt: skip
    return tuple(s // size for s in strides)


def value_names(spec: KernelSpec) -> list[str]:
    """A call's values, in order: the parameters, the call values, the host values."""
    return [p.name for p in spec.params] + [c.name for c in spec.call] + list(spec.host)


def variant_test(
    spec: KernelSpec,
    variant: VariantSpec,
    assumptions: Sequence[tuple[int, int]],
    device: Mapping[str, int],
) -> Fits | None:
    """One function telling whether ``variant`` is valid at a call's values (None: it is
    valid at every call). ``device``: the builtins a check may read (NUM_SMS, SMEM)."""
    names = value_names(spec)
    consts = {**device, **variant_values(variant)}  # a compiled NUM_SMS over the GPU's
    tests: list[Fits] = []
    if assumptions:
        tests.append(_assumptions(assumptions))
    if spec.host:
        first = len(names) - len(spec.host)
        pinned = tuple((first + j, variant.meta[h]) for j, h in enumerate(spec.host))
        tests.append(lambda values: all(values[i] == x for i, x in pinned))
    if spec.derived:
        derive = compile_function(
            [parse(d.expr, predicate=True) for d in spec.derived], names, consts
        )
        want = tuple(variant.meta[d.name] for d in spec.derived)
        tests.append(lambda values: derive(*values) == want)
    if spec.checks:
        check = compile_function([parse(c, predicate=True) for c in spec.checks], names, consts)
        tests.append(lambda values: False not in check(*values))
    if not tests:
        return None
    if len(tests) == 1 and assumptions:
        return tests[0]  # assumptions alone: integer tests that cannot raise
    return _guarded(tests)


def _assumptions(checks: Sequence[tuple[int, int]]) -> Fits:
    """The assumptions ((position, 16 or 1) pairs) as one generated test: built from
    integers only; generated rather than looped, as the fast path is (loader/fastcall.py)."""
    key = tuple(checks)
    fits = _assumption_tests.get(key)  # variants share them: compiled once (pure functions)
    if fits is None:
        if len(_assumption_tests) >= _MAX_TESTS:
            _assumption_tests.clear()
        fits = _assumption_tests[key] = _compile_assumptions(key)
    return fits


def _compile_assumptions(checks: Sequence[tuple[int, int]]) -> Fits:
    aligned = [f"values[{pos}]" for pos, kind in checks if kind == 16]
    terms = [f"values[{pos}] == 1" for pos, kind in checks if kind != 16]
    if aligned:  # v & 15 is non-zero exactly when v % 16 is, so OR them all and test once
        terms.insert(0, f"not (({' | '.join(aligned)}) & 15)")
    namespace: dict[str, Any] = {}
    source = f"def fits(values):\n    return {' and '.join(terms)}\n"
    exec(compile(source, "<aotc assumptions>", "exec"), namespace)
    fits: Fits = namespace["fits"]
    return fits


def _guarded(tests: Sequence[Fits]) -> Fits:
    """All of ``tests``, answering False where arithmetic fails (a value that divides by
    zero): such a variant does not serve the call, and the checked path explains."""

    def fits(values: Values) -> bool:
        try:
            for t in tests:  # noqa: SIM110 (a loop costs less than all(genexpr) per call)
                if not t(values):
                    return False
            return True
        except (ArithmeticError, TypeError):
            return False

    return fits


def explain(
    spec: KernelSpec, variants: Sequence[VariantSpec], values: Values, device: Mapping[str, int]
) -> str:
    """Why no variant serves a call at ``values``, and what to do: each derived value no
    variant has, each constraint no variant meets (with where the call values it reads
    come from), each host value no variant was built for."""
    names = value_names(spec)
    parts: list[str] = []
    fixes: list[str] = []
    missed: set[str] = set()  # the names the derived values no variant has read
    at_call = _derived_at(spec, names, values, variants[0].meta if variants else {})
    for d, got in zip(spec.derived, at_call, strict=True):
        held = _held(v.meta.get(d.name) for v in variants)
        if isinstance(got, Exception):
            parts.append(f"{d.name} = {d.expr} cannot be computed at this call ({got})")
            continue
        if repr(got) not in held:
            parts.append(f"{d.name} = {d.expr} is {got!r} at this call, and the bundle's "
                         f"variants have {d.name} in {{{', '.join(held)}}}")  # fmt: skip
            missed |= parse(d.expr, predicate=True).names
    if parts:
        fixes.append(_derived_fix(spec, missed, "the value"))
    broken = [
        c for c in spec.checks if not any(_meets(c, names, v, values, device) for v in variants)
    ]
    parts += [f"the constraint {c!r} holds for none of them{_their(c, variants)}" for c in broken]
    if broken:
        fixes.append(_check_fix(spec, broken))
    first = len(names) - len(spec.host)
    for j, h in enumerate(spec.host):
        held = _held(v.meta.get(h) for v in variants)
        if repr(values[first + j]) not in held:
            parts.append(f"{h}={values[first + j]!r} was asked for, and the variants have {h} "
                         f"in {{{', '.join(held)}}}")  # fmt: skip
            fixes.append(f"Pass the {h} that launch_config() gives for the call's sizes")
    read: set[str] = set()
    for text in [d.expr for d in spec.derived] + list(spec.checks):
        e = parse(text, predicate=True)
        read |= e.names - e.presence  # a None test's argument: the binding decides, no value
    if not parts:  # each condition holds for some variant, but none meets them all
        every = [d.name for d in spec.derived] + [repr(c) for c in spec.checks]
        parts = [f"no variant meets the derived values and constraints together: "
                 f"{', '.join(every)}{_combos(spec, variants, names, values)}"]  # fmt: skip
        fixes.append(_derived_fix(spec, read, "the values"))
    pointers = {p.name for p in spec.params if p.type.startswith("*")}  # an address says nothing
    at = ", ".join(f"{n}={v}" for n, v in zip(names, values, strict=False)
                   if n in read and n not in pointers)  # fmt: skip
    return "; or ".join(parts) + (f" (at {at})" if at else "") + "".join(f". {f}" for f in fixes)


def _meets(
    check: str, names: list[str], variant: VariantSpec, values: Values, device: Mapping[str, int]
) -> bool:
    """Whether ``check`` holds for ``variant`` at the call's ``values`` (evaluated, not
    compiled per variant: this runs only to explain a refusal)."""
    env = {**device, **variant_values(variant), **dict(zip(names, values, strict=False))}
    try:
        return bool(parse(check, predicate=True).evaluate(env))
    except (ArithmeticError, TypeError, ValueError):
        return False


def variant_values(variant: VariantSpec) -> dict[str, object]:
    """What a check reads of a variant: its meta-parameters and its launch options."""
    return {"num_warps": variant.num_warps, "num_stages": variant.num_stages, **variant.meta}


def _their(check: str, variants: Sequence[VariantSpec]) -> str:
    """The meta-parameters ``check`` reads, as the bundle's variants have them."""
    held_by = [variant_values(v) for v in variants]
    read = sorted(parse(check, predicate=True).names & set(held_by[0])) if variants else []
    if not read:
        return ""
    held = sorted({tuple(v[n] for n in read) for v in held_by}, key=_in_order)
    shown = ", ".join("(" + ", ".join(map(str, t)) + ")" for t in held[:4])
    more = f" and {len(held) - 4} more" if len(held) > 4 else ""
    return f" (their {', '.join(read)}: {shown}{more})"


def _check_fix(spec: KernelSpec, broken: list[str]) -> str:
    """Pass values that meet the constraints; names the call values they read off
    arguments."""
    read: set[str] = set()
    for c in broken:
        read |= parse(c, predicate=True).names
    where = _read_off(spec, read)
    return f"Pass values that meet it{where}, or rebuild the bundle with sizes where they do"


def _derived_fix(spec: KernelSpec, read: set[str], what: str) -> str:
    """Add the values to the recipe and rebuild; or, where they are read off the call's
    arguments (a strided view's row stride), pass arguments the bundle was built for."""
    where = _read_off(spec, read)
    rebuild = f"{what} to the recipe's sizes (or buckets) and rebuild"
    if not where:
        return f"Add {rebuild}"
    return f"Pass arguments it was built for{where}, or add {rebuild}"


def _read_off(spec: KernelSpec, read: set[str]) -> str:
    """Where the call values among ``read`` come from: `` (row_stride = stride(X, 0))``."""
    taken = [f"{c.name} = {c.text}" for c in spec.call if c.tensor and c.name in read]
    return f" ({'; '.join(taken)})" if taken else ""


def _held(values: Iterable[object]) -> list[str]:
    """The distinct values, shown in order (numbers by value: 4096 before 16384)."""
    return [repr(x) for x in sorted(set(values), key=lambda x: _in_order((x,)))]


def _in_order(t: tuple[object, ...]) -> tuple[tuple[int, Any], ...]:
    """A sort key for tuples of values: numbers by value, anything else by its text."""
    return tuple((0, x) if isinstance(x, int | float) else (1, repr(x)) for x in t)


def _derived_at(
    spec: KernelSpec, names: list[str], values: Values, meta: Mapping[str, object]
) -> list[object]:
    """Each derived value at this call, in order, or the exception computing it raised. A
    derived value that reads an earlier one reads it as computed here, not as ``meta``
    (one variant's) has it: the message must show this call's values."""
    out: list[object] = []
    consts = dict(meta)
    for d in spec.derived:
        try:
            got = compile_function([parse(d.expr, predicate=True)], names, consts)(*values)[0]
        except (ArithmeticError, TypeError, ValueError) as exc:
            out.append(exc)
            continue
        consts[d.name] = got
        out.append(got)
    return out


def _combos(spec: KernelSpec, variants: Sequence[VariantSpec], names: list[str],
            values: Values) -> str:  # fmt: skip
    """The derived values at this call beside those the variants were built with."""
    if not spec.derived or not variants:
        return ""
    got = _derived_at(spec, names, values, variants[0].meta)
    if any(isinstance(x, Exception) for x in got):
        return ""
    held = sorted({tuple(v.meta.get(d.name) for d in spec.derived) for v in variants},
                  key=_in_order)  # fmt: skip
    shown = ", ".join("(" + ", ".join(map(repr, t)) + ")" for t in held[:4])
    more = f" and {len(held) - 4} more" if len(held) > 4 else ""
    now = ", ".join(f"{d.name}={x!r}" for d, x in zip(spec.derived, got, strict=True))
    return f" ({now} at this call; the variants have {shown}{more})"
