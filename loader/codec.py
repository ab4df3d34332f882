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
"""

from __future__ import annotations

import dataclasses
import math
import types
import typing
from collections.abc import Mapping
from functools import cache
from typing import Annotated, Any, Literal, TypeVar, Union, get_args, get_origin

T = TypeVar("T")

# Nesting of free-form (``Any``) JSON values; the archive refuses deeper documents anyway.
MAX_DEPTH = 64
_I64 = (-(2**63), 2**63 - 1)


class DecodeError(ValueError):
    """A value that does not match its annotation. ``path`` names the field."""

    def __init__(self, path: str, problem: str):
        self.path = path
        self.problem = problem
        if not path:
            text = problem.lstrip()
        else:
            text = f"{path}{problem}" if problem.startswith(" ") else f"{path}: {problem}"
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
    type: Any
    default: Any  # dataclasses.MISSING when required (or made by ``factory``)
    factory: Any  # the field's default_factory, or dataclasses.MISSING
    omit_default: bool
    listed_by: str | None
    named_by: str | None
    stored: bool
    note: str


@cache
def _fields(cls: type) -> tuple[_Field, ...]:
    hints = typing.get_type_hints(cls, include_extras=True)
    out = []
    for f in dataclasses.fields(cls):
        meta = f.metadata
        default: Any = f.default
        if f.default_factory is not dataclasses.MISSING:
            default = f.default_factory()  # to compare with, for omit_default
        field = _Field(
            f.name, meta.get("key", (f.name,)), hints[f.name], default, f.default_factory,
            meta.get("omit_default", False), meta.get("listed_by"), meta.get("named_by"),
            meta.get("stored", True), meta.get("note", ""),
        )  # fmt: skip
        out.append(field)
    return tuple(out)


# --- encoding ------------------------------------------------------------------------------


def encode(value: Any) -> Any:
    """The JSON value of ``value`` (a dataclass, or anything its fields hold)."""
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        out: dict[str, Any] = {}
        for f in _fields(type(value)):
            v = getattr(value, f.name)
            if not f.stored or (f.omit_default and v == f.default):
                continue
            if f.listed_by is not None:
                data: Any = [encode(v[k]) for k in sorted(v)]
            else:
                data = encode(v)
            node = out
            for k in f.key[:-1]:
                node = node.setdefault(k, {})
            node[f.key[-1]] = data
        return out
    if isinstance(value, Mapping):
        return {k: encode(v) for k, v in value.items()}
    if isinstance(value, tuple | list):
        return [encode(v) for v in value]
    return value


# --- decoding ------------------------------------------------------------------------------


def decode(cls: type[T], raw: Any, path: str) -> T:
    """``raw`` (parsed JSON) as a ``cls``; DecodeError naming the field path if it is not."""
    return _dataclass(cls, raw, path, {})  # type: ignore[no-any-return]


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


def _fail(tp: Any, raw: Any, path: str, note: str = "") -> DecodeError:
    hint = f" ({note})" if note else ""
    return DecodeError(path, f" must be {_describe(tp)}{hint}, got {_got(raw)}")


def _value(tp: Any, raw: Any, path: str, note: str = "") -> Any:
    origin = get_origin(tp)
    if origin is Annotated:
        return _annotated(tp, raw, path, note)
    if origin is not None:
        return _generic(tp, origin, raw, path, note)
    if tp is Any:
        check_json(raw, path)
        return raw
    if dataclasses.is_dataclass(tp):
        return _dataclass(tp, raw, path, {})  # type: ignore[arg-type]
    return _scalar(tp, raw, path, note)


def _scalar(tp: Any, raw: Any, path: str, note: str) -> Any:
    if tp is bool:
        ok = isinstance(raw, bool)
    elif tp is int:
        return _annotated(Annotated[int, Range(*_I64)], raw, path, note)
    elif tp is float:
        ok = isinstance(raw, int | float) and not isinstance(raw, bool) and math.isfinite(raw)
    elif tp is str:
        ok = isinstance(raw, str) and _encodable(raw)
    elif tp is type(None):
        ok = raw is None
    else:
        raise TypeError(f"codec: unsupported annotation {tp!r} at {path}")
    if not ok:
        raise _fail(tp, raw, path, note)
    return raw


def _encodable(text: str) -> bool:
    """No lone surrogates (JSON's ``\\ud800`` escapes), which no C string can carry."""
    try:
        text.encode()
    except UnicodeEncodeError:
        return False
    return True


def _annotated(tp: Any, raw: Any, path: str, note: str) -> Any:
    base, *extras = get_args(tp)
    r = next((a for a in extras if isinstance(a, Range)), None)
    if base is not int or r is None:
        return _value(base, raw, path, note)
    if not isinstance(raw, int) or isinstance(raw, bool) or not r.lo <= raw <= r.hi:
        raise _fail(tp, raw, path, note)
    return raw


def _generic(tp: Any, origin: Any, raw: Any, path: str, note: str) -> Any:
    args = get_args(tp)
    if origin in (Union, types.UnionType):
        for member in args:
            try:
                return _value(member, raw, path)
            except DecodeError as exc:
                if exc.path != path:  # the right shape, wrong inside: report that
                    raise
        raise _fail(tp, raw, path, note)
    if origin is Literal:
        if not any(raw == a and type(raw) is type(a) for a in args):
            raise _fail(tp, raw, path, note)
        return raw
    if origin is tuple:
        if not isinstance(raw, list):
            raise _fail(tp, raw, path, note)
        if len(args) == 2 and args[1] is Ellipsis:
            return tuple(_value(args[0], x, f"{path}[{i}]") for i, x in enumerate(raw))
        if len(raw) != len(args):
            raise DecodeError(path, f" must be a list of {len(args)}, got {len(raw)} items")
        pairs = enumerate(zip(args, raw, strict=True))
        return tuple(_value(a, x, f"{path}[{i}]") for i, (a, x) in pairs)
    if issubclass(origin, Mapping):
        items = _object(raw, path, note)
        return {k: _value(args[1], v, f"{path}[{_quote(k)}]") for k, v in items}
    raise TypeError(f"codec: unsupported annotation {tp!r} at {path}")


def _quote(key: str) -> str:
    text = key if len(key) <= 40 else key[:40] + "…"
    return '"' + text.replace("\\", "\\\\").replace('"', '\\"') + '"'


def _dataclass(cls: type, raw: Any, path: str, given: Mapping[str, Any]) -> Any:
    if not isinstance(raw, dict):
        raise _fail(cls, raw, path)
    values: dict[str, Any] = dict(given)
    for f in _fields(cls):
        if f.name in values:
            continue
        at = ".".join(filter(None, (path, *f.key)))
        node: Any = raw
        for k in f.key[:-1]:
            node = node.get(k) if isinstance(node, dict) else None
        if not isinstance(node, dict) or f.key[-1] not in node:
            values[f.name] = _missing(f, at)
        elif f.listed_by is not None:
            values[f.name] = _listed(f, f.listed_by, node[f.key[-1]], at)
        elif f.named_by is not None:
            values[f.name] = _named(f, f.named_by, node[f.key[-1]], at)
        else:
            values[f.name] = _value(f.type, node[f.key[-1]], at, f.note)
    obj = cls(**values)
    validate = getattr(obj, "_validate", None)
    if validate is not None:
        try:
            validate()
        except DecodeError as exc:
            raise DecodeError(f"{path}.{exc.path}" if path else exc.path, exc.problem) from None
        except ValueError as exc:
            raise DecodeError(path, str(exc)) from None
    return obj


def _missing(f: _Field, at: str) -> Any:
    if f.factory is not dataclasses.MISSING:
        return f.factory()
    if f.default is not dataclasses.MISSING:
        return f.default
    if type(None) in get_args(f.type):
        return None
    raise DecodeError(at, " is missing")


def _item_type(f: _Field) -> Any:
    tp = f.type
    while get_origin(tp) is Annotated:
        tp = get_args(tp)[0]
    return get_args(tp)[1]


def _listed(f: _Field, key: str, raw: Any, at: str) -> dict[str, Any]:
    """A mapping stored as a list of its values, each holding its own ``key``."""
    if not isinstance(raw, list):
        raise _fail(tuple, raw, at, f.note)
    item = _item_type(f)
    out: dict[str, Any] = {}
    for i, x in enumerate(raw):
        name = x.get(key) if isinstance(x, dict) else None
        where = f"{at}[{_quote(name)}]" if isinstance(name, str) else f"{at}[{i}]"
        value = _value(item, x, where)
        k = getattr(value, key)
        if k in out:
            raise DecodeError(where, f" repeats {key} {k!r}")
        out[k] = value
    return out


def _named(f: _Field, key: str, raw: Any, at: str) -> dict[str, Any]:
    """A mapping stored as an object whose keys fill each value's ``key`` field."""
    item = _item_type(f)
    return {k: _dataclass(item, v, f"{at}[{_quote(k)}]", {key: k}) for k, v in _object(raw, at)}


def _object(raw: Any, at: str, note: str = "") -> list[tuple[str, Any]]:
    """A JSON object's items, its keys valid strings."""
    if not isinstance(raw, dict):
        raise _fail(dict, raw, at, note)
    for k in raw:
        if not isinstance(k, str) or not _encodable(k):
            raise DecodeError(at, f" has the key {_got(k)}; keys must be strings")
    return list(raw.items())


def check_json(raw: Any, path: str, limit: int = MAX_DEPTH) -> None:
    """A free-form value must be plain JSON (finite numbers, string keys) nested at most
    ``limit`` levels. Iterative: a value too deep to walk recursively is refused too."""
    stack = [(raw, 0)]
    while stack:
        x, depth = stack.pop()
        if depth > limit:
            raise DecodeError(path, f" is nested more than {limit} levels deep")
        if isinstance(x, dict):
            if not all(isinstance(k, str) and _encodable(k) for k in x):
                raise DecodeError(path, " must be a JSON object with string keys")
            stack.extend((v, depth + 1) for v in x.values())
        elif isinstance(x, list):
            stack.extend((v, depth + 1) for v in x)
        elif isinstance(x, float):
            if not math.isfinite(x):
                raise DecodeError(path, f" holds a non-finite number ({x})")
        elif isinstance(x, str):
            if not _encodable(x):
                raise DecodeError(path, " holds a string that is not valid Unicode")
        elif not (x is None or isinstance(x, bool | int)):
            raise DecodeError(path, f" holds {type(x).__name__}, not a JSON value")
