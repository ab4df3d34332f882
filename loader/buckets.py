"""Bucket grids: which bucket a call's sizes fall in, for kernels, pipelines and models.

A grid has dimensions (a kernel's bucket keys, a pipeline's or a model's dims), each with
ascending upper bounds. Buckets are numbered row-major over the dimensions (the last one
varies fastest): the order in which the builder plans them and the manifest stores a
kernel's choices and a model's artifacts. A size falls in the smallest bucket whose bound
is at least the size. What happens to a size that no bucket bound equals, or that is past
the last bound, is the dimension's ``Policy``, and each product has its own
(``kernel_grid``, ``pipeline_grid``, ``model_grid``); the builder takes its grids from the
same functions. Pure: no driver, no I/O.

``warm`` is the one ``warmup`` of kernels, pipelines and models: it chooses the buckets
from sizes given by dimension and counts what is ready for them.
"""

from __future__ import annotations

import enum
import itertools
import math
from bisect import bisect_left
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field

from .errors import ArgumentError


class Policy(enum.Enum):
    """What a dimension does with a size that is not one of its bounds."""

    # The smallest bucket at or above the size; past the last bound, the last bucket. A
    # kernel's bucket only chooses which variants to try first: each call is still checked
    # against what the variant was built for (loader/validity.py).
    CLAMP = "clamp"
    # Sizes 1 to the last bound, each run in the smallest bucket that holds it (the call is
    # padded up to the bucket's bound); anything else is refused.
    PAD = "pad"
    # Only the bounds themselves; anything else is refused.
    EXACT = "exact"


@dataclass(frozen=True)
class BucketGrid:
    """Dimensions ``dims``, each with ascending upper ``bounds``, and one ``policy`` for
    every dimension or one per dimension. ``owner`` names what the grid belongs to in error
    messages (``"pipeline 'mlp'"``)."""

    dims: tuple[str, ...]
    bounds: tuple[tuple[int, ...], ...]
    policy: Policy | tuple[Policy, ...]
    owner: str = field(default="", compare=False)
    policies: tuple[Policy, ...] = field(init=False, repr=False)
    _rules: tuple[tuple[tuple[int, ...], int, Policy], ...] = field(init=False, repr=False)
    _strides: tuple[int, ...] = field(init=False, repr=False)

    def __post_init__(self) -> None:
        dims = tuple(self.dims)
        bounds = tuple(tuple(b) for b in self.bounds)
        policies = (
            (self.policy,) * len(dims) if isinstance(self.policy, Policy) else tuple(self.policy)
        )
        if len(bounds) != len(dims) or len(policies) != len(dims) or len(set(dims)) != len(dims):
            raise ValueError("a bucket grid needs one list of bounds and one policy per dimension")
        for d, b in zip(dims, bounds, strict=True):
            if not b or any(x >= y for x, y in itertools.pairwise(b)):
                raise ValueError(f"the bucket bounds of {d!r} must be a non-empty ascending list")
        object.__setattr__(self, "dims", dims)
        object.__setattr__(self, "bounds", bounds)
        object.__setattr__(self, "policies", policies)
        rules = tuple((b, len(b), p) for b, p in zip(bounds, policies, strict=True))
        object.__setattr__(self, "_rules", rules)
        strides = tuple(math.prod(len(b) for b in bounds[d + 1 :]) for d in range(len(dims)))
        object.__setattr__(self, "_strides", strides)

    # -- the grid's buckets, in row-major order -----------------------------------------

    def __len__(self) -> int:
        return math.prod(len(b) for b in self.bounds)

    def __iter__(self) -> Iterator[tuple[int, ...]]:
        """Every bucket's bounds (one per dimension), in row-major order."""
        return itertools.product(*self.bounds)

    def bounds_of(self, index: int) -> tuple[int, ...]:
        """The bounds of bucket ``index`` (one per dimension)."""
        if not 0 <= index < len(self):
            raise IndexError(f"bucket {index} of {len(self)}")
        out = []
        for b in reversed(self.bounds):
            index, i = divmod(index, len(b))
            out.append(b[i])
        return tuple(reversed(out))

    def named(self, index: int) -> dict[str, int]:
        """The bounds of bucket ``index`` by dimension."""
        return dict(zip(self.dims, self.bounds_of(index), strict=True))

    # -- a call's bucket -----------------------------------------------------------------

    def index(self, values: Sequence[int]) -> int:
        """The bucket of ``values`` (one size per dimension, in ``dims`` order); a size the
        policy refuses raises ArgumentError."""
        return self.locate(values)[0]

    def locate(self, values: Sequence[int]) -> tuple[int, bool]:
        """The bucket of ``values``, and whether they are its bounds exactly (nothing to pad)."""
        index, exact = 0, True
        # _slot's work, inline: a pipeline's every call comes through here
        for d, ((bounds, n, policy), value) in enumerate(zip(self._rules, values, strict=True)):
            i = bisect_left(bounds, value)
            if i == n or bounds[i] != value:
                exact = False
                if i == n or value < 1 or policy is Policy.EXACT:
                    i = self._beyond(d, value, i)
            index = index * n + i
        return index, exact

    def _slot(self, d: int, value: int) -> int:
        """Dimension ``d``'s bucket for ``value`` alone."""
        bounds, n, policy = self._rules[d]
        i = bisect_left(bounds, value)
        if i == n or (bounds[i] != value and (value < 1 or policy is Policy.EXACT)):
            i = self._beyond(d, value, i)
        return i

    def _beyond(self, d: int, value: int, i: int) -> int:
        """Dimension ``d``'s bucket for a size that is no bound and may not be padded up to
        one (``i``: where bisect put it): the last bucket, or the error. Every message
        about a size outside a product's buckets is written here."""
        bounds, policy = self.bounds[d], self.policies[d]
        if policy is Policy.CLAMP:
            return min(i, len(bounds) - 1)
        who = f"{self.owner}: " if self.owner else ""
        dim = self.dims[d]
        if value < 1 or value > bounds[-1]:
            raise ArgumentError(
                f"{who}{dim}={value} is outside the buckets (1..{bounds[-1]}); split the "
                "call, or add a larger bucket to the recipe and rebuild"
            )
        if policy is Policy.EXACT:
            raise ArgumentError(
                f"{who}{dim}={value} is not a bucket size {list(bounds)}, and {dim} may not "
                "be padded (add it to the recipe's pad if padding it is safe)"
            )
        return i

    def clamp_lookup(self) -> tuple[tuple[tuple[int, ...], int], ...]:
        """For a grid whose every dimension clamps: per dimension, the bounds less the last
        and its stride. ``sum(bisect_left(cut, value) * stride)`` is then ``index``: a
        bisect that finds no bound at or above a size lands on the last bucket. The kernel
        fast path (loader/fastcall.py) inlines this."""
        if any(p is not Policy.CLAMP for p in self.policies):
            raise ValueError("clamp_lookup() is for grids whose every dimension clamps")
        return tuple((b[:-1], s) for b, s in zip(self.bounds, self._strides, strict=True))

    # -- warming up ----------------------------------------------------------------------

    def matching(
        self, sizes: Mapping[str, int | Iterable[int]], caller: str = "warmup()"
    ) -> list[int]:
        """The buckets, in row-major order, that hold the given sizes of each dimension
        (one or several per dimension), every bucket of a dimension not given. A size the
        policy refuses raises, as a call at that size would."""
        unknown = [d for d in sizes if d not in self.dims]
        if unknown:
            who = f"{self.owner}: " if self.owner else ""
            raise ArgumentError(
                f"{who}{caller}: {unknown[0]!r} is not a dimension; it has "
                f"{', '.join(self.dims) or 'none'}"
            )
        axes: list[Iterable[int]] = []
        for d, (dim, bounds) in enumerate(zip(self.dims, self.bounds, strict=True)):
            given = sizes.get(dim)
            if given is None:
                axes.append(range(len(bounds)))
            else:
                values = [given] if isinstance(given, int) else list(given)
                axes.append(sorted({self._slot(d, int(v)) for v in values}))
        return [
            sum(i * s for i, s in zip(combo, self._strides, strict=True))
            for combo in itertools.product(*axes)
        ]


def warm(
    grid: BucketGrid,
    sizes: Mapping[str, int | Iterable[int]],
    prepare: Callable[[int], Iterable[object]],
) -> int:
    """The one ``warmup`` of kernels, pipelines and models: ``prepare`` each bucket that
    holds ``sizes`` (``BucketGrid.matching``: every bucket of a dimension not given), and
    return how many distinct things are ready for them (what ``prepare`` returns: a
    kernel's loaded modules, a pipeline's captured graphs, a model's loaded buckets)."""
    ready: dict[int, object] = {}
    for index in grid.matching(sizes):
        for thing in prepare(index):
            ready[id(thing)] = thing
    return len(ready)


# Each product's policy, in one place, for the builder and the loader alike.


def kernel_grid(
    keys: Sequence[str], bounds: Sequence[Sequence[int]], owner: str = ""
) -> BucketGrid:
    """A kernel's buckets over its bucket keys: a size past the last bucket runs in the
    last one, by a variant valid for it (loader/validity.py) or none."""
    return BucketGrid(tuple(keys), tuple(map(tuple, bounds)), Policy.CLAMP, owner)


def pipeline_grid(
    dims: Sequence[str], bounds: Sequence[Sequence[int]], owner: str = ""
) -> BucketGrid:
    """A pipeline's buckets: any size up to the last bound, padded up to its bucket."""
    return BucketGrid(tuple(dims), tuple(map(tuple, bounds)), Policy.PAD, owner)


def model_grid(
    dims: Sequence[str], bounds: Sequence[Sequence[int]], pad: Iterable[str], owner: str = ""
) -> BucketGrid:
    """A model's buckets: a dimension in the recipe's ``pad`` takes any size up to its last
    bound, padded up; any other only its bounds (padding it could change the result)."""
    padded = set(pad)
    policies = tuple(Policy.PAD if d in padded else Policy.EXACT for d in dims)
    return BucketGrid(tuple(dims), tuple(map(tuple, bounds)), policies, owner)
