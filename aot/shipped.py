"""What a kernel object, as its author ships it, tells the build.

Authors decorate ``@triton.jit`` functions with ``@triton.autotune`` and
``@triton.heuristics`` in any stacking. ``unwrap`` walks the decorators down to the JIT
function and keeps what each layer says: the parameters (with annotations and defaults),
autotune's configs, key, pruning and reset/restore lists, and each heuristic rule. Nothing
is run here; the rules' translation into the loader's expressions is ``heuristics.py``'s.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True)
class Param:
    name: str
    constexpr: bool
    annotation: str  # Triton's normalised annotation ("i32", "*fp16", "constexpr", "")
    has_default: bool
    default: Any = None
    specialize: bool = True  # not in the author's do_not_specialize
    align: bool = True  # not in the author's do_not_specialize_on_alignment


@dataclass(frozen=True)
class TunedConfig:
    """One ``triton.Config``: meta-parameter values and launch options."""

    kwargs: tuple[tuple[str, Any], ...]
    num_warps: int
    num_stages: int
    num_ctas: int = 1
    maxnreg: int | None = None
    pre_hook: bool = False  # host code aotc ships only as descriptor block shapes
    hook: Any = field(default=None, compare=False, repr=False)  # the pre_hook itself


@dataclass(frozen=True)
class Autotune:
    configs: tuple[TunedConfig, ...]
    key: tuple[str, ...]
    reset_to_zero: tuple[str, ...]
    restore_value: tuple[str, ...]
    # prune_configs_by, as the author gave it (called at build time per bucket)
    early_config_prune: Callable[..., Any] | None = field(default=None, compare=False)
    perf_model: Callable[..., Any] | None = field(default=None, compare=False)
    top_k: float | int = 1.0
    hooks: bool = False  # the author's own pre_hook/post_hook on the autotuner


@dataclass(frozen=True)
class Shipped:
    """A kernel as shipped: its JIT function and what its decorators add."""

    jit: Any = field(compare=False)  # triton.runtime.JITFunction
    name: str
    params: tuple[Param, ...]
    autotune: Autotune | None
    # meta-parameter -> the author's rule (a function of the arguments dict), in the
    # order Triton evaluates them; a rule may read the values of those before it
    heuristics: Mapping[str, Callable[..., Any]] = field(default_factory=dict, compare=False)
    layers: tuple[str, ...] = ()  # decorator kinds, outermost first, for messages

    @property
    def runtime(self) -> tuple[Param, ...]:
        return tuple(p for p in self.params if not p.constexpr)

    @property
    def constexprs(self) -> tuple[Param, ...]:
        return tuple(p for p in self.params if p.constexpr)


class NotAKernel(TypeError):
    """The object is not a Triton kernel (or wraps something that is not)."""


def unwrap(obj: Any) -> Shipped:
    """The kernel under any stack of ``@triton.autotune`` / ``@triton.heuristics``."""
    from triton.runtime.autotuner import Autotuner, Heuristics
    from triton.runtime.jit import JITFunction

    layers: list[str] = []
    autotune: Autotune | None = None
    rules: list[tuple[str, Callable[..., Any]]] = []
    node = obj
    for _ in range(16):  # a decorator stack deeper than this is not a kernel
        if isinstance(node, Autotuner):
            if autotune is not None:
                raise NotAKernel("is @triton.autotune'd twice; keep one autotune")
            layers.append("autotune")
            autotune = _autotune(node)
        elif isinstance(node, Heuristics):
            layers.append("heuristics")
            # An outer Heuristics computes its values before the inner ones run, and each
            # rule sees the values computed before it: outermost first, in dict order.
            rules += list(node.values.items())
        elif isinstance(node, JITFunction):
            layers.append("jit")
            break
        else:
            what = type(node).__name__
            if layers:
                raise NotAKernel(f"wraps a {what}, which is not a @triton.jit function")
            raise NotAKernel(f"is not a @triton.jit function ({what})")
        node = node.fn
    else:
        raise NotAKernel("has decorators nested too deep")
    params = tuple(
        Param(
            name=p.name,
            constexpr=bool(p.is_constexpr),
            annotation=str(p.annotation),
            has_default=bool(p.has_default),
            default=plain(p.default) if p.has_default else None,
            specialize=not p.do_not_specialize,
            align=not p.do_not_specialize_on_alignment,
        )
        for p in node.params
    )
    return Shipped(node, node.__name__, params, autotune, dict(rules), tuple(layers))


def _autotune(tuner: Any) -> Autotune:
    configs = tuple(
        TunedConfig(
            kwargs=tuple(sorted((k, plain(v)) for k, v in dict(c.kwargs).items())),
            num_warps=int(c.num_warps),
            num_stages=int(c.num_stages),
            num_ctas=int(c.num_ctas or 1),
            maxnreg=None if c.maxnreg is None else int(c.maxnreg),
            pre_hook=c.pre_hook is not None,
            hook=c.pre_hook,
        )
        for c in tuner.configs
    )
    return Autotune(
        configs=configs,
        key=tuple(tuner.keys),
        reset_to_zero=tuple(tuner.reset_to_zero),
        restore_value=tuple(tuner.restore_value),
        early_config_prune=tuner.early_config_prune,
        perf_model=tuner.perf_model,
        top_k=tuner.configs_top_k,
        hooks=bool(tuner.user_defined_pre_hook or tuner.user_defined_post_hook),
    )


def plain(value: Any) -> Any:
    """A value written as ``tl.constexpr(3)`` (a module-level constant an author reuses as a
    default, ``MODE: tl.constexpr = MODE_SUM``) is what Triton's JIT binds: its value."""
    while type(value).__name__ == "constexpr" and type(value).__module__.startswith("triton"):
        value = value.value
    return value


def source_of(fn: Callable[..., Any]) -> tuple[str, int] | None:
    """The file and first line of a Python function, or None for a builtin."""
    try:
        return inspect.getsourcefile(fn) or "", fn.__code__.co_firstlineno
    except (TypeError, AttributeError):
        return None
