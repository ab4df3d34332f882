"""Compile: cross-compile variants to cubins with Triton, in parallel, through a cache.

Triton 3.6 ships ptxas, so any machine compiles for any target arch; no GPU is needed.
Each variant is compiled with its specialization assumptions given to Triton exactly as
its JIT would (``tt.divisibility`` 16 on an argument; an argument equal to 1 becomes a
compile-time constant and leaves the parameter list). A variant that fails is a result
with its reason, never an exception that stops the build.
"""

from __future__ import annotations

import concurrent.futures as cf
import os
import threading
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from loader import cubin as cubin_mod
from loader.descriptors import slot_types
from loader.manifest import TRITON_SCRATCH_ARGS, DescriptorSpec

from .cache import CompileCache, key_of
from .config import Constexpr, triton_value
from .descriptors import descriptor_record, descriptor_specs, gluon_signature
from .errors import BuildError
from .kernel_env import fixed_for
from .plan import Instance, Plan, Variant
from .progress import Progress
from .targets import resolve
from .workers import Placement, WorkerDied, WorkerPool

# Marks on a job's record that it is no verdict on the variant, and must not be cached.
TRANSIENT = "transient"  # the worker ran out of memory
KILLED = "killed"  # the worker was killed from outside, or the job could not run


@dataclass(frozen=True)
class Job:
    """Everything a worker needs, picklable: the Triton call for one variant."""

    source: str
    function: str
    signature: tuple[tuple[str, str], ...]  # every parameter, "constexpr" for constants
    constexprs: tuple[tuple[str, Constexpr], ...]
    divisible: tuple[int, ...]  # parameter indices assumed divisible by 16
    sm: int
    num_warps: int
    num_stages: int
    num_ctas: int = 1
    maxnreg: int | None = None


@dataclass(frozen=True)
class Compiled:
    variant: Variant
    ok: bool
    reason: str = ""
    cubin: bytes = b""
    function: str = ""
    shared: int = 0
    regs: int = 0
    abi: tuple[str, ...] = ()  # runtime parameters passed at launch, in order
    cached: bool = False
    num_warps: int = 0  # the compiled kernel's (0: the config's)
    descriptors: tuple[DescriptorSpec, ...] = ()  # how each descriptor argument is passed
    global_scratch: int = 0  # bytes per program
    global_scratch_align: int = 0


def job_for(plan: Plan, inst: Instance, variant: Variant) -> Job:
    kr = inst.kernel
    src = plan.sources[kr.name]
    dtypes = dict(variant.dtypes)
    assume = dict(variant.spec.assume)
    constexprs: dict[str, Constexpr] = {**fixed_for(kr, dtypes, inst.target.sms),
                                        **dict(variant.config.meta),
                                        **dict(variant.derived)}  # fmt: skip
    nones = set(variant.nones) | set(kr.always_none)
    signature: list[tuple[str, str]] = []
    divisible: list[int] = []
    for i, name in enumerate(src.arg_names):
        if name in src.constexprs:
            signature.append((name, "constexpr"))
        elif name in nones:  # as Triton's JIT specializes an argument passed as None
            signature.append((name, "constexpr"))
            constexprs[name] = None
        elif assume.get(name) == 1:
            signature.append((name, "constexpr"))
            constexprs[name] = 1
        else:
            ty = kr.signature[name]
            if ty.startswith("*") and ty[1:] in dtypes:
                ty = "*" + dtypes[ty[1:]]
            if name in kr.descriptors:  # Triton's type for a host TensorDescriptor
                block = ", ".join(str(e.evaluate(constexprs)) for e in kr.descriptors[name])
                ty = f"tensordesc<{ty[1:]}[{block}]>"
            signature.append((name, ty))
            if assume.get(name) == 16:
                divisible.append(i)
    config = variant.config
    return Job(
        source=str(kr.source),
        function=kr.function,
        signature=tuple(signature),
        constexprs=tuple(sorted(constexprs.items())),
        divisible=tuple(divisible),
        sm=inst.target.cc[0] * 10 + inst.target.cc[1],
        num_warps=config.num_warps,
        num_stages=config.num_stages,
        num_ctas=config.num_ctas,
        maxnreg=config.maxnreg,
    )


def cache_key(plan: Plan, inst: Instance, job: Job) -> str:
    import triton

    src = plan.sources[inst.kernel.name]
    return key_of(
        {
            "triton": triton.__version__,
            "fn": src.cache_key,
            "file": src.file_sha256,
            "job": _job_key(job),
        }
    )


def _job_key(job: Job) -> dict[str, Any]:
    """The job as the cache keys it: the source's path left out (its content is in the
    key), and the launch options Triton's defaults give left out where they are those."""
    key: dict[str, Any] = {**job.__dict__, "source": None}
    if job.num_ctas == 1 and job.maxnreg is None:
        del key["num_ctas"], key["maxnreg"]
    return key


def run_job(job: Job) -> dict[str, Any]:
    """Compile one variant (in a worker process): the compiler's verdict, a JSON-able
    record plus the cubin. Only a verdict is ever cached (see ``CompilePool``)."""
    try:
        import triton
        from triton.backends.compiler import GPUTarget
        from triton.compiler import ASTSource
        from triton.experimental.gluon._runtime import GluonASTSource

        from .kernelfile import jit_function

        fn = jit_function(Path(job.source), job.function)
        gluon = fn.is_gluon()  # a Gluon kernel: its descriptor types name their layouts
        target = GPUTarget("cuda", job.sm, 32)
        backend = triton.compiler.make_backend(target)
        launch: dict[str, Any] = {"num_warps": job.num_warps, "num_stages": job.num_stages}
        if job.num_ctas != 1:
            launch["num_ctas"] = job.num_ctas
        if job.maxnreg is not None:
            launch["maxnreg"] = job.maxnreg
        options = backend.parse_options(launch)
        src = (GluonASTSource if gluon else ASTSource)(
            fn=fn, signature=gluon_signature(job.signature) if gluon else dict(job.signature),
            constexprs={k: triton_value(v) for k, v in job.constexprs},
            attrs={(i,): [["tt.divisibility", 16]] for i in job.divisible})  # fmt: skip
        compiled = triton.compile(src, target=target, options=options.__dict__)
        md = compiled.metadata
        needs = {"profile scratch memory": getattr(md, "profile_scratch_size", 0) > 0,
                 "thread-block clusters": getattr(md, "num_ctas", 1) != 1,
                 "cooperative launch": bool(getattr(md, "launch_cooperative_grid", 0)),
                 "programmatic dependent launch": bool(getattr(md, "launch_pdl", 0))}  # fmt: skip
        unsupported = [what for what, bad in needs.items() if bad]
        if unsupported:
            return {"ok": False, "reason": f"needs {', '.join(unsupported)} (not supported in v1)"}
        cubin: bytes = compiled.asm["cubin"]
        return {
            "ok": True,
            "function": md.name,
            "shared": int(md.shared),
            "num_warps": int(md.num_warps),  # warp specialisation adds to those asked for
            "cubin": cubin,
            **descriptor_record(job.signature, md),
        }
    except MemoryError:
        # Out of memory says how loaded this machine was, not what the compiler thinks of
        # the variant: no verdict, so nothing is cached and the build stops.
        return {"ok": False, "reason": "MemoryError: out of memory while compiling",
                TRANSIENT: True}  # fmt: skip
    except Exception as exc:  # a failing candidate is a result, not a crash
        return {"ok": False, "reason": _reason(exc)}


def _reason(exc: BaseException) -> str:
    lines = [ln.strip() for ln in str(exc).strip().splitlines() if ln.strip()]
    # Triton's CompilationError puts the source excerpt first and the cause last.
    text = lines[-1] if lines else ""
    if "out of resource" in str(exc).lower():
        text = next((ln for ln in lines if "out of resource" in ln.lower()), text)
    return f"{type(exc).__name__}: {text}"[:400]


def _worker_init(triton_cache: str | None) -> None:
    if triton_cache:
        os.environ.setdefault("TRITON_CACHE_DIR", triton_cache)
    # Line info embeds the absolute paths of the kernel's source and of Triton itself in
    # the cubin: without it, the same sources give the same bytes from any checkout.
    os.environ["TRITON_DISABLE_LINE_INFO"] = "1"
    import triton  # noqa: F401 - pay the import once per worker, not per job


class CompilePool:
    """Compiles variants in worker processes, through the cache, as futures.

    The tuner submits every candidate up front (best-ranked first) and waits only for the
    one it is about to benchmark, so compiling overlaps with benchmarking. Variants of one
    arch share a job (H100 and H200 are both sm_90).

    Only the compiler's verdicts, successes and failures alike, are cached; a compiler
    that crashes its worker (a segfault in MLIR, say) is such a verdict. A job that ends
    any other way (cancelled by an interrupt, its worker killed from outside, the machine
    out of memory) leaves no trace in the cache: its future is cancelled while the pool is
    being aborted, and otherwise fails with a ``BuildError`` that stops the build. Use the
    pool as a context manager: leaving it by an exception (Ctrl-C included) kills the
    workers at once instead of waiting for their jobs (``aot/workers.py``).
    """

    def __init__(self, plan: Plan, cache: CompileCache, jobs: int):
        self.plan = plan
        self.cache = cache
        self.jobs = max(1, jobs)
        self._triton_cache = str(cache.root / "triton") if cache.root else None
        self._pool: WorkerPool | None = None
        self._jobs: dict[str, cf.Future[dict[str, Any]]] = {}
        self._results: dict[Variant, cf.Future[Compiled]] = {}
        self._lock = threading.Lock()
        self._aborted = False
        self.compiled = 0  # variants compiled by a worker (the compiler's verdict, fresh)
        self.cached = 0  # variants answered from the cache

    def __enter__(self) -> CompilePool:
        return self

    def __exit__(self, kind: type[BaseException] | None, *rest: object) -> None:
        if kind is None:
            self.close()
        else:
            self.abort()

    def _executor(self) -> WorkerPool:
        if self._pool is None:
            # workers' output (a failing compiler's IR dumps) to their logs, not the terminal
            self._pool = WorkerPool([Placement()] * self.jobs, init=_worker_init,
                                    init_args=(self._triton_cache,), log=True)  # fmt: skip
        return self._pool

    def submit(self, inst: Instance, var: Variant) -> cf.Future[Compiled]:
        with self._lock:
            fut = self._results.get(var)
            if fut is not None:
                return fut
            fut = cf.Future()
            if self._aborted:
                fut.cancel()
                return fut
            self._results[var] = fut
            job = job_for(self.plan, inst, var)
            key = cache_key(self.plan, inst, job)
            hit = self.cache.get(key)
            if hit is not None:
                self.cached += 1
                fut.set_result(_finish(inst, var, job, hit[0], hit[1], cached=True))
                return fut
            jf = self._jobs.get(key)
            if jf is None:
                jf = self._jobs[key] = self._executor().submit(run_job, job)
        jf.add_done_callback(lambda f: self._done(f, fut, inst, var, job, key))
        return fut

    def _done(
        self,
        jf: cf.Future[dict[str, Any]],
        fut: cf.Future[Compiled],
        inst: Instance,
        var: Variant,
        job: Job,
        key: str,
    ) -> None:
        rec = None if self._aborted else self._verdict(jf)
        with self._lock:
            if rec is None or self._aborted:
                fut.cancel()
                return
            if rec.get(TRANSIENT) or rec.get(KILLED):
                fut.set_exception(BuildError(f"compiling {var.label}: {rec['reason']}"))
                return
            if not self.cache.has(key):
                self.cache.put(key, {k: v for k, v in rec.items() if k != "cubin"},
                               rec.get("cubin", b""))  # fmt: skip
            self.compiled += 1
        fut.set_result(_finish(inst, var, job, rec, rec.get("cubin", b""), cached=False))

    def _verdict(self, jf: cf.Future[dict[str, Any]]) -> dict[str, Any] | None:
        """What the job's worker answered; None when it never ran to an answer."""
        if jf.cancelled():
            return None
        try:
            return jf.result()
        except WorkerDied as died:
            if self._aborted:
                return None
            if died.crashed:
                why = f": {died.last_words}" if died.last_words else ""
                return {"ok": False, "reason": f"the Triton compiler crashed ({died.how}){why}"}
            if not died.started:
                return {"ok": False, KILLED: True,
                        "reason": f"the compile worker could not start ({died.how}); nothing "
                                  "was cached for it"}  # fmt: skip
            return {"ok": False, KILLED: True,
                    "reason": f"the compile worker was killed ({died.how}; out of memory?); "
                              "nothing was cached for it: run the build again"}  # fmt: skip
        except BaseException as exc:  # the job never got a verdict (it could not be sent)
            return {"ok": False, "reason": _reason(exc), KILLED: True}

    def close(self) -> None:
        """Cancel the jobs not started, wait for those under way, then stop the workers."""
        if self._pool is not None:
            self._pool.close()
            self._pool = None

    def abort(self) -> None:
        """Stop now: cancel every job, kill the workers. Nothing more reaches the cache."""
        with self._lock:
            self._aborted = True
            pool, self._pool = self._pool, None
        if pool is not None:
            pool.abort()
        for fut in list(self._results.values()):
            fut.cancel()


def compile_variants(
    plan: Plan,
    variants: Iterable[tuple[Instance, Variant]],
    *,
    cache: CompileCache,
    jobs: int,
    progress: bool = True,
    label: str = "compile",
) -> dict[Variant, Compiled]:
    """Compile what is not cached, ``jobs`` at a time (``label`` names the work on the
    progress line). Returns one result per variant."""
    with CompilePool(plan, cache, jobs) as pool:
        futures: dict[Variant, cf.Future[Compiled]] = {}
        for inst, var in variants:
            futures.setdefault(var, pool.submit(inst, var))
        pending = [f for f in futures.values() if not f.done()]
        bar = Progress(len(pending), label, enabled=progress)
        for f in cf.as_completed(pending):
            bar.advance("" if f.result().ok else "failed")
        bar.close()
        return {v: f.result() for v, f in futures.items()}


def _finish(
    inst: Instance, var: Variant, job: Job, rec: dict[str, Any], cubin: bytes, *, cached: bool
) -> Compiled:
    if not rec.get("ok"):
        return Compiled(var, False, reason=str(rec.get("reason", "unknown failure")), cached=cached)
    info = cubin_mod.inspect(cubin)
    fn = str(rec["function"])
    regs = info.regs.get(fn, max(info.regs.values(), default=0))
    abi = tuple(n for n, t in job.signature if t != "constexpr")
    try:
        descriptors = descriptor_specs(job.signature, rec)
    except ValueError as exc:
        return Compiled(var, False, reason=str(exc), cached=cached)
    slots = len(abi) + sum(len(slot_types(d)) - 1 for d in descriptors)
    nparams = info.params.get(fn)
    if nparams is not None and nparams != slots + TRITON_SCRATCH_ARGS:
        return Compiled(
            var,
            False,
            reason=f"cubin takes {nparams} parameters, expected {slots} + "
            f"{TRITON_SCRATCH_ARGS} scratch (unknown Triton ABI)",
            cached=cached,
        )
    gpu = resolve(inst.target.name)
    shared = int(rec["shared"])
    warps = int(rec.get("num_warps", var.config.num_warps))
    threads = warps * 32
    if shared > gpu.smem_per_block:
        reason = f"needs {shared} B shared memory; {gpu.name} allows {gpu.smem_per_block}"
        return Compiled(var, False, reason=reason, cached=cached)
    if regs * threads > gpu.regs_per_sm:
        reason = f"{regs} registers × {threads} threads exceeds {gpu.regs_per_sm} per SM"
        return Compiled(var, False, reason=reason, cached=cached)
    return Compiled(
        var, True, cubin=cubin, function=fn, shared=shared, regs=regs, abi=abi, cached=cached,
        num_warps=warps, descriptors=descriptors, global_scratch=int(rec.get("global_scratch", 0)),
        global_scratch_align=int(rec.get("global_scratch_align", 0)),
    )  # fmt: skip
