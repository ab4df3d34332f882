"""``[kernel.tune]``: how the tuner searches one kernel (documented in recipes/README.md)."""

from __future__ import annotations

import difflib
import json
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from loader.expr import Expr

from .kernel_names import Names
from .kernel_signature import recipe_module
from .validate import Validator

TUNE_KEYS = (
    "strategy", "budget", "patience", "warm_patience", "seed", "finalists", "rounds",
    "flops", "bytes", "baseline", "tolerance", "predict", "in_place", "first", "draws",
    "sustain_ms",
)  # fmt: skip
STRATEGIES = ("model", "bayes", "random", "grid")
PREDICTORS = ("heuristic", "cost-model")  # what picks a config where no GPU measured one
# Patience when the learned model orders the candidates: its first picks are good enough
# that the tuner stops sooner (benchmarks/RESULTS.md, issue 19: the replayed matmul reaches
# 3% of the best in 9 benchmarks cold, 6 warm, against 39 and 17 with the heuristic's order).
LEARNED_PATIENCE = {"patience": 8, "warm_patience": 4}
_COUNTS = (("budget", 1), ("patience", 1), ("warm_patience", 1), ("seed", 0), ("finalists", 1),
           ("rounds", 1), ("draws", 1), ("sustain_ms", 0))  # fmt: skip


@dataclass(frozen=True)
class TuneSettings:
    """How the tuner searches one kernel (``[kernel.tune]``); see recipes/README.md."""

    strategy: str = "model"
    budget: int = 60  # most benchmarks per (target, dtypes, bucket)
    patience: int = 30  # stop after this many benchmarks without a gain above 1%
    warm_patience: int = 15  # the same, for a bucket warm-started from its neighbour
    seed: int = 0
    finalists: int = 5  # re-measured interleaved, and verified, before choosing
    rounds: int = 5
    # Before each final round's timing, the same launches run back to back for this long:
    # a GPU under sustained load runs at the clock its power cap allows, not at its boost
    # clock, and that changes which of two close configs is faster (benchmarks/RESULTS.md,
    # issue 18: the gallery's linear at M = 4096). 0 times the finals from an idle GPU.
    sustain_ms: int = 100
    # Independent draws of `inputs` a config is timed on, in rotation: for work that
    # depends on the data (an MoE's routing decides how many experts' weights are read).
    draws: int = 1
    flops: Expr | None = None  # work per call, for TFLOP/s in the report
    bytes: Expr | None = None  # bytes moved per call, for GB/s
    baseline: str | None = None  # "path.py:function" doing the same work another way
    tolerance: float | None = None  # relative error allowed; default by dtype
    predict: str = "cost-model"  # the learned model (aot/costmodel/), or "heuristic"
    # Outputs the kernel updates in place, some elements only (a KV cache at the tokens'
    # slots): verification starts them from the inputs' contents instead of NaN.
    in_place: tuple[str, ...] = ()
    # Configs measured in every bucket before the search (an author's launcher table or
    # tuned JSON file), each as the values it sets; the plan checks each is a candidate.
    first: tuple[tuple[tuple[str, Any], ...], ...] = ()


def parse_tune(
    v: Validator, k: Mapping[str, Any], w: str, root: Path, names: Names
) -> TuneSettings:
    t = v.table(k, "tune", w)
    key = f"{w}.tune"
    v.keys(t, TUNE_KEYS, key)
    out: dict[str, Any] = {}
    if "strategy" in t:
        out["strategy"] = _strategy(v, t["strategy"], f"{key}.strategy")
    for name, minimum in _COUNTS:
        if name in t:
            out[name] = v.int_value(t[name], f"{key}.{name}", minimum=minimum)
    for name in ("flops", "bytes"):
        if name in t:
            out[name] = names.per_bucket(v, t[name], f"{key}.{name}")
    if "baseline" in t:
        out["baseline"] = v.optional_ref(t, "baseline", key, root)
    if "tolerance" in t:
        tol = t["tolerance"]
        if isinstance(tol, bool) or not isinstance(tol, int | float) or not 0 < tol < 1:
            v.fail(f"{key}.tolerance", f"{tol!r} must be a number between 0 and 1")
        out["tolerance"] = float(tol)
    if "in_place" in t:
        pointers = sorted(names.arguments - names.ints)
        out["in_place"] = tuple(v.choices(t["in_place"], f"{key}.in_place", pointers,
                                          "pointer arguments", "a pointer argument",
                                          '["cache_ptr"]'))  # fmt: skip
    if "first" in t:
        out["first"] = _first(v, t["first"], f"{key}.first", root)
    if "predict" in t:
        out["predict"] = _choice(v, t["predict"], f"{key}.predict", PREDICTORS)
        if out["predict"] == "cost-model":
            out = {**LEARNED_PATIENCE, **out}  # a recipe's own patience wins
    return TuneSettings(**out)


def _first(v: Validator, raw: Any, key: str, root: Path) -> tuple[tuple[tuple[str, Any], ...], ...]:
    """A list of configs; or where to find them: a JSON file's path, or ``file.py:NAME`` (a
    Python object, such as a launcher's table), holding a list or a mapping whose values
    are configs (a serving engine's tuned file, keyed by token count)."""
    example = "[{ BLOCK_M = 64, BLOCK_N = 128, num_warps = 4, num_stages = 3 }]"
    if isinstance(raw, str):
        raw = _configs_file(v, raw, key, root)
        raw = list(raw.values()) if isinstance(raw, dict) else raw
    if not isinstance(raw, list) or not raw:
        v.fail(key, f"must be a non-empty list of configs, e.g. {example}, a JSON file's path "
               'or "file.py:NAME"')  # fmt: skip
    out = []
    for i, entry in enumerate(raw):
        if not isinstance(entry, dict) or not entry:
            v.fail(f"{key}[{i}]", f"must be a table of the values a config sets, e.g. {example}")
        for name, value in entry.items():
            if not isinstance(value, int | float | str):
                v.fail(f"{key}[{i}].{name}", f"{value!r}: a config's value is a number, "
                       "a boolean or a string")  # fmt: skip
        out.append(tuple(sorted(entry.items())))
    return tuple(dict.fromkeys(out))  # a table keyed by token count repeats its configs


def _configs_file(v: Validator, name: str, key: str, root: Path) -> Any:
    file, _, attr = name.rpartition(":")
    if file.endswith(".py"):
        module = recipe_module(v, key, root, file)
        if not hasattr(module, attr):
            v.fail(key, f"{file} defines no {attr!r}")
        data = getattr(module, attr)
    else:
        path = root / name
        try:
            data = json.loads(path.read_text())
        except OSError as exc:
            v.fail(key, f"cannot read {path}: {exc.strerror or exc}")
        except ValueError as exc:
            v.fail(key, f"{path} is not JSON: {exc}")
    if not isinstance(data, list | dict):
        v.fail(key, f"{name} must hold a list of configs or a mapping whose values are configs")
    return data


def _strategy(v: Validator, raw: Any, key: str) -> str:
    return _choice(v, raw, key, STRATEGIES)


def _choice(v: Validator, raw: Any, key: str, choices: tuple[str, ...]) -> str:
    if raw not in choices:
        close = difflib.get_close_matches(str(raw), choices, n=1)
        hint = f"did you mean {close[0]!r}? " if close else ""
        v.fail(key, f"{raw!r} is unknown; {hint}use one of {', '.join(choices)}")
    return str(raw)
