"""A kernel config: the values of its searched meta-parameters and its launch options.

Constexpr values are what Triton accepts: integers, floats, booleans, strings, ``None``,
and ``tl`` dtypes, written as ``"tl.bfloat16"`` (the loader and the manifest never hold a
Triton object; the compile worker turns the name back into the dtype).
"""

from __future__ import annotations

import functools
import hashlib
import json
from collections.abc import Sequence
from dataclasses import dataclass
from functools import cached_property
from typing import Any

Constexpr = int | float | bool | str | None

DTYPE_PREFIX = "tl."


def sort_key(value: Constexpr) -> tuple[int, Any]:
    """Orders values of mixed kinds (None first, numbers, then strings) without comparing
    a string to an integer."""
    if value is None:
        return (0, 0)
    if isinstance(value, bool | int | float):
        return (1, value)
    return (2, value)


@functools.total_ordering
@dataclass(frozen=True)
class Config:
    """Values for the searched meta-parameters plus the launch options."""

    meta: tuple[tuple[str, Constexpr], ...]
    num_warps: int
    num_stages: int
    num_ctas: int = 1
    maxnreg: int | None = None

    @cached_property
    def id(self) -> str:
        parts: list[Any] = [[list(m) for m in self.meta], self.num_warps, self.num_stages]
        if self.num_ctas != 1 or self.maxnreg is not None:
            parts += [self.num_ctas, self.maxnreg]
        text = json.dumps(parts)
        return hashlib.sha256(text.encode()).hexdigest()[:12]

    def values(self) -> dict[str, Constexpr]:
        out: dict[str, Constexpr] = {**dict(self.meta), **self.launch()}
        return out

    def sets(self, values: Sequence[tuple[str, Any]]) -> bool:
        """Whether this config sets every one of ``values`` (a recipe's ``tune.first``);
        ``num_ctas = 1`` matches the default."""
        mine: dict[str, Any] = {"num_ctas": self.num_ctas, **self.values()}
        return all(
            n in mine and mine[n] == x and isinstance(mine[n], bool) == isinstance(x, bool)
            for n, x in values
        )

    def launch(self) -> dict[str, int]:
        """The launch options, the non-default ones only beyond warps and stages."""
        out = {"num_warps": self.num_warps, "num_stages": self.num_stages}
        if self.num_ctas != 1:
            out["num_ctas"] = self.num_ctas
        if self.maxnreg is not None:
            out["maxnreg"] = self.maxnreg
        return out

    @property
    def label(self) -> str:
        parts = [f"{k}={_show(v)}" for k, v in self.meta]
        parts += [f"warps={self.num_warps}", f"stages={self.num_stages}"]
        if self.num_ctas != 1:
            parts.append(f"ctas={self.num_ctas}")
        if self.maxnreg is not None:
            parts.append(f"maxnreg={self.maxnreg}")
        return " ".join(parts)

    def _key(self) -> tuple[Any, ...]:
        meta = tuple((k, sort_key(v)) for k, v in self.meta)
        return (meta, self.num_warps, self.num_stages, self.num_ctas, sort_key(self.maxnreg))

    def __lt__(self, other: object) -> bool:
        if not isinstance(other, Config):
            return NotImplemented
        return self._key() < other._key()


def _show(value: Constexpr) -> str:
    return repr(value) if isinstance(value, str) and not is_dtype(value) else str(value)


def is_dtype(value: Constexpr) -> bool:
    return isinstance(value, str) and value.startswith(DTYPE_PREFIX)


def triton_value(value: Constexpr) -> Any:
    """A recipe constexpr as Triton takes it (a ``"tl.bfloat16"`` name becomes the dtype)."""
    if isinstance(value, str) and value.startswith(DTYPE_PREFIX):
        import triton.language as tl

        return getattr(tl, value[len(DTYPE_PREFIX) :])
    return value
