"""The TOML ``aotc init`` writes: inline values, wrapped comments, and one table's lines
with the keys left to fill ("TODO" placeholders) or to review (``# TODO`` notes)."""

from __future__ import annotations

import json
import re
import textwrap
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from .recipe.placeholders import PLACEHOLDER

WIDTH = 92


def comment(text: str) -> str:
    return textwrap.fill(" ".join(text.split()), WIDTH, initial_indent="# ",
                         subsequent_indent="# ", break_on_hyphens=False)  # fmt: skip


def toml_value(value: Any) -> str:
    """A TOML value, inline."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int | float):
        return repr(value)
    if isinstance(value, str):
        return json.dumps(value, ensure_ascii=False)
    if isinstance(value, Mapping):
        return "{ " + ", ".join(f"{_key(k)} = {toml_value(v)}" for k, v in value.items()) + " }"
    return "[" + ", ".join(toml_value(v) for v in value) + "]"


def _key(key: str) -> str:
    return key if re.fullmatch(r"[A-Za-z0-9_-]+", key) else json.dumps(key)


@dataclass
class Table:
    """One ``[[kernel]]`` table being written: its lines, and the keys to fill or check."""

    lines: list[str] = field(default_factory=list)
    fill: list[str] = field(default_factory=list)
    check: list[str] = field(default_factory=list)

    def comment(self, text: str) -> None:
        self.lines.append(comment(text))

    def key(self, key: str, value: Any, note: str = "", review: bool = False) -> None:
        line = f"{key} = {toml_value(value)}"
        self.lines.append(f"{line}  # TODO: {note}" if review else line)
        if review:
            self.check.append(key)
        self.fill += _placeholders(key, value)


def _placeholders(key: str, value: Any) -> list[str]:
    if isinstance(value, Mapping):
        return [k for n, v in value.items() for k in _placeholders(f"{key}.{n}", v)]
    return [key] if isinstance(value, str) and value.startswith(PLACEHOLDER) else []
