"""Recipes fuzzed through the loader and the plan, as ``aotc plan`` runs them.

Structure-aware: each shipped and test recipe is parsed, then mutated one to three times at
random key paths (a value of another type, an edge number, an edge or expression string,
deep nesting, an unknown key, a key deleted, a table emptied, a list wrapped, unwrapped,
duplicated or made long, a value copied from elsewhere), written back as TOML and run
through ``load`` and ``make_plan`` (and ``describe_plan`` when the plan is small). A second
test edits the recipes' text byte-wise. Any exception but ``AotcError`` fails, as does a
case that runs past CASE_SECONDS or a run whose peak memory grows by more than MEMORY_CAP.

The generator is seeded per case (``random.Random("seed-name:index")``), so every failure
names a case that reproduces alone: ``one_case(<seed>, <index>)``.
"""

from __future__ import annotations

import copy
import json
import math
import random
import resource
import signal
import tomllib
import traceback
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from types import FrameType
from typing import Any

import pytest

from aot.errors import AotcError
from aot.plan import make_plan
from aot.recipe import load
from aot.summary import describe_plan

ROOT = Path(__file__).resolve().parents[1]
# seed recipe -> structured cases; the big recipes get fewer (a plan of theirs costs more)
SEEDS = {
    "tests/data/small.toml": 900,
    "tests/data/tune.toml": 450,
    "tests/data/model/tiny.toml": 450,
    "recipes/layer.toml": 250,
    "recipes/example.toml": 350,
    "recipes/mlp.toml": 350,
    # kernels as shipped: inferred signatures, autotune's configs, heuristics, call values,
    # derived values, optional pointers, host values, size expressions and constants
    "tests/data/shipped/shipped.toml": 300,
    "recipes/gallery/softmax.toml": 150,
}
TEXT_CASES = 150  # byte-level edits per seed
CASE_SECONDS = 30  # far above any case's need: only a hang reaches it
MEMORY_CAP = 1 << 30  # bytes the process's peak RSS may grow by over one seed's run
SMALL_PLAN = 20_000  # (bucket, config) pairs under which describe_plan runs too

INTS = [0, 1, -1, 2, 3, 16, 2**31 - 1, 2**31, 2**32, 2**63 - 1, 2**63, 2**64, 10**23, -(10**23)]
FLOATS = [0.0, 0.5, 1.0, -1.5, 1e-300, 1e300, math.inf, -math.inf, math.nan]
STRINGS = [
    "", " ", "x", "M", "K", "fp16", "*fp16", "*T", "i32", "u1", "sm_90", "H100", "sm_100",
    "ß", "🙂", "\u202e", "名前", "a" * 2000, "M // 0", "cdiv(M, 0)", "N % 0", "1 // (M - M)",
    "cdiv(M, BLOCK_M) * 70000", "M * 2147483647", "__import__('os')", "M if M else 1",
    "-" * 900 + "M", "(" * 300 + "M" + ")" * 300, "kernels/../../x.py:f", "nope.py:f",
    "kernels/matmul.py:matmul_kernel", "kernels/small.py:broken_kernel", "tiny.py:make_layer",
    "max-autotune", "default", "inductor", "aoti", "fastest", "compiled", "input", "scratch",
]  # fmt: skip
UNKNOWN_KEYS = ["bukets", "sizez", "", " ", "ünïcode", "🙂", "x" * 300, "name ", "*"]


@dataclass
class Tally:
    cases: int = 0
    refused: int = 0
    planned: int = 0
    described: int = 0
    failures: list[str] = field(default_factory=list)


class Hang(Exception):
    pass


def _on_alarm(signum: int, frame: FrameType | None) -> None:
    raise Hang(f"ran past {CASE_SECONDS} s")


# --- TOML out -------------------------------------------------------------------------------


def _toml(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        if math.isnan(value):
            return "nan"
        if math.isinf(value):
            return "inf" if value > 0 else "-inf"
        return repr(value)
    if isinstance(value, str):
        return json.dumps(value, ensure_ascii=False)
    if isinstance(value, list):
        return "[" + ", ".join(_toml(v) for v in value) + "]"
    items = ", ".join(f"{json.dumps(k, ensure_ascii=False)} = {_toml(v)}" for k, v in value.items())
    return "{ " + items + " }"


def to_toml(doc: dict[str, Any]) -> str:
    return "".join(f"{json.dumps(k, ensure_ascii=False)} = {_toml(v)}\n" for k, v in doc.items())


# --- mutations ------------------------------------------------------------------------------

Path_ = tuple[str | int, ...]


def _paths(value: Any, at: Path_ = ()) -> Iterator[Path_]:
    yield at
    if isinstance(value, dict):
        for k, v in value.items():
            yield from _paths(v, (*at, k))
    elif isinstance(value, list):
        for i, v in enumerate(value):
            yield from _paths(v, (*at, i))


def _get(doc: Any, path: Path_) -> Any:
    for step in path:
        doc = doc[step]
    return doc


def _set(doc: Any, path: Path_, value: Any) -> None:
    _get(doc, path[:-1])[path[-1]] = value


def _nest(value: Any, depth: int) -> Any:
    for _ in range(depth):
        value = [value]
    return value


def _any_value(rng: random.Random) -> Any:
    kind = rng.randrange(6)
    if kind == 0:
        return rng.choice(INTS)
    if kind == 1:
        return rng.choice(FLOATS)
    if kind == 2:
        return rng.choice(STRINGS)
    if kind == 3:
        return rng.choice([True, False])
    if kind == 4:
        return rng.choice([[], [1], ["M"], [[1, 2]], [{}], list(range(1, 3001))])
    return rng.choice([{}, {"x": 1}, {"M": [1, 2]}, {"*": 16}, {"name": "k"}])


def _mutate(doc: dict[str, Any], rng: random.Random) -> str:
    """One random mutation of ``doc`` in place; returns what it did."""
    paths = [p for p in _paths(doc) if p]
    path = rng.choice(paths)
    old = _get(doc, path)
    kind = rng.randrange(12)
    if kind == 0:
        new = _any_value(rng)
    elif kind == 1:
        new = rng.choice(INTS + FLOATS + [True, False]) if isinstance(old, int | float) else old
    elif kind == 2:
        new = rng.choice(STRINGS)
    elif kind == 3 and isinstance(old, str):
        new = old + rng.choice([" // 0", " * 70000", " + Q", "(", " % (M - M)", "\u00e9"])
    elif kind == 4:
        new = _nest(old, rng.choice([2, 8, 33, 100]))
    elif kind == 5:
        parent = _get(doc, path[:-1])
        del parent[path[-1]]
        return f"delete {path}"
    elif kind == 6:
        table = _get(doc, path) if isinstance(old, dict) else _get(doc, path[:-1])
        if not isinstance(table, dict):
            return "no-op"
        key = rng.choice(UNKNOWN_KEYS)
        table[key] = _any_value(rng)
        return f"unknown key {key!r} under {path}"
    elif kind == 7:
        new = type(old)() if isinstance(old, dict | list | str) else old
    elif kind == 8:
        new = [old]
    elif kind == 9:
        new = old[0] if isinstance(old, list) and old else old
    elif kind == 10 and isinstance(old, list) and old:
        new = [*old, copy.deepcopy(rng.choice(old))]
    else:
        new = copy.deepcopy(_get(doc, rng.choice(paths)))
    _set(doc, path, new)
    shown = repr(new)
    return f"set {path} = {shown[:60]}{'…' if len(shown) > 60 else ''}"


def _shrink(doc: Any) -> Any:
    """Lists of more than three integers (bucket bounds, search spaces) cut to three, so
    that a big recipe's plan stays cheap enough to run hundreds of times."""
    if isinstance(doc, dict):
        return {k: _shrink(v) for k, v in doc.items()}
    if isinstance(doc, list):
        if len(doc) > 3 and all(type(x) is int for x in doc):
            return doc[:3]
        return [_shrink(v) for v in doc]
    return doc


# --- running a case -------------------------------------------------------------------------


def _workdir(seed: Path, tmp: Path) -> Path:
    """A folder that sees the seed's kernels and models, for the mutated recipe."""
    for entry in seed.parent.iterdir():
        if entry.suffix != ".toml":
            (tmp / entry.name).symlink_to(entry)
    return tmp / seed.name


def _run(path: Path, text: str, tally: Tally, what: str) -> None:
    path.write_text(text, encoding="utf-8")
    tally.cases += 1
    signal.setitimer(signal.ITIMER_REAL, CASE_SECONDS)
    try:
        plan = make_plan(load(path))
        tally.planned += 1
        if sum(len(i.buckets) * len(i.configs) for i in plan.instances) <= SMALL_PLAN:
            describe_plan(plan)
            tally.described += 1
    except AotcError:
        tally.refused += 1
    except Exception as exc:  # a crash or a hang: the point of the fuzzer
        where = traceback.extract_tb(exc.__traceback__)[-1]
        tally.failures.append(f"{what}: {type(exc).__name__}: {str(exc)[:200]} "
                              f"(at {Path(where.filename).name}:{where.lineno})")  # fmt: skip
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)


def _peak() -> int:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024


Case = Callable[[random.Random], tuple[str, str]]  # rng -> (recipe text, what was done)


def _fuzz(seed: str, tmp: Path, cases: Case, count: int) -> Tally:
    path = _workdir(ROOT / seed, tmp)
    tally = Tally()
    previous = signal.signal(signal.SIGALRM, _on_alarm)
    start = _peak()
    try:
        for i in range(count):
            text, done = cases(random.Random(f"{seed}:{i}"))
            _run(path, text, tally, f"case {seed}:{i} ({done})")
            if _peak() - start > MEMORY_CAP:
                tally.failures.append(f"case {seed}:{i}: peak memory grew by over {MEMORY_CAP}")
                break
    finally:
        signal.signal(signal.SIGALRM, previous)
    print(f"{seed}: {tally.cases} cases, {tally.refused} refused, {tally.planned} planned "
          f"({tally.described} described)")  # fmt: skip
    return tally


def structured(seed: str) -> Case:
    """Cases of one to three mutations of the seed recipe."""
    base = tomllib.loads((ROOT / seed).read_text())
    if seed.startswith("recipes/"):
        base = _shrink(base)

    def case(rng: random.Random) -> tuple[str, str]:
        doc = copy.deepcopy(base)
        done = [_mutate(doc, rng) for _ in range(rng.choice([1, 1, 2, 3]))]
        return to_toml(doc), "; ".join(done)

    return case


def one_case(seed: str, index: int) -> str:
    """The recipe text of structured case ``index`` of ``seed``, to reproduce a failure."""
    return structured(seed)(random.Random(f"{seed}:{index}"))[0]


@pytest.mark.parametrize("seed", list(SEEDS))
def test_mutated_recipes_are_planned_or_refused(seed: str, tmp_path: Path) -> None:
    tally = _fuzz(seed, tmp_path, structured(seed), SEEDS[seed])
    assert tally.failures == [], "\n".join(tally.failures[:10])
    # The mutations must reach the plan, not only the parser's first checks.
    assert tally.planned >= SEEDS[seed] // 20


TOKENS = ["[", "]", "{", "}", "=", '"', "'", ",", "\n", "#", "\x00", "\x7f", "é", "🙂",
          "[[kernel]]\n", "[bundle]\n", "[model]\n", "[" * 5000, "{ a = " * 300, "1e400", "0x",
          "-", "99999999999999999999999", "inf", "nan", "true", "1979-05-27"]  # fmt: skip


@pytest.mark.parametrize("seed", list(SEEDS))
def test_recipe_text_edits_are_planned_or_refused(seed: str, tmp_path: Path) -> None:
    text = (ROOT / seed).read_text()
    lines = text.splitlines(keepends=True)

    def case(rng: random.Random) -> tuple[str, str]:
        out = text
        for _ in range(rng.choice([1, 2, 3])):
            at = rng.randrange(len(out) + 1)
            kind = rng.randrange(4)
            if kind == 0:
                out = out[:at] + rng.choice(TOKENS) + out[at:]
            elif kind == 1:
                out = out[:at] + out[at + rng.randrange(1, 40) :]
            elif kind == 2:
                out = out + rng.choice(lines)
            else:
                out = out[:at]
        return out, "text edits"

    tally = _fuzz(seed, tmp_path, case, TEXT_CASES)
    assert tally.failures == [], "\n".join(tally.failures[:10])
