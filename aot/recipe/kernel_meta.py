"""Where each constexpr parameter's value comes from: ``fixed``, the searched ``space`` (or
``@triton.autotune``'s configs when the recipe gives no space), ``derived`` per call (the
recipe's expressions, and every ``@triton.heuristics`` rule translated into one), or the
parameter's own Python default. Every constexpr must get a value from exactly one.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from loader.expr import Expr

from ..config import Config, Constexpr
from ..heuristics import PassThrough, Untranslatable, pass_through, translate
from ..shipped import Shipped
from .kernel_space import (
    LAUNCH_OPTIONS,
    autotune_configs,
    defaults,
    launch_rule,
    parse_fixed,
    parse_space,
)
from .validate import Validator, show


@dataclass(frozen=True)
class Meta:
    fixed: dict[str, Constexpr]
    space: dict[str, tuple[Constexpr, ...]]
    configs: tuple[Config, ...] = ()  # explicit candidates; empty: the product of space
    derived: dict[str, Expr] = field(default_factory=dict)
    translated: dict[str, str] = field(default_factory=dict)  # heuristic -> its expression

    @property
    def searched(self) -> frozenset[str]:
        names = set(self.space) | {m for c in self.configs for m, _ in c.meta}
        return frozenset(names | set(LAUNCH_OPTIONS))

    def space_values(self) -> dict[str, tuple[Constexpr, ...]]:
        """Every value each searched parameter takes."""
        if not self.configs:
            return dict(self.space)
        out: dict[str, list[Constexpr]] = {}
        for c in self.configs:
            for m, x in c.values().items():
                out.setdefault(m, []).append(x)
        return {m: tuple(xs) for m, xs in out.items()}

    def first_config(self) -> dict[str, Constexpr]:
        """One candidate's values (the first), for reading example arguments."""
        if self.configs:
            return self.configs[0].values()
        return {m: xs[0] for m, xs in self.space.items()}


def parse_meta(v: Validator, k: Mapping[str, Any], w: str, kernel: Shipped) -> Meta:
    constexprs = [p.name for p in kernel.constexprs]
    fixed = parse_fixed(v, k, w, kernel)
    space = parse_space(v, k, w, kernel, fixed)
    configs: tuple[Config, ...] = ()
    if "space" not in k and kernel.autotune is not None:
        configs = autotune_configs(v, w, kernel)
        for m in sorted({m for c in configs for m, _ in c.meta} & set(fixed)):
            v.fail(f"{w}.fixed.{m}", f"{kernel.name}'s @triton.autotune configs set {m}; remove "
                   "it from fixed, or give [kernel.space] to search without them")  # fmt: skip
    meta = Meta(fixed, space, configs)
    derived = _derived(v, k, w, constexprs, meta)
    translated = _heuristics(v, w, kernel, meta, derived)
    meta = Meta(fixed, space, configs, derived, translated)
    for name, value in defaults(kernel).items():
        if name not in _given(meta):
            fixed[name] = value
    missing = [c for c in constexprs if c not in _given(meta)]
    if missing:
        name = missing[0]
        said = _no_value(kernel, name)
        sizes, call = k.get("sizes"), k.get("call")
        if name in (sizes if isinstance(sizes, dict) else {}) or \
                name in (call if isinstance(call, dict) else {}):  # fmt: skip
            said += _per_call(name)
        v.fail(f"{w}.fixed", said)
    return meta


def _no_value(kernel: Shipped, name: str) -> str:
    """Why constexpr ``name`` has no value: none given, or a default a bundle cannot hold."""
    param = next(p for p in kernel.constexprs if p.name == name)
    if not param.has_default:
        return f"constexpr {name} of {kernel.name} has no value; add it to fixed, space or derived"
    return (f"constexpr {name} of {kernel.name} defaults to {show(param.default)}, which a "
            "bundle cannot record (it takes an integer, float, boolean, string, None or tl "
            f"dtype); give the value its callers launch with in fixed ({name} = ...), or "
            "in space or derived")  # fmt: skip


def _per_call(name: str) -> str:
    """How a constexpr takes a size's value per call (a wrapper passing n_cols=n_cols)."""
    return (
        f". To take it per call from a size, name the size otherwise and derive {name} "
        f'from it: call = {{ {name}_ = "shape(ARG, DIM)" }} (or "stride(ARG, DIM)", or '
        f'"keyword"), sizes = '
        f'{{ {name}_ = [...] }}, derived = {{ {name} = "{name}_" }}'
    )


def _given(meta: Meta) -> set[str]:
    return set(meta.fixed) | set(meta.searched) | set(meta.derived)


def _derived(
    v: Validator, k: Mapping[str, Any], w: str, constexprs: list[str], meta: Meta
) -> dict[str, Expr]:
    out: dict[str, Expr] = {}
    for name, raw in v.table(k, "derived", w).items():
        key = f"{w}.derived.{name}"
        if name in LAUNCH_OPTIONS and name not in constexprs:
            rule = raw if isinstance(raw, str) and len(raw) <= 200 else ""
            v.fail(key, f"{name} is a launch option, not a constexpr parameter, so it is not "
                   f"derived: {launch_rule(name, rule)}")  # fmt: skip
        if name not in constexprs:
            v.fail(key, f"the kernel has no constexpr parameter {name}")
        if name in meta.fixed or name in meta.searched:
            v.fail(key, f"{name} also has a value in fixed or space; keep one")
        if not isinstance(raw, str):
            v.fail(key, f"must be an expression string, got {show(raw)}")
        out[name] = v.parse_expr(raw, key, predicate=True)
    return out


def _heuristics(
    v: Validator, w: str, kernel: Shipped, meta: Meta, derived: dict[str, Expr]
) -> dict[str, str]:
    """Each @triton.heuristics rule as a derived expression, unless the recipe gives the
    parameter a value itself (which then replaces the rule)."""
    translated: dict[str, str] = {}
    for name, rule in kernel.heuristics.items():
        through = pass_through(rule, name) if name in meta.space else None
        if through is not None:  # searching it would pick for the caller, by speed
            v.fail(f"{w}.space.{name}", f"the @triton.heuristics rule for {name} of "
                   f"{kernel.name} {through.lead}, not a value the build may choose: searching it "
                   f"would pick one for every caller. {through.fix}")  # fmt: skip
        if name in derived or name in meta.fixed or name in meta.searched:
            continue
        key = f"{w}.derived.{name}"
        try:
            text = translate(rule, name)
        except PassThrough as exc:
            v.fail(key, f"the @triton.heuristics rule for {name} of {kernel.name} {exc}")
        except Untranslatable as exc:
            v.fail(key, f"the @triton.heuristics rule for {name} of {kernel.name} cannot be "
                   f"translated: {exc}. Give {name} per call in the recipe: derived.{name} = "
                   '"<expression>" (or a constant in fixed)')  # fmt: skip
        derived[name] = v.parse_expr(text, key, predicate=True)
        translated[name] = text
    return translated


def parse_host(v: Validator, k: Mapping[str, Any], w: str, meta: Meta) -> tuple[str, ...]:
    """``host``: meta-parameters the caller's host code depends on."""
    known = sorted(set(meta.fixed) | set(meta.derived) | (set(meta.searched) - set(LAUNCH_OPTIONS)))
    raw = k.get("host", [])
    names = v.choices(raw, f"{w}.host", known, "meta-parameter names", "a meta-parameter",
                      '["BLOCK_SIZE_M"]')  # fmt: skip
    return tuple(names)
