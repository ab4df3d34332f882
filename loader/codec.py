"""One generic codec between frozen dataclasses and JSON values, driven by type annotations.

``encode(obj)`` turns a dataclass into the JSON value its fields describe; ``decode(cls,
raw, path)`` checks a parsed JSON value against ``cls``'s annotations and builds it, or
raises ``DecodeError`` naming the field path (``kernels[0].instances[1].abi[3]``) and
what was wrong. Supported annotations: ``str``, ``int`` (``Annotated[int, Range(lo, hi)]``
for a range; plain ``int`` is a signed 64-bit value; a bool is never an int), ``float``
(finite; an int stays an int), ``bool``, ``Any`` (a JSON value), ``Literal[...]``,
``tuple[X, ...]``, ``tuple[X, Y]``, ``Mapping[str, X]``, unions such as ``X | None``, and
nested dataclasses.

How a field is written is declared once, on the field (``dataclasses.field(metadata=
spec(...))``):
- ``key``: the JSON key, or a path of keys (``("bundle", "name")``); default: the name.
- ``omit_default``: leave the key out when the value equals the field's default.
- ``listed_by``: a ``Mapping[str, X]`` stored as a list of X sorted by key, each X
  holding its own key in the named field (``variants``, keyed by ``id``).
- ``named_by``: a ``Mapping[str, X]`` stored as a JSON object whose keys fill X's named
  field, which X itself does not store (``stored=False`` on that field).
- ``note``: a hint added to a type error (what the value means, how to fix it).

A missing key takes the field's default (compatibility defaults live there, once), or None
for an optional field; otherwise it is an error. Keys the class does not declare are
ignored, so newer writers can add fields. After a dataclass is built, its ``_validate()``
method (if any) runs: semantic checks that span fields raise ``ValueError`` with a message
relative to the object, and the codec adds the path.

Each annotation is compiled once into a decoder function (``_decoder``), and a field's
path is carried as nested ``(parent, key)`` tuples that are spelled out only in an error:
decoding costs little more than the checks themselves.
"""

from __future__ import annotations

import dataclasses
import json
import math
import types
import typing
from collections.abc import Callable, Mapping
from functools import cache
from typing import Annotated, Any, Literal, TypeVar, Union, get_args, get_origin

from . import hints

T = TypeVar("T")

# Nesting of free-form (``Any``) JSON values; the archive refuses deeper documents anyway.
MAX_DEPTH = 64
_I64 = (-(2**63), 2**63 - 1)
# A path: the root's name, or (parent path, key) with key a field name (or a relative path
# such as "grid[0]"), a list index, or a 1-tuple holding a mapping key.
Path = Any
Decoder = Callable[[Any, Path], Any]
# A dataclass's decoder also takes field values given by its container (``named_by``).
ClassDecoder = Callable[[Any, Path, Mapping[str, Any] | None], Any]


def render(path: Path) -> str:
    """``kernels[0].instances[1].variants["c0-g"].abi[3]`` for a path."""
    keys = []
    while isinstance(path, tuple):
        path, key = path
        keys.append(key)
    out: str = path
    for key in reversed(keys):
        if isinstance(key, int):
            out += f"[{key}]"
        elif isinstance(key, tuple):
            out += f"[{_quote(key[0])}]"
        else:
            out += key if not out or key.startswith("[") else f".{key}"
    return out


class DecodeError(ValueError):
    """A value that does not match its annotation. ``path`` names the field; ``problem``
    says what is wrong (starting with a space when it reads on from the path)."""

    def __init__(self, path: Path, problem: str):
        self.at = path
        self.path = render(path)
        self.problem = problem
        if not self.path:
            text = problem.lstrip()
        elif problem.startswith(" "):
            text = f"{self.path}{problem}"
        else:
            text = f"{self.path}: {problem}"
        super().__init__(text)


@dataclasses.dataclass(frozen=True)
class Range:
    """The inclusive bounds of an ``Annotated[int, Range(lo, hi)]`` field."""

    lo: int
    hi: int


def spec(
    *,
    key: str | tuple[str, ...] | None = None,
    omit_default: bool = False,
    listed_by: str | None = None,
    named_by: str | None = None,
    stored: bool = True,
    note: str = "",
) -> dict[str, Any]:
    """Field metadata for the codec (see the module docstring)."""
    out: dict[str, Any] = {"omit_default": omit_default, "stored": stored, "note": note}
    if key is not None:
        out["key"] = (key,) if isinstance(key, str) else key
    if listed_by is not None:
        out["listed_by"] = listed_by
    if named_by is not None:
        out["named_by"] = named_by
    return out


@dataclasses.dataclass(frozen=True)
class _Field:
    name: str
    key: tuple[str, ...]
    cls: type  # the dataclass: its annotation is resolved on first use (``hint``)
    default: Any  # dataclasses.MISSING when required (or made by ``factory``)
    factory: Any  # the field's default_factory, or dataclasses.MISSING
    omit_default: bool
    listed_by: str | None
    named_by: str | None
    stored: bool
    note: str

    @property
    def hint(self) -> Any:  # the type, evaluated when first needed (loader/hints.py: why)
        return hints.resolve(self.cls, self.name)


@cache
def _fields(cls: type) -> tuple[_Field, ...]:
    out = []
    for f in dataclasses.fields(cls):
        meta = f.metadata
        default: Any = f.default
        if f.default_factory is not dataclasses.MISSING:
            default = f.default_factory()  # to compare with, for omit_default
        field = _Field(
            f.name, meta.get("key", (f.name,)), cls, default, f.default_factory,
            meta.get("omit_default", False), meta.get("listed_by"), meta.get("named_by"),
            meta.get("stored", True), meta.get("note", ""),
        )  # fmt: skip
        out.append(field)
    return tuple(out)


# --- encoding ------------------------------------------------------------------------------


def encode(value: Any) -> Any:
    """The JSON value of ``value`` (a dataclass, or anything its fields hold)."""
    kind = type(value)
    if kind is str or kind is int or kind is float or kind is bool or value is None:
        return value
    if kind is dict:
        return {k: encode(v) for k, v in value.items()}
    if kind is tuple or kind is list:
        return [encode(v) for v in value]
    if hasattr(kind, "__dataclass_fields__"):
        cls: Any = kind
        out: dict[str, Any] = {}
        for f in _fields(cls):
            v = getattr(value, f.name)
            if not f.stored or (f.omit_default and v == f.default):
                continue
            data = [encode(v[k]) for k in sorted(v)] if f.listed_by is not None else encode(v)
            node = out
            for k in f.key[:-1]:
                node = node.setdefault(k, {})
            node[f.key[-1]] = data
        return out
    if isinstance(value, str | int | float | type(None)):
        return value
    if isinstance(value, tuple | list):
        return [encode(v) for v in value]
    if isinstance(value, Mapping):
        return {k: encode(v) for k, v in value.items()}
    return value


# --- decoding ------------------------------------------------------------------------------


def decode(cls: type[T], raw: Any, path: str) -> T:
    """``raw`` (parsed JSON) as a ``cls``; DecodeError naming the field path if it is not."""
    tp: Any = cls
    out: T = _decoder(tp)(raw, path)
    return out


def _describe(tp: Any) -> str:
    origin, args = get_origin(tp), get_args(tp)
    if origin is Annotated:
        r = next((a for a in args[1:] if isinstance(a, Range)), None)
        return f"an integer from {r.lo} to {r.hi}" if r else _describe(args[0])
    if origin in (Union, types.UnionType):
        return " or ".join(_describe(a) for a in args)
    if origin is Literal:
        return "one of " + ", ".join(repr(a) for a in args)
    if origin is tuple:
        return "a list"
    if origin is not None and issubclass(origin, Mapping):
        return "an object"
    names = {str: "a string", int: "an integer", float: "a number", bool: "true or false",
             dict: "an object", tuple: "a list"}  # fmt: skip
    if tp in names:
        return names[tp]
    if tp is type(None):
        return "null"
    if dataclasses.is_dataclass(tp):
        return "an object"
    return "a JSON value"


def _got(raw: Any) -> str:
    text = repr(raw)
    return f"{type(raw).__name__} {text[:40] + '…' if len(text) > 40 else text}"


def _fail(tp: Any, raw: Any, path: Path, note: str = "") -> DecodeError:
    hint = f" ({note})" if note else ""
    return DecodeError(path, f" must be {_describe(tp)}{hint}, got {_got(raw)}")


def _quote(key: str) -> str:
    text = key if len(key) <= 40 else key[:40] + "…"
    return '"' + text.replace("\\", "\\\\").replace('"', '\\"') + '"'


def _encodable(text: str) -> bool:
    """No lone surrogates (JSON's ``\\ud800`` escapes), which no C string can carry."""
    try:
        text.encode()
    except UnicodeEncodeError:
        return False
    return True


@cache
def _decoder(tp: Any) -> Decoder:
    """The decoder of one annotation, built once."""
    origin = get_origin(tp)
    if origin is Annotated:
        base, *extras = get_args(tp)
        r = next((a for a in extras if isinstance(a, Range)), None)
        return _int(r.lo, r.hi, tp) if base is int and r is not None else _decoder(base)
    if origin in (Union, types.UnionType):
        return _union(tp)
    if origin is Literal:
        return _literal(tp)
    if origin is tuple:
        return _tuple(tp)
    if origin is not None and issubclass(origin, Mapping):
        return _mapping(tp)
    if tp is Any:
        return _any
    if isinstance(tp, type) and dataclasses.is_dataclass(tp):
        return typing.cast(Decoder, _dataclass(tp))
    return _scalar(tp)


def _scalar(tp: Any) -> Decoder:
    if tp is int:
        return _int(*_I64, tp)
    checks: dict[Any, Callable[[Any], bool]] = {
        bool: lambda raw: raw is True or raw is False,
        # an int stays an int, so a float field round-trips "2" and "2.0" as written
        float: lambda raw: (
            (type(raw) is int and _I64[0] <= raw <= _I64[1])
            or (type(raw) is float and math.isfinite(raw))
        ),
        str: lambda raw: type(raw) is str and (raw.isascii() or _encodable(raw)),
        type(None): lambda raw: raw is None,
    }
    if tp not in checks:
        raise TypeError(f"codec: unsupported annotation {tp!r}")
    ok = checks[tp]

    def scalar(raw: Any, path: Path) -> Any:
        if not ok(raw):
            raise _fail(tp, raw, path)
        return raw

    return scalar


def _int(lo: int, hi: int, tp: Any) -> Decoder:
    def integer(raw: Any, path: Path) -> Any:
        if type(raw) is not int or not lo <= raw <= hi:
            raise _fail(tp, raw, path)
        return raw

    return integer


def _union(tp: Any) -> Decoder:
    members = [_decoder(a) for a in get_args(tp)]

    def union(raw: Any, path: Path) -> Any:
        for member in members:
            try:
                return member(raw, path)
            except DecodeError as exc:
                if exc.at is not path:  # the right shape, wrong inside: report that
                    raise
        raise _fail(tp, raw, path)

    return union


def _literal(tp: Any) -> Decoder:
    allowed = get_args(tp)

    def literal(raw: Any, path: Path) -> Any:
        if not any(raw == a and type(raw) is type(a) for a in allowed):
            raise _fail(tp, raw, path)
        return raw

    return literal


def _tuple(tp: Any) -> Decoder:
    args = get_args(tp)
    if len(args) == 2 and args[1] is Ellipsis:
        item = _decoder(args[0])

        def sequence(raw: Any, path: Path) -> Any:
            if type(raw) is not list:
                raise _fail(tp, raw, path)
            return tuple([item(x, (path, i)) for i, x in enumerate(raw)])

        return sequence
    items = [_decoder(a) for a in args]

    def fixed(raw: Any, path: Path) -> Any:
        if type(raw) is not list:
            raise _fail(tp, raw, path)
        if len(raw) != len(items):
            raise DecodeError(path, f" must be a list of {len(items)}, got {len(raw)} items")
        return tuple([d(x, (path, i)) for i, (d, x) in enumerate(zip(items, raw, strict=True))])

    return fixed


def _object(raw: Any, path: Path, tp: Any = dict) -> dict[str, Any]:
    """A JSON object, its keys valid strings."""
    if type(raw) is not dict:
        raise _fail(tp, raw, path)
    for k in raw:
        if type(k) is not str or not (k.isascii() or _encodable(k)):
            raise DecodeError(path, f" has the key {_got(k)}; keys must be strings")
    return raw


def _mapping(tp: Any) -> Decoder:
    value = _decoder(get_args(tp)[1])

    def mapping(raw: Any, path: Path) -> Any:
        return {k: value(v, (path, (k,))) for k, v in _object(raw, path, tp).items()}

    return mapping


def _any(raw: Any, path: Path) -> Any:
    check_json(raw, path)
    return raw


@cache
def _dataclass(cls: type) -> ClassDecoder:
    # Per field: name, keys to its object, key, path label, field, decoder (built on first use)
    plan: list[list[Any]] = [
        [f.name, f.key[:-1], f.key[-1], ".".join(f.key), f, None] for f in _fields(cls)
    ]
    validate = getattr(cls, "_validate", None)

    def dataclass(raw: Any, path: Path, given: Mapping[str, Any] | None = None) -> Any:
        if type(raw) is not dict:
            raise _fail(cls, raw, path)
        values: dict[str, Any] = dict(given) if given else {}
        for entry in plan:
            name, parents, key, label, f, dec = entry
            if name in values:
                continue
            node: Any = raw
            for k in parents:
                node = node.get(k) if type(node) is dict else None
            if type(node) is dict and key in node:
                if dec is None:
                    dec = entry[5] = _field_decoder(f)
                values[name] = dec(node[key], (path, label))
            else:
                values[name] = _missing(f, (path, label))
        obj = cls(**values)
        if validate is not None:
            _validated(obj, validate, path)
        return obj

    return dataclass


def _validated(obj: Any, validate: Callable[[Any], None], path: Path) -> None:
    try:
        validate(obj)
    except DecodeError as exc:
        raise DecodeError((path, exc.path) if exc.path else path, exc.problem) from None
    except ValueError as exc:
        raise DecodeError(path, str(exc)) from None


def _field_decoder(f: _Field) -> Decoder:
    if f.listed_by is not None:
        return _listed(f, f.listed_by)
    if f.named_by is not None:
        return _named(f, f.named_by)
    dec = _decoder(f.hint)
    if not f.note:
        return dec

    def noted(raw: Any, path: Path) -> Any:
        try:
            return dec(raw, path)
        except DecodeError as exc:
            if exc.at is path:  # this value, not one inside it: say what it means
                raise _fail(f.hint, raw, path, f.note) from None
            raise

    return noted


def _missing(f: _Field, at: Path) -> Any:
    if f.factory is not dataclasses.MISSING:
        return f.factory()
    if f.default is not dataclasses.MISSING:
        return f.default
    if type(None) in get_args(f.hint):
        return None
    raise DecodeError(at, " is missing")


def _item_type(f: _Field) -> Any:
    tp = f.hint
    while get_origin(tp) is Annotated:
        tp = get_args(tp)[0]
    return get_args(tp)[1]


def _listed(f: _Field, key: str) -> Decoder:
    """A mapping stored as a list of its values, each holding its own ``key``."""
    item = _decoder(_item_type(f))

    def listed(raw: Any, path: Path) -> Any:
        if type(raw) is not list:
            raise _fail(tuple, raw, path)
        out: dict[str, Any] = {}
        for i, x in enumerate(raw):
            name = x.get(key) if type(x) is dict else None
            at = (path, (name,)) if type(name) is str else (path, i)
            value = item(x, at)
            k = getattr(value, key)
            if k in out:
                raise DecodeError(at, f" repeats {key} {k!r}")
            out[k] = value
        return out

    return listed


def _named(f: _Field, key: str) -> Decoder:
    """A mapping stored as an object whose keys fill each value's ``key`` field."""
    item = _dataclass(_item_type(f))

    def named(raw: Any, path: Path) -> Any:
        return {k: item(v, (path, (k,)), {key: k}) for k, v in _object(raw, path).items()}

    return named


def too_deep(raw: Any, limit: int) -> bool:
    """Whether lists and objects nest more than ``limit`` levels in ``raw``. Iterative, so
    that a value too deep to walk recursively is measured too."""
    level, depth = [raw], 0
    while level:
        inner: list[Any] = []
        for x in level:
            if type(x) is dict:
                inner.extend(x.values())
            elif type(x) is list:
                inner.extend(x)
            else:
                continue
            if depth >= limit:
                return True
        level, depth = inner, depth + 1
    return False


def check_json(raw: Any, path: Path, limit: int | None = None) -> None:
    """A free-form value must be plain JSON (finite numbers, string keys) nested at most
    ``limit`` (default MAX_DEPTH) levels."""
    limit = MAX_DEPTH if limit is None else limit
    if too_deep(raw, limit):
        raise DecodeError(path, f" is nested more than {limit} levels deep")
    stack = [raw]
    while stack:
        x = stack.pop()
        if isinstance(x, dict):
            if not all(isinstance(k, str) and _encodable(k) for k in x):
                raise DecodeError(path, " must be a JSON object with string keys")
            stack.extend(x.values())
        elif isinstance(x, list):
            stack.extend(x)
        elif isinstance(x, float):
            if not math.isfinite(x):
                raise DecodeError(path, f" holds a non-finite number ({x})")
        elif isinstance(x, str):
            if not _encodable(x):
                raise DecodeError(path, " holds a string that is not valid Unicode")
        elif not (x is None or isinstance(x, bool | int)):
            raise DecodeError(path, f" holds {type(x).__name__}, not a JSON value")


def canonical_json(obj: Any) -> bytes:
    """The one byte form of a JSON value: sorted keys, no spaces, ASCII (the manifest's and
    the signature trailer's)."""
    return json.dumps(obj, sort_keys=True, separators=(",", ":"), ensure_ascii=True).encode()


def no_constant(name: str) -> Any:
    """``json.loads``'s ``parse_constant``: NaN and Infinity are not JSON numbers."""
    raise ValueError(f"{name} is not a JSON number")
