"""The validator every recipe table is read through, and the helpers its messages share.

A ``Validator`` knows the recipe's file; each check takes the key path it reads, so a
failure raises a ``RecipeError`` naming the file, the key and the fix.
"""

from __future__ import annotations

import difflib
import re
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any, NoReturn

from loader.args import INT_RANGES
from loader.expr import Expr, ExprError, parse

from ..errors import RecipeError

# \Z, not $: "$" also matches before a trailing newline, and "name\n" is no name.
NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.+-]*\Z")  # bundle names and versions
IDENT = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*\Z")  # kernels, dtype variables, dimensions
# Expressions longer or deeper than the loader's expression language takes
# (loader/expr.py: MAX_LENGTH, MAX_DEPTH) are refused there, with the reason.


class Validator:
    def __init__(self, path: Path):
        self.path = path

    def fail(self, key: str, problem: str) -> NoReturn:
        raise RecipeError(self.path, key, problem)

    def keys(self, table: Mapping[str, Any], allowed: Sequence[str], where: str) -> None:
        for key in table:
            if key not in allowed:
                close = difflib.get_close_matches(key, allowed, n=1, cutoff=0.6)
                hint = f"did you mean {close[0]!r}?" if close else f"allowed: {', '.join(allowed)}"
                self.fail(join(where, key), f"unknown key; {hint}")

    def table(
        self, t: Mapping[str, Any], key: str, where: str, required: bool = False
    ) -> dict[str, Any]:
        if key not in t:
            if required:
                self.fail(join(where, key), f"missing; add a [{key}] table")
            return {}
        value = t[key]
        if not isinstance(value, dict):
            self.fail(join(where, key), f"must be a table, got {tname(value)}")
        return value

    def string(self, t: Mapping[str, Any], key: str, where: str, required: bool = True) -> str:
        if key not in t:
            if required:
                self.fail(join(where, key), "missing")
            return ""
        value = t[key]
        if not isinstance(value, str) or not value.strip():
            self.fail(join(where, key), f"must be a non-empty string, got {show(value)}")
        return str(value).strip()

    def name(self, t: Mapping[str, Any], key: str, where: str) -> str:
        value = self.string(t, key, where)
        if not NAME.match(value):
            self.fail(
                join(where, key),
                f"{show(value)} must start with a letter or digit and use only letters, digits "
                "and . _ + -",
            )
        return value

    def choices(
        self, raw: Any, key: str, allowed: Sequence[str], names: str, one: str, example: str
    ) -> list[str]:
        """A list of strings, each one of ``allowed``: ``names`` says what the list holds
        ("dimension names"), ``one`` what each must be ("a dimension")."""
        if not isinstance(raw, list) or not all(isinstance(x, str) for x in raw):
            self.fail(key, f"must be a list of {names}, e.g. {example}")
        known = set(allowed)
        for x in raw:
            if x not in known:
                self.fail(key, f"{show(x)} is not {one}; choose from {list(allowed)}")
        return raw

    def bounds(self, raw: Any, key: str, ptype: str = "", why: str = "") -> tuple[int, ...]:
        """A list of bucket upper bounds: positive, strictly increasing, and each a value of
        the integer type ``ptype`` where one is given (``why`` says whose type it is)."""
        if not isinstance(raw, list) or not raw:
            self.fail(key, "must be a non-empty list of upper bounds, e.g. [1, 16, 128, 1024]")
        ints = [self.int_value(b, key, minimum=1) for b in raw]
        if ptype:
            for b in ints:
                self.fits(b, key, ptype, why)
        if ints != sorted(set(ints)):
            self.fail(key, f"{show(ints)} must be strictly increasing")
        return tuple(ints)

    def expr(self, raw: Any, key: str, names: Iterable[str], hint: str) -> Expr:
        """An integer expression that reads only ``names`` (``hint`` says which they are)."""
        e = self.parse_expr(raw, key)
        unknown = e.names - set(names)
        if unknown:
            self.fail(key, f"unknown name(s) {sorted_names(unknown)}; {hint}")
        return e

    def parse_expr(self, raw: Any, key: str, predicate: bool = False) -> Expr:
        """``raw`` (a string or an integer) parsed as an expression of the loader's language."""
        if isinstance(raw, bool) or not isinstance(raw, str | int):
            self.fail(key, f"must be an expression (a string or an integer), got {show(raw)}")
        text = str(raw)
        try:
            return parse(text, predicate=predicate)
        except ExprError as exc:
            self.fail(key, str(exc))
        except (ValueError, RecursionError, MemoryError):
            # Null bytes, or nesting deeper than Python's parser takes.
            self.fail(key, f"{show(text)} is not a valid expression (too deeply nested)")

    def int_value(self, value: Any, key: str, minimum: int | None = None) -> int:
        if isinstance(value, bool) or not isinstance(value, int):
            self.fail(key, f"must be an integer, got {show(value)}")
        if minimum is not None and value < minimum:
            self.fail(key, f"{show(value)} is below the minimum {minimum}")
        return int(value)

    def fits(self, value: int, key: str, ptype: str, why: str) -> int:
        """``value`` is one of the integer type ``ptype``'s (``why``: whose type it is)."""
        lo, hi = INT_RANGES[ptype]
        if not lo <= value <= hi:
            self.fail(key, f"{show(value)} does not fit in {ptype} ({why}): use a value from "
                      f"{lo} to {hi}")  # fmt: skip
        return value

    def source(self, text: str, key: str, root: Path) -> tuple[Path, str]:
        """A ``path/to/file.py:function`` reference, relative to the recipe's folder."""
        file, sep, func = text.rpartition(":")
        if not sep or not file or not IDENT.match(func):
            self.fail(key, f"{show(text)} must be 'path/to/file.py:function_name'")
        try:
            path = (root / file).resolve()
            found = path.is_file()
        except (OSError, ValueError):  # a name too long, or with a NUL
            found = False
        if not found:
            self.fail(key, f"{file} does not exist (paths are relative to the recipe's folder)")
        return path, func

    def optional_ref(self, k: Mapping[str, Any], field: str, w: str, root: Path) -> str | None:
        """An optional ``file.py:function`` reference, kept as written."""
        if field not in k:
            return None
        text = self.string(k, field, w)
        self.source(text, f"{w}.{field}", root)
        return text


def join(where: str, key: str) -> str:
    if not where:
        return key
    return f"{where}.{key}"


def tname(value: Any) -> str:
    names: dict[type, str] = {dict: "a table", list: "an array", str: "a string"}
    return names.get(type(value), type(value).__name__)


def sorted_names(items: Iterable[str]) -> str:
    return ", ".join(sorted(items))


def show(value: Any, limit: int = 80) -> str:
    """``repr(value)``, cut short: a message must stay readable whatever the recipe holds."""
    try:
        text = repr(value)
    except (RecursionError, ValueError):  # deep nesting; an integer of over 4300 digits
        return f"<{tname(value)} too large to show>"
    return text if len(text) <= limit else f"{text[: limit - 5]}…{text[-4:]}"
