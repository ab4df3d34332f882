"""An op: interchangeable kernels behind one name (a recipe's ``[[op]]``).

``bundle[op](*args)`` takes the arguments of the op's first kernel, in order or by
keyword. The build routed each bucket, per target and dtype binding, to the kernel of the
op that measured fastest there (aot/ops.py); the call goes to that kernel with the
arguments it takes (by name). If that kernel refuses the call (ArgumentError, raised
before anything reaches the GPU: a TMA kernel given a transposed view, say), the next
kernel of the op takes it, in the order the recipe lists them.
"""

from __future__ import annotations

from bisect import bisect_left
from collections.abc import Mapping
from dataclasses import dataclass
from operator import itemgetter
from typing import TYPE_CHECKING, Any

from .errors import ArgumentError
from .keywords import place
from .manifest_types import Coded

if TYPE_CHECKING:
    from .kernel import Kernel


@dataclass(frozen=True)
class OpRoute(Coded):
    """Which of an op's kernels serves each bucket, on one target for one dtype binding:
    ``kernels`` and ``how`` run over the op's buckets in row-major order."""

    target: str
    dtypes: Mapping[str, str]
    kernels: tuple[str, ...]
    how: tuple[str, ...]


@dataclass(frozen=True)
class OpSpec(Coded):
    """Interchangeable kernels behind one name (a recipe's ``[[op]]``): they take the same
    arguments by name (each a subset of the first kernel's) over the same buckets, and the
    build routes each bucket to the fastest it measured. A call the routed kernel refuses
    goes to the next in ``kernels`` order."""

    name: str
    kernels: tuple[str, ...]
    routes: tuple[OpRoute, ...]

    def _validate(self) -> None:
        if len(self.kernels) < 2 or len(set(self.kernels)) != len(self.kernels):
            raise ValueError(f"({self.name}): an op needs two or more distinct kernels")
        for r in self.routes:
            if len(r.how) != len(r.kernels) or not set(r.kernels) <= set(self.kernels):
                raise ValueError(f"({self.name}): a route names a kernel not of the op")


class Op:
    """``op(*args, stream=None, dtypes=None, **call_values)``: the first kernel's arguments
    (in order, or by keyword: the first kernel's parameter names), run by the kernel the
    build routed the call's bucket and binding to."""

    def __init__(self, spec: OpSpec, kernels: list[Kernel], target: str):
        self.name = spec.name
        self.spec = spec
        self.kernels = kernels
        first = kernels[0]
        self.params = first.params
        self._names = tuple(p.name for p in first.params)
        index = {p.name: i for i, p in enumerate(first.params)}
        # each kernel with the positions of the arguments it takes (None: all, in order)
        self._take: list[tuple[Kernel, list[int] | None]] = []
        for k in kernels:
            take = [index[p.name] for p in k.params]
            self._take.append((k, None if take == list(range(len(index))) else take))
        self._keys = [(k, index.get(k)) for k in first.spec.bucket_keys]
        where = [i for _, i in self._keys]
        self._positional = None if None in where else [i for i in where if i is not None]
        pointers = [i for i, p in enumerate(first.params) if p.type[0] == "*"]
        self._pointer_args = (
            itemgetter(*pointers) if len(pointers) > 1 else lambda a: [a[i] for i in pointers]
        )
        self._bounds = None  # (position, bounds) of a sole bucket key that is an argument
        if self._positional is not None and len(self._positional) == 1:
            self._bounds = (self._positional[0], first.grid.bounds[0])
        self._known: dict[tuple[Any, ...], list[list[tuple[Kernel, list[int] | None]]]] = {}
        # the kernels in the order a call tries them, when the build routed it to ``name``
        tries = {
            name: [t for t in self._take if t[0].name == name]
            + [t for t in self._take if t[0].name != name]
            for name in spec.kernels
        }
        # per binding (dtypes, optional arguments), per bucket
        self._routes: dict[tuple[str, ...], list[list[tuple[Kernel, list[int] | None]]]] = {
            tuple(r.dtypes[b] for b in first.binding_keys): [tries[n] for n in r.kernels]
            for r in spec.routes
            if r.target == target
        }

    def __repr__(self) -> str:
        return f"<aotc op {self.name}: {', '.join(k.name for k in self.kernels)}>"

    def route(
        self, *args: Any, dtypes: Mapping[str, str] | None = None, **call: Any
    ) -> list[Kernel]:
        """The op's kernels in the order a call with ``args`` tries them."""
        if call:
            args, call = self._placed(args, call)
        return [k for k, _ in self._order(args, dtypes, call)]

    def __call__(
        self, *args: Any, stream: Any = None, dtypes: Mapping[str, str] | None = None, **call: Any
    ) -> None:
        if call:
            args, call = self._placed(args, call)
        plain = stream is None and dtypes is None and not call
        refused = []
        for kernel, take in self._order(args, dtypes, call):
            given = args if take is None else [args[i] for i in take]
            try:
                if plain:
                    return kernel(*given)
                return kernel(*given, stream=stream, dtypes=dtypes, **call)
            except ArgumentError as exc:
                refused.append(f"{kernel.name}: {exc}")
        raise ArgumentError(f"{self.name}(): no kernel of the op takes this call. "
                            + " | ".join(refused))  # fmt: skip

    def _placed(
        self, args: tuple[Any, ...], call: dict[str, Any]
    ) -> tuple[tuple[Any, ...], dict[str, Any]]:
        """The arguments given by keyword moved into their places; the other keywords."""
        named = {k: v for k, v in call.items() if k in self._names}
        if not named:
            return args, call
        rest = {k: v for k, v in call.items() if k not in named}
        return place(self.name, self._names, args, named), rest

    def _order(
        self, args: tuple[Any, ...], dtypes: Mapping[str, str] | None, call: Mapping[str, Any]
    ) -> list[tuple[Kernel, list[int] | None]]:
        if len(args) != len(self.params):
            raise ArgumentError(
                f"{self.name}() takes {len(self.params)} arguments "
                f"({', '.join(p.name for p in self.params)}), got {len(args)}"
            )
        first = self.kernels[0]
        # the binding, cached by the pointers' dtypes (raw addresses, or dtypes=: not cached)
        key = None if dtypes else tuple([getattr(a, "dtype", a is None)
                                         for a in self._pointer_args(args)])  # fmt: skip
        routes = self._known.get(key) if key is not None else None
        if routes is None:
            routes = self._routes.get(first.binding(args, dtypes))
            if routes is None:  # a binding nothing routed: the recipe's order
                return self._take
            if key is not None and False not in key:
                self._known[key] = routes
        if self._bounds is not None:  # one bucket key, an argument: its bucket, inline
            value = args[self._bounds[0]]
            b = bisect_left(self._bounds[1], value) if type(value) is int and value > 0 else -1
            if 0 <= b < len(self._bounds[1]):
                return routes[b]
        if self._positional is not None:
            return routes[first.grid.index([args[i] for i in self._positional])]
        sizes = []
        for name, at in self._keys:
            value = args[at] if at is not None else call.get(name)
            if value is None:
                raise ArgumentError(f"{self.name}(): pass {name}=... (its bucket key)")
            sizes.append(int(value))
        return routes[first.grid.index(sizes)]
