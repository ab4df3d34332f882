"""Placeholders that ``aotc init`` leaves in a draft recipe: strings starting with
``TODO``, where only the author knows the value (the grid, ``inputs``, representative
sizes). They are refused before the kernel tables are read, naming the key and what it
needs, rather than failing later as a path that does not exist or an unknown name.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import Any

from .validate import IDENT, Validator, show

PLACEHOLDER = "TODO"
_MARKED = re.compile(rf"\s*{PLACEHOLDER}\b")  # "TODO", "TODO.py:f"; not "TODO_X"
_SHOWN = 6  # the other placeholders named in one message

# What to fill in, by the kernel key holding the placeholder ({n}: the entry's name).
_HINTS = {
    "grid": "fill in the grid: the host wrapper's launch grid (the kernel object does not "
    'hold it), 1 to 3 expressions, e.g. "cdiv(M, BLOCK_M)"',
    "inputs": 'fill in inputs: "file.py:function", where function(sizes, dtypes, '
    'device="cuda", config=None) returns the kernel\'s runtime arguments in order (their '
    "types are inferred from them)",
    "reference": 'fill in reference: "file.py:function" returning the expected outputs by '
    "name, in float64; or remove the line (the kernel is then tuned but not verified)",
    "sizes": "fill in sizes.{n}: a representative value of {n} (an integer), the values one "
    "bundle serves (a list) or an expression of bucket keys and meta-parameters",
    "derived": "fill in derived.{n}: an expression computing {n} per call from arguments and "
    'meta-parameters, e.g. "next_power_of_2(n_cols)"; or give {n} in fixed',
    "fixed": "fill in fixed.{n}: the value the kernel is launched with",
    "space": "fill in space.{n}: a list of values to search; or move {n} to fixed (one "
    "value) or derived (computed per call)",
    "call": 'fill in call.{n}: "shape(ARG, DIM)" (a dimension of an argument), "stride(ARG, '
    'DIM)" (its stride, in elements) or "keyword" (the caller passes it)',
}


def check(v: Validator, kernels: Any) -> None:
    """Refuse the first placeholder in the ``[[kernel]]`` tables, naming the others."""
    if not isinstance(kernels, list):
        return
    found = [spot for i, k in enumerate(kernels) for spot in _placeholders(i, k)]
    if not found:
        return
    (key, path, value), rest = found[0], found[1:]
    hint = _HINTS.get(path[0], "fill in this value") if path else "fill in this value"
    hint = hint.format(n=path[1] if len(path) > 1 else "")
    more = ""
    if rest:
        names = ", ".join(k.removeprefix("[[kernel]] ") for k, _, _ in rest[:_SHOWN])
        more = f" (also to fill in: {names}{', …' if len(rest) > _SHOWN else ''})"
    v.fail(key, f"{show(value)} is a placeholder left by aotc init; {hint}{more}")


def _placeholders(index: int, table: Any) -> Iterator[tuple[str, tuple[str, ...], str]]:
    """(key path for the message, the keys under the kernel table, the value) of each
    placeholder in one kernel table, in document order."""
    if not isinstance(table, dict):
        return
    name = table.get("name")
    where = f"[[kernel]] {name}" if isinstance(name, str) and IDENT.match(name) else (
        f"[[kernel]] #{index + 1}")  # fmt: skip
    # The recipe's nesting is bounded before this runs (document.MAX_DEPTH).
    stack: list[tuple[tuple[str, ...], Any]] = [((), table)]
    while stack:
        path, value = stack.pop()
        if isinstance(value, dict):
            stack.extend(((*path, str(k)), x) for k, x in reversed(value.items()))
        elif isinstance(value, list):
            stack.extend(((*path, f"[{i}]"), x) for i, x in reversed(list(enumerate(value))))
        elif isinstance(value, str) and _MARKED.match(value):
            yield where + _dotted(path), path, value


def _dotted(path: tuple[str, ...]) -> str:
    return "".join(p if p.startswith("[") else f".{p}" for p in path)
