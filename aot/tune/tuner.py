"""The tuner: benchmark candidates on the GPUs present and record every measurement.

For each (kernel, target, dtypes) whose GPU kind is on this machine, and each bucket in
order: a search strategy proposes configs; each is compiled (all candidates are queued
in the compile pool up front, best-ranked first, so compiling overlaps benchmarking) and
benchmarked at the bucket's upper bound by the GPU's worker process, through the loader's
launch path. The best few are then verified against the recipe's reference (at the bound
and off it) and re-measured in interleaved rounds; then a second look, top down, tries each
bucket's upper neighbour's best there. ``decide.py`` picks the winner from the records.
Every result — failures too — goes to the tuning database as it is taken (measure.py),
and a result already there is never measured again, so an interrupted build resumes.
"""

from __future__ import annotations

import concurrent.futures as cf
import threading
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from ..compile import Compiled, CompilePool
from ..costmodel import predict
from ..heuristic import rank
from ..plan import Config, Instance, Plan, Variant
from ..progress import Progress
from . import strategies
from .db import TuningDB
from .decide import FINAL
from .gpu import GpuInfo, GpuWorker, matches
from .measure import Measurer, triton_version

WARM_START = 3  # finalists of the previous bucket tried first in the next


@dataclass
class _Look:
    """One bucket's tuning so far: what was measured there, its verified best, and how
    many benchmarks its budget has left."""

    bucket: tuple[int, ...]
    ranked: list[Config]  # the bucket's allowed configs, the heuristic's best first
    seen: dict[Config, float | None]
    finalists: list[Config]
    left: int


@dataclass(frozen=True)
class TuneStats:
    instances: int
    benchmarks: int  # measurements taken now (resumed ones excluded)
    resumed: int  # measurements found in the database
    failed: int
    restarts: int
    retaken: int = 0  # of the benchmarks, those the database held taken another way
    compiled: int = 0  # candidate variants compiled for the measurements
    cached: int = 0  # candidate variants found in the compile cache


class Tuner(Measurer):
    def __init__(
        self,
        plan: Plan,
        db: TuningDB,
        pool: CompilePool,
        gpus: list[GpuInfo],
        *,
        progress: bool = True,
        timeout: float = 120.0,
        worker_factory: Callable[[GpuInfo], GpuWorker] | None = None,
        cost_model: Path | None = None,
        predict: str | None = None,
    ):
        self.plan = plan
        self.cost_model = cost_model  # the model a kernel asking for one is ordered by
        self.predict = predict  # --predict / AOTC_PREDICT: every kernel's predictor
        self.db = db
        self.pool = pool
        self.gpus = gpus
        self.progress = progress
        make = worker_factory or (lambda g: GpuWorker(g, timeout=timeout))
        self.workers = {g.ordinal: make(g) for g in gpus}
        self.triton = triton_version()
        self.root = plan.recipe.root
        self._lock = threading.Lock()
        self._stopped = threading.Event()
        self.taken = self.resumed = self.retaken = self.failed = 0

    # -- which instances run where ----------------------------------------------------
    def assignments(self) -> list[tuple[Instance, GpuInfo]]:
        out = []
        for inst in self.plan.instances:
            gpu = next((g for g in self.gpus if matches(inst.target, g)), None)
            if gpu is not None and inst.kernel.inputs is not None:
                out.append((inst, gpu))
        return out

    def run(self) -> TuneStats:
        work = self.assignments()
        by_gpu: dict[int, list[Instance]] = {}
        for inst, gpu in work:
            by_gpu.setdefault(gpu.ordinal, []).append(inst)
        threads = cf.ThreadPoolExecutor(max(1, len(by_gpu)))
        try:
            futures = [
                threads.submit(self._run_gpu, self.workers[o], insts) for o, insts in by_gpu.items()
            ]
            for f in futures:
                f.result()
        except BaseException:
            self.stop()
            raise
        finally:
            threads.shutdown(wait=True, cancel_futures=True)
            for w in self.workers.values():
                w.close()
        return TuneStats(
            instances=len(work),
            benchmarks=self.taken,
            resumed=self.resumed,
            retaken=self.retaken,
            failed=self.failed,
            restarts=sum(w.restarts for w in self.workers.values()),
            compiled=self.pool.compiled,
            cached=self.pool.cached,
        )

    def stop(self) -> None:
        """End the tuning now (an interrupt, or another GPU's thread failed): no more
        requests, the workers killed, and nothing they answer from here on recorded — a
        benchmark cut short is no measurement."""
        self._stopped.set()
        self.pool.abort()
        for w in self.workers.values():
            w.kill()

    def _run_gpu(self, worker: GpuWorker, insts: list[Instance]) -> None:
        for inst in insts:
            self.tune_instance(inst, worker)

    # -- one instance -----------------------------------------------------------------
    def tune_instance(self, inst: Instance, worker: GpuWorker) -> None:
        order: list[Config] = []
        for bucket in inst.buckets:  # each bucket's top picks first, then the rest
            order += rank(inst, bucket)[: strategies.Model.SEED_TOP]
        order += rank(inst, inst.buckets[-1])
        for config in dict.fromkeys(order):
            for v in inst.variants((config,)):
                self.pool.submit(inst, v)
        bar = Progress(len(inst.buckets), f"tune {inst.label}", enabled=self.progress)
        looks: list[_Look] = []
        warm: list[Config] = []
        for i, bucket in enumerate(inst.buckets):
            looks.append(
                self.tune_bucket(inst, bucket, worker, warm, seed=inst.kernel.tune.seed + i)
            )
            warm = looks[-1].finalists[:WARM_START]
            bar.advance(f"bucket {bucket}")
        bar.close()
        # A second look, from the top down. Each bucket was warm-started from the one below
        # it, so a region that pays off from some bucket upward is found there, and may be
        # missed below it (on the H200 the TMA matmul at M <= 512 stopped 18% short, never
        # trying the M <= 1024 winner). Each bucket now tries its upper neighbour's best
        # within what is left of its budget.
        for lower, upper in zip(reversed(looks[:-1]), reversed(looks[1:]), strict=True):
            self.look_again(inst, worker, lower, upper.finalists[:WARM_START])

    def tune_bucket(
        self,
        inst: Instance,
        bucket: tuple[int, ...],
        worker: GpuWorker,
        warm: list[Config],
        *,
        seed: int,
    ) -> _Look:
        t = inst.kernel.tune
        ranked = rank(inst, bucket)
        # A bucket warm-started from its neighbour's best has found its region already.
        patience = min(t.patience, t.warm_patience) if warm else t.patience
        # The recipe's `first` configs (an author's own table), where the bucket allows them.
        first = [c for entry in t.first for c in ranked if c.sets(entry)]
        search = self._search(inst, bucket, ranked, patience=patience, seed=seed,
                              warm=[*first, *warm])  # fmt: skip
        while (config := search.ask()) is not None:
            ms, benchmarked = self.measure(inst, bucket, config, worker)
            search.tell(config, ms, benchmarked=benchmarked)
        left = t.budget - search.benchmarks
        if ranked[0] not in search.seen:  # the untuned default, for the report's speedup
            ms, benchmarked = self.measure(inst, bucket, ranked[0], worker)
            search.seen[ranked[0]] = ms
            left -= int(benchmarked)
        look = _Look(bucket, ranked, dict(search.seen), [], left)
        self._finish(inst, worker, look)
        return look

    def look_again(
        self, inst: Instance, worker: GpuWorker, look: _Look, configs: list[Config]
    ) -> None:
        """Measure ``configs`` (a neighbour's best) at ``look``'s bucket where allowed and
        not yet measured; if one gains more than 1%, the finals run again with it."""
        allowed = set(look.ranked)
        new = [c for c in configs if c in allowed and c not in look.seen][: max(0, look.left)]
        best = min((ms for ms in look.seen.values() if ms is not None), default=None)
        gained = False
        for config in new:
            ms, benchmarked = self.measure(inst, look.bucket, config, worker)
            look.seen[config] = ms
            look.left -= int(benchmarked)
            gained |= ms is not None and (best is None or ms < best * 0.99)
        if gained:  # rounds already taken are read back from the database, not taken again
            self._finish(inst, worker, look)

    def _finish(self, inst: Instance, worker: GpuWorker, look: _Look) -> None:
        """Verify the bucket's best, then time them, the untuned default and the baseline in
        interleaved rounds; ``look.finalists`` is set to the verified best."""
        t, bucket = inst.kernel.tune, look.bucket
        measured = sorted((ms, c) for c, ms in look.seen.items() if ms is not None)
        finalists = self._verified_finalists(inst, bucket, [c for _, c in measured], worker)
        # The untuned default and the baseline run in the same interleaved rounds, so the
        # report's speedups compare like with like (same clocks, same method).
        default = look.ranked[0]
        contenders: list[Config | None] = list(finalists)
        if (
            default not in finalists
            and look.seen.get(default) is not None
            and (inst.kernel.reference is None or self.verify(inst, bucket, default, worker))
        ):
            contenders.append(default)
        if t.baseline is not None:
            contenders.append(None)
        pick = finalists[0] if finalists else default  # the sizes the baseline runs at
        for r in range(t.rounds):  # interleaved: every round visits every contender
            shift = r % max(1, len(contenders))
            for item in contenders[shift:] + contenders[:shift]:
                if item is None:
                    self.measure_baseline(inst, bucket, worker, pick, round_=r)
                else:
                    self.measure(inst, bucket, item, worker, kind=FINAL, round_=r)
        look.finalists = finalists

    def _ready(self, inst: Instance, v: Variant) -> Compiled | None:
        """The variant's compile result if it has finished (never waits), else None."""
        f = self.pool.submit(inst, v)  # the pool's own future where already submitted
        return f.result() if f.done() and not f.cancelled() else None

    def _search(self, inst: Instance, bucket: tuple[int, ...], ranked: list[Config], *,
                patience: int, seed: int, warm: list[Config]) -> strategies.Search:  # fmt: skip
        """The recipe's strategy, starting from the learned cost model's order (spilling
        candidates included: the GPU measures them); from the heuristic's for a kernel
        whose predictor is the heuristic, or where the model cannot be used. The ``model``
        strategy then refits the learned model's scores to the bucket's measurements as
        they come (``strategies.refit``), or its additive surrogate where it has none."""
        t = inst.kernel.tune
        learned = predict.tuning_order(inst, bucket, lambda v: self._ready(inst, v),
                                       self.cost_model, self.predict)  # fmt: skip
        order, prior = (ranked, None) if learned is None else (learned.configs, learned.scores)
        return strategies.make(t.strategy, order, budget=t.budget, patience=patience, seed=seed,
                               warm=warm, prior=prior)  # fmt: skip

    def _verified_finalists(
        self, inst: Instance, bucket: tuple[int, ...], ordered: list[Config], worker: GpuWorker
    ) -> list[Config]:
        want = inst.kernel.tune.finalists
        if inst.kernel.reference is None:
            return ordered[:want]
        out: list[Config] = []
        for config in ordered:  # the best that pass, replacing those that fail
            if len(out) >= want:
                break
            if self.verify(inst, bucket, config, worker):
                out.append(config)
        return out
