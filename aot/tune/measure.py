"""One measurement on the GPU: the request the worker runs, the record it leaves.

``Measurer`` is the tuner's half that talks to the GPU workers (aot/tune/tuner.py holds the
search): a benchmark, a verification against the recipe's reference (at the bucket's bound
and off it) or a baseline timing, each keyed by what it measured, stored in the tuning
database as it is taken, and read back instead of measured again.
"""

from __future__ import annotations

import concurrent.futures as cf
import hashlib
import threading
from collections import Counter
from collections.abc import Iterable, Mapping
from typing import Any

from loader import manifest as mf

from ..compile import Compiled, CompilePool
from ..dtypes import KERNEL_TOLERANCE
from ..kernel_env import env_at, fixed_for, sizes_at
from ..pack import kernel_record, variant_ids, variant_record
from ..plan import Config, Instance, Plan
from .db import Record, TuningDB
from .decide import (
    BASELINE,
    BASELINE_CONFIG,
    BENCH,
    FINAL,
    SEEDED,
    VERIFY,
    off_bucket,
    problem,
    sustain_of,
)
from .gpu import GpuInfo, GpuWorker, matches

FINAL_TARGET_MS = 10.0


def tolerance(inst: Instance) -> float:
    if inst.kernel.tune.tolerance is not None:
        return inst.kernel.tune.tolerance
    kinds = set(dict(inst.dtypes).values())
    kinds |= {t[1:] for t in inst.kernel.signature.values() if t.startswith("*")}
    return max((KERNEL_TOLERANCE[k] for k in kinds if k in KERNEL_TOLERANCE), default=1e-2)


class Measurer:
    """Set by the tuner: the plan, the database, the compile pool, the GPUs."""

    plan: Plan
    db: TuningDB
    pool: CompilePool
    gpus: list[GpuInfo]
    triton: str
    root: Any
    _lock: threading.Lock
    _stopped: threading.Event
    taken: int
    resumed: int
    retaken: int  # of those taken, measurements the database held taken another way
    failed: int

    def _abs(self, ref: str | None) -> str | None:
        """A recipe's "path.py:function", with the path made absolute for the worker."""
        if ref is None:
            return None
        file, _, name = ref.rpartition(":")
        return f"{(self.root / file).resolve()}:{name}"

    def _record(self, inst: Instance, bucket: tuple[int, ...], config_id: str, kind: str,
                round_: int = 0, values: Mapping[str, Any] | None = None) -> Record:  # fmt: skip
        gpu = self._gpu_for(inst)
        return Record(
            kernel=inst.kernel.name,
            source=self.plan.sources[inst.kernel.name].cache_key,
            triton=self.triton,
            device=gpu.name,
            arch=gpu.arch,
            dtypes=dict(inst.dtypes),
            problem=problem(inst, bucket),
            config=config_id,
            kind=kind,
            round=round_,
            ok=False,
            values=values or {},
        )

    @staticmethod
    def _current(known: Record, inst: Instance, config: Config) -> bool:
        """Whether a stored measurement is of the variant a call would run today. Its key
        names the config, not the variants, so after a change of ``specializations`` a
        database holds the old variants' times under config ids still planned (a stride
        specialised since runs several times faster; a new, more specialized variant the
        call would now run instead), or times taken over another number of ``tune.draws``.
        A record names how it was measured:

        - ``setup``: the variants the config was compiled to (which dispatch a call the
          same way) and the draws;
        - a final round's ``sustain_ms``: one timed under another load than the recipe asks
          is not current;
        - ``seed``, where the inputs must be seeded by the bucket alone (``_seeded``).

        A record from before ``setup`` was kept is current if the variant that ran is still
        planned, and the kernel is timed over one draw (such a record does not say over how
        many it was). Others are measured again, and the new record replaces the old."""
        if not _taken_as_now(inst, known):
            return False
        setup = known.extra.get("setup")
        if setup is not None:
            return bool(setup == _setup(inst, config))
        if inst.kernel.tune.draws > 1:
            return False
        ran = known.extra.get("variant")
        return ran is None or ran in variant_ids(inst, config)

    def _gpu_for(self, inst: Instance) -> GpuInfo:
        return next(g for g in self.gpus if matches(inst.target, g))

    def _compiled(self, inst: Instance, config: Config) -> list[Compiled]:
        futures = [self.pool.submit(inst, v) for v in inst.variants((config,))]
        return [f.result() for f in futures]

    def _at(self, inst: Instance, point: Mapping[str, int], config: Config) -> dict[str, Any]:
        """What a request needs to run at ``point`` under ``config``: every size (those
        written as expressions of the config included), the call values passed by
        keyword, the config's values (``inputs`` may take them), and the point itself as
        the seed of the random inputs, the same for every candidate."""
        kr = inst.kernel
        sizes = sizes_at(kr, point, config)
        call = {n: sizes[n] for n, c in kr.call.items() if c.arg is None and n in sizes}
        if kr.host:  # the values the host data was prepared for, as a service passes them
            env = env_at(kr, point, config)
            call.update({h: env[h] for h in kr.host})
        values = {**fixed_for(kr, dict(inst.dtypes), inst.target.sms), **config.values()}
        seed = repr(sorted(point.items()))
        return {"sizes": sizes, "call": call, "config": values, "seed": seed}

    def _request(self, inst: Instance, config: Config, compiled: list[Compiled]) -> dict[str, Any]:
        ok = [c for c in compiled if c.ok]
        records = [(variant_record(inst.kernel, config, c), c) for c in ok]
        variants = {r.id: r for r, _ in records}
        choice = mf.ChoiceSpec((), config.id, "tuning", tuple(variants))
        spec = kernel_record(
            inst.kernel,
            (mf.InstanceSpec(inst.target.name, dict(inst.dtypes), variants, (choice,)),),
        )
        spec = mf.KernelSpec(**{**spec.__dict__, "bucket_keys": (), "buckets": ()})
        return {
            "spec": spec.to_json(),
            "entries": {r.entry: c.cubin for r, c in records},
            "target": inst.target.name,
            "dtypes": dict(inst.dtypes),
            "inputs": self._abs(inst.kernel.inputs),
            "draws": inst.kernel.tune.draws,
            # @triton.autotune's reset_to_zero / restore_value, honoured around each launch
            "reset": list(inst.kernel.autotune.reset_to_zero) if inst.kernel.autotune else [],
            "restore": list(inst.kernel.autotune.restore_value) if inst.kernel.autotune else [],
            "in_place": list(inst.kernel.tune.in_place),
        }

    def _store(self, rec: Record, reply: dict[str, Any], **extra: Any) -> Record:
        if self._stopped.is_set():
            raise cf.CancelledError("tuning was stopped")
        kept: dict[str, Any] = {k: reply[k] for k in ("error", "tolerance", "variant", "checks")
                                if k in reply}  # fmt: skip
        done = Record(**{
            **rec.__dict__,
            "ok": bool(reply.get("ok")),
            "ms": reply.get("ms"),
            "samples": tuple(round(x, 6) for x in reply.get("samples", ())),
            "reason": str(reply.get("reason", "")),
            "extra": {**kept, **extra},
        })  # fmt: skip
        self.db.add(done)
        with self._lock:
            self.taken += 1
            self.failed += 0 if done.ok else 1
        return done

    def measure(
        self,
        inst: Instance,
        bucket: tuple[int, ...],
        config: Config,
        worker: GpuWorker,
        *,
        kind: str = BENCH,
        round_: int = 0,
    ) -> tuple[float | None, bool]:
        """(median ms or None if it failed, whether the GPU was used)."""
        probe = self._record(inst, bucket, config.id, kind, round_, config.values())
        known = self.db.get(probe)
        if known is not None and self._current(known, inst, config):
            with self._lock:
                self.resumed += 1
            return (known.ms if known.ok else None), True
        if known is not None:
            with self._lock:
                self.retaken += 1
        compiled = self._compiled(inst, config)
        generic = compiled[-1]
        if not generic.ok:
            return None, False  # the compile failure is in the cache and the report
        msg = self._request(inst, config, compiled)
        msg.update(op="bench", **self._at(inst, problem(inst, bucket), config))
        timing: dict[str, Any] = {}
        if kind == FINAL:
            timing["sustain_ms"] = inst.kernel.tune.sustain_ms
            msg.update(target_ms=FINAL_TARGET_MS, **timing)
        rec = self._store(probe, worker.request(msg), setup=_setup(inst, config), **timing,
                          **_seeded(inst))  # fmt: skip
        return (rec.ms if rec.ok else None), True

    def verify(
        self, inst: Instance, bucket: tuple[int, ...], config: Config, worker: GpuWorker
    ) -> bool:
        probe = self._record(inst, bucket, config.id, VERIFY, 0, config.values())
        known = self.db.get(probe)
        if known is not None:
            return known.ok
        compiled = self._compiled(inst, config)
        msg = self._request(inst, config, compiled)
        points = (problem(inst, bucket), off_bucket(inst, bucket, config))
        at = [self._at(inst, p, config) for p in points]
        msg.update(
            op="verify",
            reference=self._abs(inst.kernel.reference),
            sizes_list=[a["sizes"] for a in at],
            calls=[a["call"] for a in at],
            tolerance=tolerance(inst),
            config=at[0]["config"],
        )
        return self._store(probe, worker.request(msg)).ok

    def measure_baseline(
        self,
        inst: Instance,
        bucket: tuple[int, ...],
        worker: GpuWorker,
        config: Config,
        round_: int = 0,
    ) -> None:
        """Time the recipe's baseline at the bucket: at the sizes the kernel runs under
        ``config`` (the bucket's pick; expression sizes may read it), with inputs made as
        for the kernel."""
        probe = self._record(inst, bucket, BASELINE_CONFIG, BASELINE, round_)
        known = self.db.get(probe)
        if known is not None and known.ok and _taken_as_now(inst, known):
            return  # a failed one, or one timed otherwise than the finals now are, again
        if known is not None and known.ok:
            with self._lock:
                self.retaken += 1
        want = inst.kernel.tune.sustain_ms
        at = self._at(inst, problem(inst, bucket), config)
        msg = {
            "op": "baseline",
            "fn": self._abs(inst.kernel.tune.baseline),
            "inputs": self._abs(inst.kernel.inputs),
            "draws": inst.kernel.tune.draws,
            "sizes": at["sizes"],
            "config": at["config"],
            "seed": at["seed"],
            "dtypes": dict(inst.dtypes),
            "target_ms": FINAL_TARGET_MS,
            "sustain_ms": want,
        }
        self._store(probe, worker.request(msg), sustain_ms=want, **_seeded(inst))


def triton_version() -> str:
    import triton

    return str(triton.__version__)


def _setup(inst: Instance, config: Config) -> str:
    """How ``config`` is measured, as a short digest: the ids of the variants it is
    compiled to, and the number of draws of the inputs."""
    text = " ".join([*sorted(variant_ids(inst, config)), f"draws={inst.kernel.tune.draws}"])
    return hashlib.sha256(text.encode()).hexdigest()[:12]


def _taken_as_now(inst: Instance, known: Record) -> bool:
    """Whether a stored timing was taken the way the tuner takes it now: a final round or
    baseline after ``tune.sustain_ms`` of load, and its inputs seeded as ``_seeded`` says."""
    if known.kind in (FINAL, BASELINE) and sustain_of(known) != inst.kernel.tune.sustain_ms:
        return False
    return known.extra.get("seed") == _seeded(inst).get("seed")


def _seeded(inst: Instance) -> dict[str, str]:
    """What a timing of a kernel with a size in its config's terms (an MoE's padded length)
    records: that its inputs were seeded by the bucket alone (``seed``). Before, each
    candidate's sizes seeded its own random data, an MoE's routing among them, and such
    records compared different work: they are measured again (``_current``), and a choice
    reads only the seeded ones where there are some (decide.timed_as_now)."""
    kr = inst.kernel
    plain = {*kr.buckets, *kr.sizes, *kr.size_exprs, *kr.fixed}
    sized = any(e.names - plain for e in kr.size_exprs.values())
    return {"seed": SEEDED} if sized else {}


def stale(plan: Plan, records: Iterable[Record]) -> Counter[str]:
    """Per kernel, the timings among ``records`` that a GPU build of ``plan`` would take
    again because they were taken another way than its recipe asks now (``_current``): a
    final round or baseline without ``tune.sustain_ms`` of load, another variant after a
    change of specializations, another number of draws. Records a build never reads
    (another source, Triton, dtype binding or arch; verifications; one that a later record
    of the same key replaced) are not counted."""
    # an instance and its configs by id, under what a record names of it
    index: dict[tuple[str, str, str, tuple[tuple[str, str], ...]],
                tuple[Instance, dict[str, Config]]] = {}  # fmt: skip
    for i in plan.instances:
        source = plan.sources[i.kernel.name].cache_key
        key = (i.kernel.name, source, i.target.arch, tuple(sorted(i.dtypes)))
        index.setdefault(key, (i, {c.id: c for c in i.configs}))
    version, out = triton_version(), Counter[str]()
    latest = {r.key: r for r in records}  # as TuningDB reads them: a later one replaces
    for r in latest.values():
        found = index.get((r.kernel, r.source, r.arch, tuple(sorted(r.dtypes.items()))))
        if found is None or r.triton != version or r.kind not in (BENCH, FINAL, BASELINE):
            continue
        inst, configs = found
        if r.kind == BASELINE:
            current = _taken_as_now(inst, r)
        elif (config := configs.get(r.config)) is not None:
            current = Measurer._current(r, inst, config)
        else:
            continue  # a config the space no longer has: never read
        if not current:
            out[r.kernel] += 1
    return out


def unread(plan: Plan, records: Iterable[Record]) -> dict[str, int]:
    """Per kernel of ``plan`` that none of ``records`` measured as its source is now, the
    records of it under other sources: a build reads none of them. A kernel's source hash
    (Triton's ``cache_key``) covers the functions it calls and each one's first line, so
    code added above a kernel in its file orphans its records as surely as a change to it."""
    current = {name: src.cache_key for name, src in plan.sources.items()}
    other, matched = Counter[str](), set[str]()
    for r in records:
        if r.kernel in current:
            if r.source == current[r.kernel]:
                matched.add(r.kernel)
            else:
                other[r.kernel] += 1
    return {name: n for name, n in sorted(other.items()) if name not in matched}
