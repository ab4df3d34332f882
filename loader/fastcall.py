"""The per-call host path, precomputed: what a kernel call costs when nothing is unusual.

``Kernel.__call__`` (kernel.py) first asks ``FastPath.lookup`` for a launcher and the call's
values. A call whose arguments have the same *signature* (the dtype and is_cuda of every
tensor, the type of every scalar) as an earlier call that the checked path in kernel.py
accepted is answered by one function generated for the kernel's parameter list: it
unpacks the arguments, looks the signature up in a dict (which yields the dtype instance's
variant table), reads the data pointers, picks the bucket with ``bisect`` (the kernel's
bucket grid's own lookup, ``BucketGrid.clamp_lookup``, inlined) and the most
specialized variant whose assumptions hold with generated tests. No loops over
parameters, no dictionary walks, no string work. The launcher then writes every ABI value
with one ``struct.pack_into`` (``ParamBuffer``), whose range checks replace the checked
path's.

Anything unusual (raw pointers, ``__cuda_array_interface__`` objects, ``dtypes=``, an unseen
signature, a null pointer, a value ``struct`` refuses) makes ``lookup`` return None, or the
launch raise before anything reaches the driver; the caller then runs the checked path,
which launches or raises the clear error, and teaches ``FastPath`` the signature if it was
accepted. Only accepted signatures are remembered, so a bad call never poisons the cache.

The generated functions are built from argument positions (integers) and fixed names
only, never from manifest or user text: unrolled Python costs less here than the same work
through ``map``/``operator`` helpers (benchmarks/host_path_cpu.py measures this path; see
benchmarks/RESULTS.md).
"""

from __future__ import annotations

import ctypes
import struct
from bisect import bisect_left
from collections.abc import Callable, Collection, Mapping, Sequence
from types import CodeType
from typing import TYPE_CHECKING, Any

from .descriptors import fast_key, fast_value

if TYPE_CHECKING:
    from .buckets import BucketGrid
    from .launch import Launcher
    from .manifest import CallValue, Param

Values = tuple[Any, ...]

# struct codes (little-endian, standard sizes: each slot is placed at its C alignment by
# hand) and the ctypes type of each slot, by the manifest's scalar type. Pointers are
# 64-bit addresses; a "tensormap" is a CUtensorMap, 128 bytes aligned to 64, passed by value.
_SLOTS: dict[str, tuple[str, type[Any]]] = {
    "i1": ("b", ctypes.c_int8),
    "i8": ("b", ctypes.c_int8),
    "i16": ("h", ctypes.c_int16),
    "i32": ("i", ctypes.c_int32),
    "i64": ("q", ctypes.c_int64),
    "u1": ("B", ctypes.c_uint8),
    "u8": ("B", ctypes.c_uint8),
    "u16": ("H", ctypes.c_uint16),
    "u32": ("I", ctypes.c_uint32),
    "u64": ("Q", ctypes.c_uint64),
    "fp32": ("f", ctypes.c_float),
    "fp64": ("d", ctypes.c_double),
    "tensormap": ("128s", ctypes.c_uint8 * 128),
}
_POINTER_SLOT = ("Q", ctypes.c_uint64)
# cuLaunchKernel's ``extra`` keys (cuda.h): CU_LAUNCH_PARAM_BUFFER_POINTER, _BUFFER_SIZE;
# CU_LAUNCH_PARAM_END is a null pointer.
_PARAM_BUFFER_POINTER, _PARAM_BUFFER_SIZE = 1, 2
_ALIGN = {"tensormap": 64}
_BUFFER_ALIGN = 64

# Errors with which ParamBuffer.pack refuses a value: nothing has been launched then.
PACK_ERRORS = (struct.error, OverflowError)

_MAX_SIGNATURES = 64  # distinct argument signatures remembered per kernel


class ParamBuffer:
    """A launcher's kernel parameters: every ABI slot at its offset in one buffer, the
    cubin's where given (``offsets``), else C-aligned.

    ``pack(values)`` writes ``values[p]`` for each ABI position ``p`` into its slot with one
    ``struct.pack_into``, which also refuses out-of-range ints and non-numbers
    (``PACK_ERRORS``). The trailing scratch slots (Triton's global and profile scratch
    pointers) are never packed: they stay null. The buffer is shared, so callers hold the
    launcher's lock from pack until cuLaunchKernel has copied it.

    Two ways to hand the driver the same bytes: ``params``, kernelParams (a pointer per
    slot: the driver copies each to the cubin's offset), and ``extra``, cuLaunchKernel's
    CU_LAUNCH_PARAM_BUFFER_POINTER (the buffer copied whole: only with the cubin's offsets).
    """

    def __init__(
        self,
        types: Sequence[str],
        positions: Sequence[int],
        scratch: int,
        offsets: Sequence[int] | None = None,
    ):
        names = [*types, *(["*"] * scratch)]
        slots = [_slot(t) for t in names]
        places: list[int] = []
        pieces: list[str] = []  # each slot's struct code, with the padding before it
        end = 0
        for i, (t, (code, ctype)) in enumerate(zip(names, slots, strict=True)):
            align = _ALIGN.get(t, ctypes.sizeof(ctype))
            at = -(-end // align) * align if offsets is None else offsets[i]
            if at < end:
                raise ValueError(f"parameter {i} at offset {at} overlaps the one before")
            pieces.append(f"{at - end}x{code}" if at > end else code)
            places.append(at)
            end = at + ctypes.sizeof(ctype)
        words = -(-end // 8) + _BUFFER_ALIGN // 8
        self.storage = (ctypes.c_uint64 * words)()  # zeroed
        lead = -ctypes.addressof(self.storage) % _BUFFER_ALIGN
        self.base = base = ctypes.addressof(self.storage) + lead  # 64-byte aligned
        self.params = (ctypes.c_void_p * len(slots))(*[base + off for off in places])
        self._size = ctypes.c_size_t(end)
        self.extra = (ctypes.c_void_p * 5)(
            _PARAM_BUFFER_POINTER, base, _PARAM_BUFFER_SIZE, ctypes.addressof(self._size), None
        )
        # Typed views of the slots, for inspection and tests; the hot path never reads them.
        self.holders = [
            ctype.from_buffer(self.storage, lead + off)
            for (_, ctype), off in zip(slots, places, strict=True)
        ]
        # The packed format covers the first len(types) slots: the scratch ones stay null.
        layout = struct.Struct("<" + "".join(pieces[: len(types)]))
        items = "".join(f", values[{p}]" for p in positions)
        env = {"pack_into": layout.pack_into, "storage": self.storage}
        source = f"def pack(values):\n    pack_into(storage, {lead}{items})\n"
        self.pack: Callable[[Sequence[Any]], None] = _generate(source, env)["pack"]


def _slot(t: str) -> tuple[str, type[Any]]:
    """A manifest type's (struct code, ctypes type); every pointer is a 64-bit address."""
    return _POINTER_SLOT if t[0] == "*" else _SLOTS[t]


def slot_sizes(types: Sequence[str], scratch: int) -> tuple[int, ...]:
    """The byte size of each ABI slot, the trailing scratch pointers included, as
    ParamBuffer lays them out."""
    return tuple(ctypes.sizeof(_slot(t)[1]) for t in [*types, *(["*"] * scratch)])


Fits = Callable[[Values], bool]
ChoiceTable = tuple[tuple[tuple[Fits | None, "Launcher"], ...], ...]


def choice_table(choices: Sequence[Sequence[Launcher]]) -> ChoiceTable:
    """Per bucket, (assumption test, launcher) pairs, most specialized first."""
    return tuple(tuple((launcher.fits, launcher) for launcher in bucket) for bucket in choices)


class FastPath:
    """One kernel's memory of accepted argument signatures, and the lookup that uses it."""

    def __init__(
        self,
        params: Sequence[Param],
        bucket_positions: Sequence[int],
        buckets: BucketGrid,
        grid_names: Collection[str],
        *,
        optional: Collection[str] = (),
        call: Sequence[CallValue] = (),
        descriptors: Collection[str] = (),
    ):
        """``bucket_positions``: where each of ``buckets``' dimensions is among the call's
        values (which must clamp: a call past the last bucket goes to the last, as in the
        checked path); ``optional``: arguments that may be None; ``call``: the kernel's
        call values."""
        self._known: dict[tuple[Any, ...], ChoiceTable] = {}
        # An optional scalar passed None is None in the values, as in the checked path.
        self._plain = tuple(
            (i, _plain_types(p, grid_names) + ((type(None),) if p.name in optional else ()))
            for i, p in enumerate(params)
            if p.type[0] != "*"
        )
        index = {p.name: i for i, p in enumerate(params)}
        lookup = buckets.clamp_lookup()
        env = {
            "known": self._known,
            "bisect_left": bisect_left,
            **{f"cut{d}": cut for d, (cut, _) in enumerate(lookup)},
            "names": tuple(c.name for c in call),
            "known_names": frozenset(c.name for c in call),
            "nothing": {},
            "desc_key": fast_key,
            "desc_value": fast_value,
        }
        # A rank the bundle was built for is the checked path's to enforce: never fast.
        shapes = [(index[c.tensor], c.dim, c.rank, c.stride_of is not None) if c.tensor else None
                  for c in call]  # fmt: skip
        bucket = _bucket(bucket_positions, [stride for _, stride in lookup])
        pointers = {index[n] for n in optional if params[index[n]].type[0] == "*"}
        source = _source(params, bucket, pointers, shapes,
                         {index[n] for n in descriptors})  # fmt: skip
        functions = _generate(source, env)
        self._signature: Callable[[Sequence[Any]], tuple[Any, ...]] = functions["signature"]
        self.lookup: Callable[[tuple[Any, ...], Mapping[str, Any]], tuple[Launcher, Values] | None]
        self.lookup = functions["lookup"]

    def learn(self, args: Sequence[Any], choices: ChoiceTable) -> None:
        """Remember the signature of ``args``, which the checked path has just accepted
        (with ``dtypes=None``) and bound to the dtype instance whose table is ``choices``."""
        if len(self._known) >= _MAX_SIGNATURES:
            return
        try:
            key = self._signature(args)
        except Exception:  # raw pointers or array-interface objects: always the checked path
            return
        # Only where the checked path's conversion would not change a scalar can the fast
        # path use it as given.
        if all(type(args[i]) in plain for i, plain in self._plain):
            self._known[key] = choices


def _bucket(positions: Sequence[int], strides: Sequence[int]) -> str:
    """The expression of a call's bucket: per dimension, a bisect of its cut (all bounds
    but the last: a value above them lands in the last bucket) times its stride."""
    terms = [
        f"bisect_left(cut{d}, values[{p}])" + (f" * {s}" if s != 1 else "")
        for d, (p, s) in enumerate(zip(positions, strides, strict=True))
    ]
    return " + ".join(terms) or "0"


def _source(
    params: Sequence[Param],
    bucket: str,
    optional: Collection[int] = (),
    shapes: Sequence[tuple[int, int, int | None, bool] | None] = (),
    described: Collection[int] = (),
) -> str:
    """``signature(args)`` and ``lookup(args, call)`` for this parameter list, unrolled.
    ``bucket``: the bucket's expression (``_bucket``); ``optional``: pointer positions that
    may be None; ``shapes``: per call value, what it defaults to, (argument, dimension,
    rank built for, whether the dimension's stride rather than its size), or None (keyword
    only)."""
    names = [f"a{i}" for i in range(len(params))]
    pointers = [i for i, p in enumerate(params) if p.type[0] == "*"]
    # The signature: (dtype, is_cuda) of a tensor, the type of a scalar. Folding is_cuda in
    # means a CPU tensor's signature is never an accepted one.
    key = _tuple([_key(a, i in pointers, i in optional, i in described)
                  for i, a in enumerate(names)])  # fmt: skip
    values = _tuple([_value(a, i in pointers, i in optional, i in described)
                     for i, a in enumerate(names)])  # fmt: skip
    extra, ranks = _call_values(shapes)
    call_values = f"\n        values += {_tuple(extra)}" if extra else ""
    # struct packs i1/u1 as bytes, so their 0..1 range needs a test of its own.
    # (A descriptor's value is a tuple: its null address is refused when it is encoded.)
    refuse = [f"not values[{i}]" for i in pointers if i not in optional] + [
        f"not 0 <= values[{i}] <= 1" for i, p in enumerate(params) if p.type in ("i1", "u1")
    ]
    refuse += [f"type(values[{len(params) + j}]) is not int" for j in range(len(shapes))]
    refuse += ranks
    strange = "call and not call.keys() <= known_names" if shapes else "call"
    return f"""
def signature(args):
    {_tuple(names)} = args
    return {key}


def lookup(args, call=nothing):
    if {strange}:  # an unknown keyword: the checked path says so
        return None
    try:
        {_tuple(names)} = args
        choices = known[{key}]
        values = {values}{call_values}
    except Exception:  # an unseen signature, or not a tensor: the checked path decides
        return None
    if {" or ".join(refuse) or "False"}:  # null pointers, i1 out of range, odd call values
        return None
    for fits, launcher in choices[{bucket}]:
        if fits is None or fits(values):
            return launcher, values
    return None
"""


def _call_values(
    shapes: Sequence[tuple[int, int, int | None, bool] | None],
) -> tuple[list[str], list[str]]:
    """Each call value's expression (by keyword, else read off an argument: a dimension of
    its shape, or its stride, torch's; anything else fails there and takes the checked
    path), and the tests that leave a tensor of another rank than the bundle's to the
    checked path (which refuses it)."""
    extra = [
        f"call[names[{j}]]" if at is None else
        f"call[names[{j}]] if names[{j}] in call else "
        + (_stride(f"a{at[0]}", at[1], at[2]) if at[3] else f"a{at[0]}.shape[{at[1]}]")
        for j, at in enumerate(shapes)
    ]  # fmt: skip
    ranks = [f"len(a{at[0]}.shape) != {at[2]} and names[{j}] not in call"
             for j, at in enumerate(shapes) if at is not None and at[2] is not None]  # fmt: skip
    return extra, ranks


def _stride(a: str, dim: int, rank: int | None) -> str:
    """Dimension ``dim``'s stride of ``a``; where that dimension has size 1 (never stepped
    along), the stride a dense tensor has there, as loader/validity.py reads it. Without
    a rank the product is unknown here: such a call takes the checked path."""
    if rank is None:
        return f"({a}.stride({dim}) if {a}.shape[{dim}] != 1 else None)"
    dense = " * ".join(f"{a}.shape[{d}]" for d in range(dim + 1, rank)) or "1"
    return f"({a}.stride({dim}) if {a}.shape[{dim}] != 1 else {dense})"


def _key(a: str, pointer: bool, optional: bool, described: bool = False) -> str:
    if not pointer:
        return f"type({a})"
    if described:  # a tensor, or a host TensorDescriptor (which has no dtype of its own)
        # The condition runs first: it keeps the dtype (or None) for the key and _value.
        return (f"({a}_dt, {a}.is_cuda) if ({a}_dt := getattr({a}, 'dtype', None)) is not None "
                f"else desc_key({a})")  # fmt: skip
    if optional:
        return f"None if {a} is None else ({a}.dtype, {a}.is_cuda)"
    return f"{a}.dtype, {a}.is_cuda"


def _value(a: str, pointer: bool, optional: bool, described: bool = False) -> str:
    if not pointer:
        return a
    if described:  # what descriptors.tensor gives: (address, shape, strides); after _key
        return (f"({a}.data_ptr(), {a}.shape, {a}.stride()) if {a}_dt is not None "
                f"else desc_value({a})")  # fmt: skip
    return f"0 if {a} is None else {a}.data_ptr()" if optional else f"{a}.data_ptr()"


def _tuple(items: Sequence[str]) -> str:
    return f"({', '.join(items)},)" if items else "()"


def _generate(source: str, env: dict[str, Any]) -> dict[str, Any]:
    """The functions defined by ``source`` (built from integers and fixed names only)."""
    namespace = dict(env)
    code = _code.get(source)  # launchers of one ABI share it: compiled once
    if code is None:
        if len(_code) >= _MAX_CODE:
            _code.clear()
        code = _code[source] = compile(source, "<aotc fastcall>", "exec")
    exec(code, namespace)
    return namespace


_code: dict[str, CodeType] = {}
_MAX_CODE = 4096  # then start again (a service opening bundle after bundle)


def _plain_types(param: Param, grid_names: Collection[str]) -> tuple[type, ...]:
    """Scalar types the fast path passes on unconverted: they pack the same bytes, pick
    the same bucket and variant, and give the same grid as the checked path's values."""
    if param.type.startswith("fp") or param.type == "bf16":
        # An int packs as the same float; only a grid reading it would see the difference.
        return (float,) if param.name in grid_names else (float, int)
    return (int, bool)
