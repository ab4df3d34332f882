"""The benchmark worker: a long-lived process that owns one GPU.

It receives kernels as a manifest fragment plus cubins, launches them through the loader
(``loader.bundle.Kernel`` over ``InMemory`` entries: the exact cubins and launch path a
bundle will ship), and times them with CUDA events after warm-up, flushing L2 before every
repetition and rotating input sets when they fit in L2. Inputs come from the recipe's
``inputs`` function (fresh random data, never zeros).

A CUDA error such as an illegal address poisons the process's context, so the worker
reports it and exits; the parent (``gpu.py``) starts a new one. PyTorch is imported here
and only here: this module runs in the worker process, never in the builder.
"""

from __future__ import annotations

import functools
import math
import os
import random
import statistics
import time
import traceback
import zlib
from collections import OrderedDict
from collections.abc import Callable
from multiprocessing.connection import Connection
from typing import Any

from loader.descriptors import is_host_descriptor

from ..inputs import accepted
from ..kernelfile import load_function
from ..signals import detach_worker

TARGET_MS = 25.0  # time spent measuring one candidate once warm
MIN_REPS, MAX_REPS = 5, 200
FLUSH_BYTES = 256 * 1024 * 1024  # more than any GPU's L2 (the H200 has 60 MB)
FATAL_MARKERS = ("illegal", "misaligned", "unspecified launch failure", "CUDA_ERROR",
                 "device-side assert", "an illegal instruction")  # fmt: skip


class Worker:
    def __init__(self, ordinal: int):
        import torch

        from loader import driver
        from loader.bundle import Device

        self.torch = torch
        torch.cuda.set_device(ordinal)
        torch.cuda.init()  # type: ignore[no-untyped-call,unused-ignore]
        torch.empty(1, device="cuda")  # make the primary context current
        self.device = Device(driver.get(), None)
        props = torch.cuda.get_device_properties(ordinal)
        self.name = props.name
        self.l2 = int(getattr(props, "L2_cache_size", 50 * 2**20))
        self.flush_buf = torch.empty(max(FLUSH_BYTES, 4 * self.l2) // 4, dtype=torch.int32,
                                     device="cuda")  # fmt: skip
        self.inputs: OrderedDict[str, list[list[Any]]] = OrderedDict()

    # -- inputs -----------------------------------------------------------------------
    def _nbytes(self, args: list[Any]) -> int:
        tensors = [_tensor(a) for a in args]
        return sum(t.numel() * t.element_size() for t in tensors if hasattr(t, "element_size"))

    def input_sets(
        self,
        ref: str,
        sizes: dict[str, int],
        dtypes: dict[str, str],
        config: dict[str, Any] | None = None,
        draws: int = 1,
        seed: str | None = None,
    ) -> list[list[Any]]:
        """The input sets a problem is timed on, in rotation: ``draws`` independent draws
        (for work that depends on the data, an MoE's routing), and more copies where one
        fits in L2. ``seed`` names the problem apart from the config (the bucket's point):
        sizes written in the config's terms (an MoE's padded length) differ between
        candidates, and must not change the data they are timed on."""
        make = with_config(load_function(ref), config)
        # Inputs that do not depend on the config are shared by every candidate.
        mine = config if isinstance(make, functools.partial) else None
        problem = repr((ref, sorted(sizes.items()), sorted(dtypes.items())))
        key = repr((problem, mine, draws))
        sets = self.inputs.get(key)
        if sets is None:
            drawn = problem if seed is None else repr((ref, seed, sorted(dtypes.items())))
            first = self._made(make, sizes, dtypes, drawn, 0)
            sets = [first]
            # Rotate among copies when one set fits in L2, so repetitions read cold data.
            n = self._nbytes(first)
            count = min(8, self.l2 // n) if 0 < n * 2 <= self.l2 else 0
            count = max(count, draws - 1)
            sets += [self._made(make, sizes, dtypes, drawn, i + 1) for i in range(count)]
            self.inputs[key] = sets
            while len(self.inputs) > 3:
                self.inputs.popitem(last=False)
        else:
            self.inputs.move_to_end(key)
        return sets

    def _made(
        self, make: Callable[..., Any], sizes: dict[str, int], dtypes: dict[str, str],
        problem: str, index: int,
    ) -> list[Any]:  # fmt: skip
        """Input set ``index`` of a problem, from random state seeded by the problem alone:
        every candidate config gets the same data, a config-dependent ``inputs`` (an MoE's
        alignment to the block size) the same random routing laid out its way. Drawn
        afresh per config, the work itself would differ between candidates (how many
        experts a few tokens reach), and the comparison with it."""
        seed = zlib.crc32(f"{problem}#{index}".encode())
        self.torch.manual_seed(seed)
        random.seed(seed)
        return list(make(sizes, dtypes))

    # -- timing -----------------------------------------------------------------------
    def time(
        self,
        fn: Callable[[list[Any]], None],
        sets: list[list[Any]],
        target_ms: float,
        before: Callable[[list[Any]], Any] | None = None,
        after: Callable[[list[Any]], Any] | None = None,
        sustain_ms: float = 0.0,
    ) -> list[float]:
        """Per launch, in ms; ``before``/``after`` run around each launch, untimed (the
        author's reset_to_zero / restore_value). With ``sustain_ms``, the same launches run
        untimed for that long first, so that the timed ones see the clock the GPU keeps
        under sustained load rather than its boost clock."""
        torch = self.torch

        def once(args: list[Any], start: Any, end: Any) -> None:
            if before is not None:
                before(args)
            self.flush_buf.zero_()
            start.record()
            fn(args)
            end.record()
            if after is not None:
                after(args)

        events = [(torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True))
                  for _ in range(2)]  # fmt: skip
        for s, e in events:  # a warm-up launch, then one that estimates the time
            once(sets[0], s, e)
        torch.cuda.synchronize()
        estimate = max(events[1][0].elapsed_time(events[1][1]), 1e-3)
        if sustain_ms > 0:
            untimed = (torch.cuda.Event(), torch.cuda.Event())
            sustain(lambda i: once(sets[i % len(sets)], *untimed), torch.cuda.synchronize,
                    sustain_ms)  # fmt: skip
        reps = int(min(MAX_REPS, max(MIN_REPS, math.ceil(target_ms / estimate))))
        events = [(torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True))
                  for _ in range(reps)]  # fmt: skip
        for i, (s, e) in enumerate(events):
            once(sets[i % len(sets)], s, e)
        torch.cuda.synchronize()
        return [s.elapsed_time(e) for s, e in events]

    def hooks(
        self, msg: dict[str, Any], names: list[str]
    ) -> tuple[Callable[[list[Any]], Any] | None, Callable[[list[Any]], Any] | None]:
        """``before``/``after`` for the author's reset_to_zero and restore_value."""
        reset = [names.index(n) for n in msg.get("reset", []) if n in names]
        restore = [names.index(n) for n in msg.get("restore", []) if n in names]
        if not reset and not restore:
            return None, None
        saved: dict[int, Any] = {}

        def before(args: list[Any]) -> None:
            for i in reset:
                _tensor(args[i]).zero_()
            for i in restore:
                saved[i] = _tensor(args[i]).clone()

        def after(args: list[Any]) -> None:
            for i in restore:
                _tensor(args[i]).copy_(saved.pop(i))

        return before, after

    def kernel(self, msg: dict[str, Any]) -> Any:
        from loader.bundle import InMemory, Kernel
        from loader.manifest import KernelSpec

        spec = KernelSpec.from_json(msg["spec"], "tuning request")
        return Kernel(InMemory(self.device, msg["entries"]), spec, msg["target"])

    # -- requests ---------------------------------------------------------------------
    def bench(self, msg: dict[str, Any]) -> dict[str, Any]:
        k = self.kernel(msg)
        sets = self.input_sets(msg["inputs"], msg["sizes"], msg["dtypes"], msg.get("config"),
                               msg.get("draws", 1), msg.get("seed"))  # fmt: skip
        sets = [_bound(a, k, msg["dtypes"]) for a in sets]
        call = msg.get("call", {})
        variant = k.variant_for(*sets[0], **call).id
        before, after = self.hooks(msg, [p.name for p in k.params])
        samples = self.time(lambda a: k(*a, **call), sets, msg.get("target_ms", TARGET_MS),
                            before, after, msg.get("sustain_ms", 0.0))  # fmt: skip
        return {"ok": True, "samples": samples, "ms": _typical(samples, len(sets), msg),
                "variant": variant}  # fmt: skip

    def baseline(self, msg: dict[str, Any]) -> dict[str, Any]:
        fn = load_function(msg["fn"])
        sets = self.input_sets(msg["inputs"], msg["sizes"], msg["dtypes"], msg.get("config"),
                               msg.get("draws", 1), msg.get("seed"))  # fmt: skip
        samples = self.time(
            lambda a: fn(*a),
            sets,
            msg.get("target_ms", TARGET_MS),
            sustain_ms=msg.get("sustain_ms", 0.0),
        )
        return {"ok": True, "samples": samples, "ms": _typical(samples, len(sets), msg)}

    def verify(self, msg: dict[str, Any]) -> dict[str, Any]:
        torch = self.torch
        k = self.kernel(msg)
        make = with_config(load_function(msg["inputs"]), msg.get("config"))
        reference = with_config(load_function(msg["reference"]), msg.get("config"))
        names = [p.name for p in k.params]
        # An output the author zeroes before each launch (reset_to_zero: the kernel adds
        # into it) starts at zero, one it updates in place (tune.in_place) as ``inputs``
        # made it; any other starts poisoned, so that unwritten elements show.
        zeroed, kept = set(msg.get("reset", [])), set(msg.get("in_place", []))
        checks = []
        calls = msg.get("calls") or [{}] * len(msg["sizes_list"])
        for sizes, call in zip(msg["sizes_list"], calls, strict=True):
            args = _bound(list(make(sizes, msg["dtypes"])), k, msg["dtypes"])
            expected = reference(*args)
            for name in expected:
                if name not in kept:
                    _poison(torch, _tensor(args[names.index(name)]), name in zeroed)
            k(*args, **call)
            torch.cuda.synchronize()
            for name, ref in expected.items():
                err, finite = _error(torch, _tensor(args[names.index(name)]), ref)
                checks.append({"sizes": sizes, "output": name, "error": err if finite else None,
                               "finite": finite})  # fmt: skip
        tol = msg["tolerance"]
        ok = all(c["finite"] and c["error"] <= tol for c in checks)
        worst = max((c["error"] for c in checks if c["error"] is not None), default=None)
        reason = "" if ok else _verify_reason(checks, tol)
        return {"ok": ok, "checks": checks, "error": worst, "tolerance": tol, "reason": reason}

    def handle(self, msg: dict[str, Any]) -> dict[str, Any]:
        op = msg["op"]
        if op == "ping":
            return {"ok": True, "device": self.name}
        if op == "bench":
            return self.bench(msg)
        if op == "verify":
            return self.verify(msg)
        if op == "baseline":
            return self.baseline(msg)
        return {"ok": False, "reason": f"unknown op {op!r}"}


def sustain(
    launch: Callable[[int], None],
    synchronize: Callable[[], None],
    ms: float,
    clock: Callable[[], float] = time.perf_counter,
) -> int:
    """Keep the GPU busy with ``launch(i)``, i = 0, 1, …, for ``ms`` of wall time: an
    H200 running a large matmul reaches its power cap within tens of ms and its clock drops
    from 1980 MHz to 1350–1900 (benchmarks/probe_sustained.py). Launches go in batches of
    about 5 ms, each waited for, so the queue stays short and the time spent is the
    GPU's, not the driver's queue's. Returns the launches made."""
    batch, done = 1, 0
    end = clock() + ms / 1e3
    while (start := clock()) < end:
        for _ in range(batch):
            launch(done)
            done += 1
        synchronize()
        took = max(clock() - start, 1e-6)
        batch = max(1, min(batch * 4, int(batch * 0.005 / took)))
    return done


SENTINEL = 1e30  # a reference value this large marks a sentinel, not data


def _error(torch: Any, got: Any, ref: Any) -> tuple[float, bool]:
    """(error, finite): a float output's norm-relative error against the reference; an
    integer one (indices, counts) is exact or wrong: 0, else 1 + the share of elements that
    differ, above every tolerance. A reference element of magnitude SENTINEL or more (an
    empty range's running maximum) must be matched to 1e-6 and is left out of the norms,
    which it would swamp."""
    out, ref = got.double(), ref.double().to(got.device)
    if not got.dtype.is_floating_point:
        wrong = float((out != ref).double().mean())
        return (1.0 + wrong if wrong else 0.0), True
    big = ref.abs() >= SENTINEL
    if bool(big.any()):
        if not bool(torch.isclose(out[big], ref[big], rtol=1e-6, atol=0.0).all()):
            return 2.0, True
        out, ref = out[~big], ref[~big]
    denom = float(torch.linalg.norm(ref)) or 1.0
    err = float(torch.linalg.norm(torch.nan_to_num(out, nan=1e30) - ref)) / denom
    return err, bool(torch.isfinite(out).all())


def _poison(torch: Any, t: Any, zero: bool) -> None:
    """Zero, or NaN (an integer tensor: its most negative value, which no reference of
    indices or counts expects; a boolean one: True)."""
    if zero:
        t.zero_()
    elif t.dtype.is_floating_point:
        t.fill_(float("nan"))
    else:
        t.fill_(True if t.dtype == torch.bool else torch.iinfo(t.dtype).min)


def _tensor(arg: Any) -> Any:
    """The tensor behind an argument: a host TensorDescriptor's base, else the argument."""
    return arg.base if is_host_descriptor(arg) else arg


def _typical(samples: list[float], sets: int, msg: dict[str, Any]) -> float:
    """A measurement's time: the median launch; over ``tune.draws`` draws of the inputs, the
    mean of each draw's median (the launches rotate over the sets: ``samples[d::sets]``).
    The median of the mixture would jump between the draws' times from one measurement to
    the next."""
    if msg.get("draws", 1) <= 1:
        return statistics.median(samples)
    return statistics.fmean(
        statistics.median(samples[d::sets]) for d in range(min(sets, len(samples)))
    )


def _bound(args: list[Any], kernel: Any, binding: dict[str, str]) -> list[Any]:
    """The example arguments under the instance's binding: an optional argument the
    binding passes as None is None (``inputs`` gives every pointer a tensor)."""
    return [None if binding.get(p.name) == "none" else a for p, a in zip(kernel.params, args,
                                                                         strict=True)]  # fmt: skip


def with_config(fn: Callable[..., Any], config: dict[str, Any] | None) -> Callable[..., Any]:
    """The recipe's ``inputs`` or ``reference``, given the candidate's config where it takes
    one: host data that depends on a meta-parameter (tokens padded to BLOCK_SIZE_M), or
    partial results whose layout does (a split-KV kernel's ranges of MIN_SPLIT tokens)."""
    if config is None or not accepted(fn, {"config": config}):
        return fn
    return functools.partial(fn, config=config)


def _verify_reason(checks: list[dict[str, Any]], tol: float) -> str:
    for c in checks:
        if not c["finite"]:
            return f"wrong result: {c['output']} has NaN/inf at {c['sizes']}"
        if c["error"] > tol:
            return (f"wrong result: {c['output']} relative error {c['error']:.2e} > {tol:.0e} "
                    f"at {c['sizes']}")  # fmt: skip
    return ""


def serve(conn: Connection, ordinal: int) -> None:
    """Process entry point: answer requests until the pipe closes or a fatal error."""
    detach_worker()
    os.environ.setdefault("PYTHONUNBUFFERED", "1")
    try:
        worker = Worker(ordinal)
    except Exception as exc:  # no GPU, no torch: tell the parent why, then stop
        conn.send({"ok": False, "fatal": True, "reason": f"worker start failed: {exc}"})
        return
    conn.send({"ok": True, "device": worker.name})
    while True:
        try:
            msg = conn.recv()
        except EOFError:
            return
        if msg.get("op") == "quit":
            return
        try:
            reply = worker.handle(msg)
        except Exception as exc:
            text = f"{type(exc).__name__}: {exc}".strip().splitlines()[0][:400]
            fatal = any(m.lower() in str(exc).lower() for m in FATAL_MARKERS)
            reply = {"ok": False, "fatal": fatal, "reason": text,
                     "trace": traceback.format_exc()[-2000:]}  # fmt: skip
            conn.send(reply)
            if fatal:  # the CUDA context is unusable after a fault: exit, be restarted
                os._exit(3)
            continue
        conn.send(reply)
