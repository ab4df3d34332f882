"""The build: recipe → plan → compile → select → pack, written atomically.

Without a GPU of a target's kind, configs are chosen by the heuristic and only what will
be packed is compiled: each bucket's best-ranked config, then the next one for buckets
whose choice failed, until every bucket has a config that compiled and fits.
"""

from __future__ import annotations

import hashlib
import time
from dataclasses import dataclass
from pathlib import Path

from loader.format import write_atomic

from . import heuristic, report
from .cache import CompileCache
from .compile import Compiled, compile_variants
from .env import Environment
from .pack import encode_bundle, make_manifest
from .plan import Config, Instance, Plan, Variant, make_plan
from .recipe import Recipe, load
from .select import Chooser, Ranker, Selection, heuristic_chooser, select, wanted_variants


@dataclass(frozen=True)
class BuildResult:
    bundle: Path
    report: Path
    size: int
    sha256: str
    plan_size: int
    compiled: int
    cached: int
    failed: int
    seconds: float


def default_output(recipe: Recipe, cwd: Path) -> Path:
    return cwd / "artifacts" / recipe.bundle_filename


def cached_ranker(plan: Plan) -> Ranker:
    memo: dict[tuple[object, tuple[int, ...]], list[Config]] = {}

    def ranker(inst: Instance, bucket: tuple[int, ...]) -> list[Config]:
        key = (inst.key, bucket)
        if key not in memo:
            memo[key] = heuristic.rank(inst, bucket)
        return memo[key]

    return ranker


def compile_selected(
    plan: Plan, chooser: Chooser, env: Environment, done: dict[Variant, Compiled] | None = None
) -> dict[Variant, Compiled]:
    """Compile until every bucket's first viable choice is known (``done``: already known)."""
    cache = CompileCache(env.cache_dir)
    compiled = dict(done or {})
    while True:
        wanted = wanted_variants(plan, chooser, compiled)
        if not wanted:
            return compiled
        compiled.update(
            compile_variants(plan, wanted, cache=cache, jobs=env.jobs, progress=env.progress)
        )


def build(recipe_path: Path, output: Path | None, env: Environment, cwd: Path) -> BuildResult:
    start = time.monotonic()
    recipe = load(recipe_path)
    plan = make_plan(recipe)
    chooser = heuristic_chooser(cached_ranker(plan))
    compiled = compile_selected(plan, chooser, env)
    selection: Selection = select(plan, chooser, compiled)
    manifest, payloads = make_manifest(plan, selection, compiled)
    data = encode_bundle(manifest, payloads)
    out = output if output is not None else default_output(recipe, cwd)
    report_path = out.with_suffix(".report.md")
    # The report first: if writing the bundle fails, no bundle claims to exist.
    write_atomic(report_path, report.render(plan, selection, compiled, out.name).encode())
    write_atomic(out, data)
    return BuildResult(
        bundle=out,
        report=report_path,
        size=len(data),
        sha256=hashlib.sha256(data).hexdigest(),
        plan_size=plan.size,
        compiled=sum(1 for c in compiled.values() if not c.cached),
        cached=sum(1 for c in compiled.values() if c.cached),
        failed=sum(1 for c in compiled.values() if not c.ok),
        seconds=time.monotonic() - start,
    )
