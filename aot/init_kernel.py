"""One kernel's draft ``[[kernel]]`` table for ``aotc init`` (aot/init.py drafts the file).

What the kernel object says (parameters, ``@triton.autotune``'s configs and key,
``@triton.heuristics`` rules translated into the loader's expressions) and what its source
suggests (pointers, sizes, the grids its own launches use: aot/kernelscan.py), written as
TOML: a ``"TODO"`` placeholder where only the author knows the value, a ``# TODO``
comment on each suggested value to review.
"""

from __future__ import annotations

import ast
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from loader.expr import ExprError, parse

from .heuristics import PassThrough, Untranslatable, translate
from .init_toml import Table, toml_value
from .kernel_env import TARGET_SMS
from .kernelscan import Launch, Usage, usage_of
from .prehook import configs_hooks_translate
from .recipe.placeholders import PLACEHOLDER
from .shipped import Shipped

BOUNDS = [1, 16, 128, 1024, 4096]  # placeholder bucket bounds, to be reviewed


@dataclass(frozen=True)
class KernelDraft:
    name: str  # the recipe's name for it
    attr: str  # the module attribute it is
    layers: str  # "@triton.autotune (13 configs) over @triton.jit"
    lines: tuple[str, ...]  # its [[kernel]] table
    fill: tuple[str, ...]  # keys holding a "TODO" placeholder
    check: tuple[str, ...]  # keys with a suggested value to review


@dataclass(frozen=True)
class _Kinds:
    """The runtime arguments by what they look like, and the constexprs by where their
    value comes from."""

    runtime: tuple[str, ...]
    pointers: tuple[str, ...]
    sizes: tuple[str, ...]
    untyped_pointers: bool  # a pointer whose element type no annotation gives
    keys: tuple[str, ...]  # autotune's key: integer arguments, the bucket keys
    autotuned: bool  # autotune's configs are the search space (no hooks aotc cannot run)
    searched: tuple[str, ...]  # set by autotune's configs
    rules: Mapping[str, str | Untranslatable]  # heuristic -> expression, or why not
    none_tested: tuple[str, ...]  # arguments the kernel or a rule tests against None
    defaults: Mapping[str, Any]
    unset: tuple[str, ...]  # constexprs nothing above (nor the wrapper) gives a value
    passed: Mapping[str, str] = field(default_factory=dict)  # by the wrapper: what it passes
    passed_by: str = ""  # the function whose launch passes them
    example: str = ""  # the one of them the draft shows the call + derived pattern for
    # by the wrapper, a constant: a literal or the module's (name -> value, as written)
    constants: Mapping[str, tuple[Any, str]] = field(default_factory=dict)


def _kinds(k: Shipped, usage: Usage, found: list[Launch]) -> _Kinds:
    runtime = list(k.runtime)
    tuned = k.autotune
    extra = set(tuned.reset_to_zero + tuned.restore_value) if tuned else set()
    pointers = [p.name for p in runtime if p.annotation.startswith("*") or p.name in extra
                or p.name in usage.pointers or p.name.lower().endswith("ptr")]  # fmt: skip
    untyped = any(p.name in pointers and not p.annotation.startswith("*") for p in runtime)
    keys = [n for n in (tuned.key if tuned else ()) if n in {p.name for p in runtime}]
    keys = [n for n in keys if n not in pointers]
    rules = {name: _rule(rule, name) for name, rule in k.heuristics.items()}
    parsed = [parse(r, predicate=True) for r in rules.values() if isinstance(r, str)]
    read = set().union(*(e.names - e.presence for e in parsed))  # `x is None`: no size
    tested = set(usage.none_tested).union(*(e.presence for e in parsed))
    ints = {p.name for p in runtime if p.annotation in _INTS}
    sizes = [p.name for p in runtime if p.name not in pointers and p.name not in keys
             and (p.name in usage.sizes or p.name in ints or p.name in read)
             and (p.name not in tested or p.name in read)
             and ("stride" not in p.name.lower() or p.name in read)]  # fmt: skip
    usable = tuned is not None and not tuned.hooks and configs_hooks_translate(tuned.configs)
    searched = sorted({n for c in tuned.configs for n, _ in c.kwargs}) if tuned and usable else []
    defaults = {p.name: p.default for p in k.constexprs if p.has_default}
    given = set(searched) | set(rules) | set(defaults)
    constants = _constants(k, [p.name for p in k.constexprs if p.name not in given], found)
    unset = [p.name for p in k.constexprs if p.name not in given and p.name not in constants]
    passed, by = _passed(k, unset, found)
    sized = set(usage.sizes) | set(tuned.key if tuned else ())  # a row width, say
    example = next((n for n in passed if n in sized), next(iter(passed), ""))
    return _Kinds(tuple(p.name for p in runtime), tuple(pointers), tuple(sizes), untyped,
                  tuple(keys), usable, tuple(searched), rules,
                  tuple(p.name for p in runtime if p.name in tested), defaults,
                  tuple(n for n in unset if n not in passed), passed, by, example,
                  constants)  # fmt: skip


def _passed(k: Shipped, unset: list[str], found: list[Launch]) -> tuple[dict[str, str], str]:
    """The constexprs among ``unset`` that the file's first launch passing any passes from
    its own values (``X.stride(0)``, ``n_cols``, ``eps``; not a literal, nor the SM count a
    persistent kernel strides by), with what it passes, and the function that launches."""
    order = [p.name for p in k.params]
    for launch in found:
        given = launch.passes(order)
        out = {n: given[n] for n in unset if n in given and not _literal(given[n])
               and n != TARGET_SMS}  # fmt: skip
        if out:
            return out, launch.caller
    return {}, ""


def _constants(k: Shipped, names: list[str], found: list[Launch]) -> dict[str, tuple[Any, str]]:
    """The constexprs among ``names`` that a launch in the file passes as a constant: a
    literal (``BACKWARD_PASS = False``), or a name its function does not bind that the
    module holds a number or bool in (unsloth's ``BLOCK_SIZE = BLOCK_SIZE``, 1024)."""
    module = getattr(getattr(k.jit, "fn", None), "__globals__", {})
    order, out = [p.name for p in k.params], {}
    for launch in found:
        given = launch.passes(order)
        for n in (n for n in names if n in given and n not in out):
            text = given[n]
            if _literal(text) and type(ast.literal_eval(text)) in (int, float, bool, str):
                out[n] = (ast.literal_eval(text), text)
            elif text.isidentifier() and text not in launch.bound and text != TARGET_SMS:
                value = module.get(text)
                if type(value) in (int, float, bool, str):
                    out[n] = (value, f"{text}, the module's {value!r}")
    return out


def _literal(text: str) -> bool:
    try:
        ast.literal_eval(text)
    except (ValueError, SyntaxError, TypeError, MemoryError, RecursionError):
        return False
    return True


_INTS = {"i1", "i8", "i16", "i32", "i64", "u8", "u16", "u32", "u64"}


def _rule(rule: Any, name: str) -> str | Untranslatable:
    try:
        text = translate(rule, name)
        parse(text, predicate=True)
    except Untranslatable as exc:
        return exc
    except ExprError as exc:
        return Untranslatable(str(exc))
    return text


def draft_kernel(name: str, attr: str, k: Shipped, source: str, found: list[Launch]) -> KernelDraft:
    kinds = _kinds(k, usage_of(k), found)
    layers = _layers(k)
    t = Table(["[[kernel]]"])
    t.key("name", name)
    t.key("source", source)
    t.lines[-1] += f"  # {layers}"
    looks = [f"pointers: {', '.join(kinds.pointers)}"] if kinds.pointers else []
    looks += [f"sizes: {', '.join(kinds.keys + kinds.sizes)}"] if kinds.keys + kinds.sizes else []
    t.comment(f"Runtime arguments, in order: {', '.join(kinds.runtime) or 'none'}"
              + (f" (by their use, {'; '.join(looks)})" if looks else ""))  # fmt: skip
    t.key("inputs", f"{PLACEHOLDER}.py:{name}_inputs")
    t.lines.append(f"# reference = {toml_value(f'{PLACEHOLDER}.py:{name}_reference')}")
    _grid(t, k, found)
    _values(t, k, kinds)
    _strides(t, k, kinds, found)
    _meta(t, k, kinds)
    return KernelDraft(name, attr, layers, tuple(t.lines), tuple(t.fill), tuple(t.check))


def _layers(k: Shipped) -> str:
    parts = []
    for layer in k.layers:
        if layer == "autotune" and k.autotune is not None:
            n = len(k.autotune.configs)
            parts.append(f"@triton.autotune ({n} config{'s' if n != 1 else ''})")
        elif layer == "heuristics":
            parts.append(f"@triton.heuristics ({', '.join(k.heuristics)})")
        else:
            parts.append(f"@triton.{layer}")
    return " over ".join(dict.fromkeys(parts))


def _grid(t: Table, k: Shipped, found: list[Launch]) -> None:
    """The grid placeholder, after the grids the file's own launches suggest."""
    params = {p.name for p in k.params} | {"NUM_SMS"}
    free: list[str] = []
    for launch in found[:3]:
        where = f"{launch.caller}()" if launch.caller else "the module"
        if launch.grid is None:
            t.comment(f"{where} launches it with grid {launch.written}")
            continue
        value = launch.grid[0] if len(launch.grid) == 1 else list(launch.grid)
        t.lines.append(f"# grid = {toml_value(value)}  (from {where})")
        free += [n for n in sorted(launch.names - params) if n not in free]
    if free:
        one = len(free) == 1
        t.comment(
            f"{', '.join(free)} {'is no argument' if one else 'are no arguments'} of the "
            f"kernel: declare {'it' if one else 'each'} under call, as a dimension of an "
            'argument ("shape(ARG, DIM)") or passed by the caller ("keyword"), e.g.'
        )
        t.lines.append(f"# call = {toml_value({n: 'shape(ARG, 0)' for n in free})}")
    t.key("grid", PLACEHOLDER)


def _values(t: Table, k: Shipped, kinds: _Kinds) -> None:
    if kinds.untyped_pointers:
        note = "each pointer whose type follows T in inputs takes each listed type"
        t.key("dtypes", {"T": ["fp16", "bf16"]}, note, review=True)
    if kinds.keys:
        t.comment(f"@triton.autotune's key ({', '.join(k.autotune.key if k.autotune else ())}) "
                  "suggests the bucket keys: a call runs the config tuned for the smallest "
                  "bound at or above its value. Keep the keys your calls vary (often the "
                  "tokens, M) and move the others to sizes.")  # fmt: skip
        t.key("buckets", {n: BOUNDS for n in kinds.keys}, review=True,
              note="the bounds your calls need")  # fmt: skip
    else:
        t.comment("No @triton.autotune key suggests bucket keys; add buckets = { NAME = "
                  "[1, 16, 128, 1024] } to tune per range of an integer argument or call "
                  "value.")  # fmt: skip
    constexpr_keys = [n for n in (k.autotune.key if k.autotune else ()) if n not in kinds.passed
                      and n in {p.name for p in k.constexprs}]  # fmt: skip
    for n in constexpr_keys:  # a wrapper passes it per call (a row width, say)
        t.comment(f"@triton.autotune's key {n} is a constexpr: where the wrapper passes it per "
                  "call, take it from a call value under another name (a shape, or a tensor's "
                  '"stride(ARG, DIM)"), one variant per listed value, and remove it from '
                  "fixed:")  # fmt: skip
        t.lines.append(f'# call = {{ {n}_ = "shape(ARG, DIM)" }}, sizes = {{ {n}_ = [...] }}, '
                       f'derived = {{ {n} = "{n}_" }}')  # fmt: skip
    if kinds.sizes:
        t.comment("Representative values of the other sizes (for the grid, inputs and tuning); "
                  "a list is several values one bundle serves.")  # fmt: skip
        t.key("sizes", {n: PLACEHOLDER for n in kinds.sizes})
    nones = list(kinds.none_tested)  # pointers, or scalars such as `scale: float | None`
    if nones:
        t.comment(f"The kernel tests {', '.join(nones)} against None: if callers pass None, "
                  "list it as optional (both forms are built and chosen per call).")  # fmt: skip
        t.lines.append(f"# optional = {toml_value(nones)}")


_STRIDE = re.compile(r"([A-Za-z_]\w*)\.stride\(\s*(\d+)\s*\)")


def _strides(t: Table, k: Shipped, kinds: _Kinds, found: list[Launch]) -> None:
    """Constexpr strides (unsloth's ``X_row_stride``, launched with ``X.stride(0)``): values
    per call, which a constant would get wrong for a view (a wider tensor's slice)."""
    free = [p.name for p in k.constexprs
            if p.name not in kinds.rules and p.name not in kinds.searched]  # fmt: skip
    seen: dict[str, tuple[str, str]] = {}  # constexpr -> (as the launch passes it, call value)
    for launch in found:
        passed = launch.passes([p.name for p in k.params])
        for name, text in passed.items():
            m = _STRIDE.fullmatch(text)
            if name in free and m and name not in seen:
                tensor = next((p for p in kinds.pointers if passed.get(p) == m.group(1)), "ARG")
                seen[name] = (f"{name} ({launch.caller or 'the module'}() passes {text})",
                              f"stride({tensor}, {m.group(2)})")  # fmt: skip
    seen.update({n: (n, "stride(ARG, DIM)") for n in free
                 if n not in seen and "stride" in n.lower()})  # fmt: skip
    if not seen:
        return
    t.comment(f"Constexpr strides: {', '.join(why for why, _ in seen.values())}. Where the "
              "wrapper passes a tensor's t.stride(DIM), take each per call, one variant per "
              "value the sizes give (a call at another stride, a view's, is refused), in place "
              "of its placeholder in derived, fixed or space:")  # fmt: skip
    t.lines.append(f"# call = {toml_value({f'{n}_': v for n, (_, v) in seen.items()})}")
    t.lines.append("# sizes = { " + ", ".join(f"{n}_ = [...]" for n in seen) + " }")
    t.lines.append(f"# derived = {toml_value({n: f'{n}_' for n in seen})}")


def _meta(t: Table, k: Shipped, kinds: _Kinds) -> None:
    for name, rule in kinds.rules.items():
        if isinstance(rule, str):
            t.lines.append(f"# {name} = {rule}, from @triton.heuristics (evaluated per call)")
        elif isinstance(rule, PassThrough):  # the caller's own value: no expression has it
            t.comment(f"{name}'s @triton.heuristics rule {rule}.")
            t.key(f"derived.{name}", PLACEHOLDER)
        else:
            t.comment(f"{name} comes from a @triton.heuristics rule that cannot be translated: "
                      f"{rule}. Give the expression that computes it per call.")  # fmt: skip
            t.key(f"derived.{name}", PLACEHOLDER)
    for name, value in kinds.defaults.items():
        if name not in kinds.rules and name not in kinds.searched:
            t.lines.append(f"# {name} = {_constexpr(value)}, its default (set it in fixed to "
                           "launch another value)")  # fmt: skip
    if kinds.passed:
        _passed_hint(t, kinds)
    tuned = k.autotune
    if kinds.constants and not (kinds.autotuned and tuned is not None):
        for name, (value, written) in kinds.constants.items():
            note = f"the file's launch passes {name} = {written} (or search it in space)"
            t.key(f"fixed.{name}", value, note, review=True)
    if kinds.autotuned and tuned is not None:
        n = len(tuned.configs)
        pruned = " pruned per bucket by its prune_configs_by," if tuned.early_config_prune or (
            tuned.perf_model) else ""  # fmt: skip
        kept = "".join(
            f" {', '.join(names)} {how} around each timed launch ({key}),"
            for names, how, key in ((tuned.reset_to_zero, "zeroed", "reset_to_zero"),
                                    (tuned.restore_value, "restored", "restore_value"))
            if names
        )  # fmt: skip
        what = ", ".join((*kinds.searched, "num_warps", "num_stages"))
        t.comment(f"No [kernel.space]: @triton.autotune's {n} configs ({what}) are the search "
                  f"space,{pruned}{kept} as the JIT would tune them.")  # fmt: skip
        consts = {n: v for n, (v, _) in kinds.constants.items()}
        if kinds.unset or consts:
            t.comment("The configs do not set these constexprs: give their values"
                      + (' (NUM_SMS = "NUM_SMS": each target\'s SM count).'
                         if TARGET_SMS in kinds.unset else ".")
                      + "".join(f" The file's launch passes {n} = {w}." for n, (_, w)
                                in kinds.constants.items()))  # fmt: skip
            t.key("fixed", {**{n: TARGET_SMS if n == TARGET_SMS else PLACEHOLDER
                               for n in kinds.unset}, **consts}, review=bool(consts),
                  note="the values the file's launch passes")  # fmt: skip
        return
    if tuned is not None:
        t.comment("@triton.autotune has a pre_hook or post_hook (host code aotc cannot run), so "
                  "its configs cannot be the search space: give [kernel.space].")  # fmt: skip
    _space(t, k, kinds)


def _passed_hint(t: Table, kinds: _Kinds) -> None:
    """Constexprs the wrapper passes per call from its own values: derived, not searched
    (strides, ``X.stride(0)``, have their own note: the stride(ARG, DIM) call value)."""
    own = {n: w for n, w in kinds.passed.items() if not _STRIDE.fullmatch(w)}
    if own:
        _passed_note(t, kinds, own)
    for name in kinds.passed:
        t.key(f"derived.{name}", PLACEHOLDER)


def _passed_note(t: Table, kinds: _Kinds, own: Mapping[str, str]) -> None:
    where = f"{kinds.passed_by}()" if kinds.passed_by else "The module"
    shown = ", ".join(f"{n} = {w}" for n, w in own.items())
    one = len(own) == 1
    t.comment(f"{where} launches the kernel with {'this constexpr' if one else 'these constexprs'} "
              f"from its own values per call ({shown}): give {'it' if one else 'each'} in "
              "derived rather than search it, as an expression of call values and sizes, or "
              "take a value the wrapper reads off a tensor or gets from its caller from a call "
              "value under another name, one variant per listed value, e.g.")  # fmt: skip
    ex = kinds.example if kinds.example in own else next(iter(own))
    t.lines.append(f'# call = {{ {ex}_ = "shape(ARG, DIM)" }} (or "keyword"), sizes = '
                   f'{{ {ex}_ = [...] }}, derived = {{ {ex} = "{ex}_" }}')  # fmt: skip
    t.comment("A float (an eps, say) cannot be a call value: give it in fixed instead, one "
              "[[kernel]] entry per value.")  # fmt: skip
    typed = [n for n, w in own.items() if ".dtype" in w]
    if typed:
        t.comment(f"{', '.join(typed)} follow{'s' if len(typed) == 1 else ''} a tensor's element "
                  "type: give it in fixed as the name of its dtype variable, "
                  f'fixed = {{ {typed[0]} = "T" }}.')  # fmt: skip


def _space(t: Table, k: Shipped, kinds: _Kinds) -> None:
    """A ``[kernel.space]`` skeleton: the constexprs nothing gives a value, with the values
    autotune's configs list where it has some (and hooks that keep them from being the
    space), and the launch options."""
    listed: dict[str, list[Any]] = {}
    for c in k.autotune.configs if k.autotune is not None else ():
        for name, value in c.kwargs:
            values = listed.setdefault(name, [])
            if value not in values:
                values.append(value)
    t.lines.append("")
    t.lines.append("[kernel.space]  # the search space: every combination is a candidate")
    for name in kinds.unset:
        if name in listed and all(type(x) in (int, bool, str) for x in listed[name]):
            t.key(name, listed[name], review=True, note="from @triton.autotune's configs")
            t.check[-1] = f"space.{name}"
            continue
        t.key(name, PLACEHOLDER)
        t.lines[-1] += "  # no default: the values to search, or move it to fixed or derived"
        t.fill[-1] = f"space.{name}"
    t.key("num_warps", [4, 8], review=True, note="the warp counts to search")
    t.key("num_stages", [3], review=True, note="the pipelining depths to search")
    t.check[-2:] = ["space.num_warps", "space.num_stages"]


def _constexpr(value: Any) -> str:
    if value is None or isinstance(value, bool | int | float | str):
        return toml_value(value) if value is not None else '"None"'
    return repr(value)
