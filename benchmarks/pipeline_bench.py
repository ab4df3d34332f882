"""The Llama-3-8B MLP block end to end: aotc's captured pipeline against the same kernels
called one by one, PyTorch eager and torch.compile; then time to ready in fresh processes.

Run on a GPU machine from the repository root, with the bundle built from recipes/mlp.toml:

    PYTHONPATH=$PWD python benchmarks/pipeline_bench.py --json out/pipeline.json
    python benchmarks/pipeline_bench.py --dry-run      # the plan only; no GPU, no torch needed

The block (bf16, H=4096, I=14336): out = (silu(g) * u) @ w_down + x, where g | u = h @ w_gate_up
and h = rms_norm(x) * w_norm. mlp_torch.py holds the PyTorch version.

1. Latency per call at each M (one table, µs, with each path's time as a multiple of the graph's):
   - aotc graph:   ``mlp(x, out)``, the loader's CUDA graph for M's bucket replayed;
   - aotc eager:   the bundle's 4 kernels called one by one (h, gu, act preallocated);
   - torch eager:  mlp_torch;
   - torch.compile, one column per ``--modes`` entry, ``dynamic=False`` (one specialization
     per M). max-autotune uses CUDA graphs in inductor by default, as aotc's graph does; it
     runs only at ``--autotune-sizes`` since it compiles for long at each M ("-" elsewhere).
   Each path: its first call (capture or compile) apart, 20 warm-up calls, then ``--repeats``
   loops of back-to-back calls (~``--target-ms`` each) timed with CUDA events, median. The
   host's launch cost is included, as a serving process pays it. A second table gives each
   path's max|y - ref| / max|ref| against mlp_torch in float32 (output poisoned with NaN
   first where the path has one); "!" marks errors above ``--tol``.
2. Time to ready at M=1, each in a fresh Python process: from after torch has made the
   inputs (torch's own setup shown apart) to the first correct result, split into import,
   open, bind and first call; aotc, then torch.compile per mode with empty
   TORCHINDUCTOR_CACHE_DIR/TRITON_CACHE_DIR (cold) and the same dirs again (warm).

Everything goes to ``--json``, rewritten after each part. A path that fails shows "error" and
its message is logged to stderr; the other measurements go on. Progress goes to stderr.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import traceback
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
BENCH = Path(__file__).resolve().parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(BENCH))

DEFAULT_SIZES = [1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024, 2048, 4096]
DEFAULT_AUTOTUNE_SIZES = [1, 16, 64, 512, 4096]
DEFAULT_MODES = ["default", "max-autotune"]
GOAL_M = 64  # the graph should be the fastest path at every M up to this
READY_GOAL_S = 1.0
T0 = time.perf_counter()

# Each path's result at one M: us (median µs per call), samples, calls (per sample),
# first_call_s, rel_error, error (message or None).
Result = dict[str, Any]
# A prepared path at one M: a call returning the output, and one that poisons its buffers.
Runner = tuple[Callable[[], Any], Callable[[], None] | None]
# Makes a path's Runner for an input x, or the exception that keeps the path from running.
Preparer = Callable[[Any], Runner] | BaseException


def log(msg: str) -> None:
    print(f"[{time.perf_counter() - T0:7.1f}s] {msg}", file=sys.stderr, flush=True)


def int_list(text: str) -> list[int]:
    sizes = [int(s) for s in text.replace(" ", "").split(",") if s]
    if not sizes or min(sizes) < 1:
        raise argparse.ArgumentTypeError(f"expected positive integers like 1,16,64: {text!r}")
    return sizes


def str_list(text: str) -> list[str]:
    return [s for s in text.replace(" ", "").split(",") if s]


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--bundle", default=str(ROOT / "artifacts" / "llama-mlp-0.1.0.aotc"))
    ap.add_argument("--sizes", type=int_list, default=DEFAULT_SIZES, help="M values (1,2,..)")
    ap.add_argument(
        "--autotune-sizes",
        type=int_list,
        default=DEFAULT_AUTOTUNE_SIZES,
        help="M values for torch.compile modes with max-autotune in their name",
    )
    ap.add_argument(
        "--modes", type=str_list, default=DEFAULT_MODES, help="torch.compile modes (a,b,..)"
    )
    ap.add_argument("--skip-compile", action="store_true", help="no torch.compile paths")
    ap.add_argument("--skip-latency", action="store_true", help="time to ready only")
    ap.add_argument("--skip-ready", action="store_true", help="latency only")
    ap.add_argument("--repeats", type=int, default=5, help="timed loops per path and M")
    ap.add_argument("--warmup", type=int, default=20, help="untimed calls before timing")
    ap.add_argument("--target-ms", type=float, default=25.0, help="length of one timed loop")
    ap.add_argument("--ready-runs", type=int, default=1, help="fresh processes per path")
    ap.add_argument("--ready-timeout", type=float, default=300.0, help="seconds per process")
    ap.add_argument("--tol", type=float, default=2e-2, help="flag errors above this")
    ap.add_argument("--json", type=Path, help="write all results here")
    ap.add_argument("--dry-run", action="store_true", help="print the plan and exit")
    args = ap.parse_args(argv)
    if min(args.repeats, args.ready_runs) < 1 or args.warmup < 0:
        ap.error("--repeats and --ready-runs must be at least 1, --warmup at least 0")
    if args.skip_compile:
        args.modes = []
    return args


def mode_sizes(args: argparse.Namespace, mode: str) -> list[int]:
    return args.autotune_sizes if "max-autotune" in mode else args.sizes


def path_names(args: argparse.Namespace) -> list[str]:
    return ["aotc_graph", "aotc_eager", "torch_eager"] + [f"compile_{m}" for m in args.modes]


def label(path: str) -> str:
    """A path's column title: compile modes by their name ("compile" for the default)."""
    names = {"aotc_graph": "graph", "aotc_eager": "aotc eager", "torch_eager": "torch eager"}
    return names.get(path) or path.removeprefix("compile_").replace("default", "compile")


def long_label(path: str) -> str:
    if path.startswith("compile_"):
        return path.replace("compile_", "torch.compile ")
    return label(path)


def print_plan(args: argparse.Namespace) -> None:
    print(f"bundle: {args.bundle}" + ("" if Path(args.bundle).exists() else "  (not found here)"))
    if not args.skip_latency:
        print(
            f"latency: {args.warmup} warm-up calls, {args.repeats} timed loops of "
            f"~{args.target_ms:g} ms, per path and M; errors flagged above {args.tol:g}"
        )
        for path in ("aotc_graph", "aotc_eager", "torch_eager"):
            print(f"  {label(path):<28} M = {','.join(map(str, args.sizes))}")
        for mode in args.modes:
            sizes = mode_sizes(args, mode)
            print(f"  torch.compile {mode:<14} M = {','.join(map(str, sizes))}")
    if not args.skip_ready:
        print(f"time to ready at M=1, {args.ready_runs} fresh process(es) each:")
        print("  aotc (then warmup() of every bucket)")
        for mode in args.modes:
            print(f"  torch.compile {mode}, cold then warm caches")
    print(f"json: {args.json or '(none)'}")


# --------------------------------------------------------------------------- latency


def time_calls(
    fn: Callable[[], Any], args: argparse.Namespace
) -> tuple[list[float], int, list[float]]:
    """Per-call µs of back-to-back calls, one sample per timed loop; the calls per loop; and
    the host's µs per call to submit them (the CPU a serving process spends)."""
    import torch

    for _ in range(args.warmup):
        fn()
    torch.cuda.synchronize()
    start = torch.cuda.Event(enable_timing=True)
    end = torch.cuda.Event(enable_timing=True)
    start.record()
    for _ in range(3):
        fn()
    end.record()
    end.synchronize()
    est_ms = start.elapsed_time(end) / 3
    n = max(5, min(5000, math.ceil(args.target_ms / max(est_ms, 1e-3))))
    samples, host = [], []
    for _ in range(args.repeats):
        torch.cuda.synchronize()
        start.record()
        t0 = time.perf_counter()
        for _ in range(n):
            fn()
        host.append((time.perf_counter() - t0) * 1e6 / n)
        end.record()
        end.synchronize()
        samples.append(start.elapsed_time(end) * 1e3 / n)
    return samples, n, host


def measure(prepare: Callable[[Any], Runner], x: Any, ref: Any, args: argparse.Namespace) -> Result:
    """First call (capture or compile included), timing, then a check on poisoned outputs."""
    import torch
    from mlp_torch import rel_error

    t0 = time.perf_counter()
    fn, poison = prepare(x)
    fn()
    torch.cuda.synchronize()
    first = time.perf_counter() - t0
    samples, n, host = time_calls(fn, args)
    if poison is not None:
        poison()
    err = rel_error(fn(), ref)  # before any other call: a CUDA graph's output is reused
    return {
        "us": statistics.median(samples),
        "host_us": statistics.median(host),
        "samples": samples,
        "calls": n,
        "first_call_s": first,
        "rel_error": err,
        "error": None,
    }


def failed(path: str, m: int, exc: BaseException) -> Result:
    log(f"{long_label(path)} M={m}: ERROR {type(exc).__name__}: {exc}")
    traceback.print_exc(file=sys.stderr)
    return {"error": f"{type(exc).__name__}: {exc}"[:1000]}


def aotc_paths(bundle_path: str, weights: tuple[Any, ...]) -> dict[str, Preparer]:
    """Preparers for the graph and the kernel-by-kernel paths, or why each cannot run."""
    import loader

    try:
        bundle = loader.open(bundle_path)
    except Exception as exc:
        log(f"aotc: cannot open {bundle_path}: {type(exc).__name__}: {exc}")
        return {"aotc_graph": exc, "aotc_eager": exc}
    paths: dict[str, Preparer] = {}
    for name, make in (("aotc_graph", graph_path), ("aotc_eager", kernels_path)):
        try:
            paths[name] = make(bundle, weights)
        except Exception as exc:
            log(f"{label(name)}: cannot set up: {type(exc).__name__}: {exc}")
            traceback.print_exc(file=sys.stderr)
            paths[name] = exc
    return paths


def graph_path(bundle: Any, weights: tuple[Any, ...]) -> Callable[[Any], Runner]:
    """``mlp(x, out)``: the loader replays its CUDA graph for x's bucket."""
    import torch

    w_norm, w_gate_up, w_down = weights
    mlp = bundle.pipeline("mlp", w_norm=w_norm, w_gate_up=w_gate_up, w_down=w_down)

    def prepare(x: torch.Tensor) -> Runner:
        out = torch.empty_like(x)

        def run() -> torch.Tensor:
            mlp(x, out)
            return out

        def poison() -> None:
            out.fill_(float("nan"))

        return run, poison

    return prepare


def kernels_path(bundle: Any, weights: tuple[Any, ...]) -> Callable[[Any], Runner]:
    """The bundle's 4 kernels launched one by one through the loader, buffers preallocated."""
    import torch
    from mlp_torch import EPS, INTER

    w_norm, w_gate_up, w_down = weights
    k_norm, k_gate_up, k_act, k_down = (
        bundle[n] for n in ("rmsnorm", "gate_up", "silu_mul", "down")
    )

    def prepare(x: torch.Tensor) -> Runner:
        m, hid = x.shape
        h = torch.empty_like(x)
        gu = torch.empty(m, 2 * INTER, device=x.device, dtype=x.dtype)
        act = torch.empty(m, INTER, device=x.device, dtype=x.dtype)
        out = torch.empty_like(x)
        # fmt: off
        calls = (
            (k_norm, (x, w_norm, h, m, hid, x.stride(0), h.stride(0), EPS)),
            (k_gate_up, (h, w_gate_up, gu, m, 2 * INTER, hid, h.stride(0), h.stride(1),
                         w_gate_up.stride(0), w_gate_up.stride(1), gu.stride(0), gu.stride(1))),
            (k_act, (gu, act, m, INTER, gu.stride(0), act.stride(0))),
            (k_down, (act, w_down, x, out, m, hid, INTER, act.stride(0), act.stride(1),
                      w_down.stride(0), w_down.stride(1), out.stride(0), out.stride(1))),
        )
        # fmt: on

        def run() -> torch.Tensor:
            for kernel, a in calls:
                kernel(*a)
            return out

        def poison() -> None:
            for t in (h, gu, act, out):
                t.fill_(float("nan"))

        return run, poison

    return prepare


def torch_eager_path(weights: tuple[Any, ...]) -> Callable[[Any], Runner]:
    from mlp_torch import mlp_torch

    return lambda x: ((lambda: mlp_torch(x, *weights)), None)


def compiled_path(mode: str, weights: tuple[Any, ...]) -> Callable[[Any], Runner]:
    """torch.compile of mlp_torch (weights as parameters); it compiles at each M's first call."""
    import torch
    from mlp_torch import TorchMLP

    fn = torch.compile(TorchMLP(*weights), mode=mode, dynamic=False)
    return lambda x: ((lambda: fn(x)), None)


def configure_dynamo(n_shapes: int) -> None:
    """Room for one compiled specialization per M without falling back to eager."""
    import torch._dynamo

    limit = max(64, 2 * n_shapes)
    for name in ("recompile_limit", "cache_size_limit"):
        if hasattr(torch._dynamo.config, name):
            setattr(torch._dynamo.config, name, limit)


def mode_info(mode: str) -> dict[str, Any]:
    """Inductor's options for a mode: does it replay CUDA graphs?"""
    try:
        import torch._inductor

        opts = dict(torch._inductor.list_mode_options(mode, False))
    except Exception as exc:
        return {"options": f"unknown ({exc})", "cudagraphs": None}
    return {"options": opts, "cudagraphs": bool(opts.get("triton.cudagraphs", False))}


def cudagraph_skips() -> int:
    """How often inductor has fallen back from CUDA graphs so far (its own counter)."""
    try:
        from torch._dynamo.utils import counters

        return int(counters["inductor"].get("cudagraph_skips", 0))
    except Exception:
        return 0


def latency(args: argparse.Namespace, results: dict[str, Any]) -> None:
    import torch
    from mlp_torch import float_weights, make_input, make_weights, reference

    lat: dict[str, dict[str, Result]] = {p: {} for p in path_names(args)}
    results["latency"] = lat
    results["compile_modes"] = {}
    weights = make_weights()
    weights32 = float_weights(weights)
    all_sizes = sorted(set(args.sizes).union(*(mode_sizes(args, m) for m in args.modes)))
    inputs = {}
    for m in all_sizes:
        x = make_input(m)
        inputs[m] = (x, reference(x, weights32))
    del weights32
    torch.cuda.synchronize()
    log(f"weights, inputs and float32 references ready for M = {all_sizes}")

    preparers = aotc_paths(args.bundle, weights)
    preparers["torch_eager"] = torch_eager_path(weights)

    with torch.no_grad():
        for m in args.sizes:  # paths side by side at each M, so that drift hits all alike
            for path in ("aotc_graph", "aotc_eager", "torch_eager"):
                lat[path][str(m)] = run_one(path, preparers[path], m, inputs[m], args)
        if args.modes:
            configure_dynamo(len(all_sizes))
        for mode in args.modes:
            compile_mode(mode, weights, inputs, args, results)
    torch.cuda.synchronize()


def compile_mode(
    mode: str,
    weights: tuple[Any, ...],
    inputs: dict[int, tuple[Any, Any]],
    args: argparse.Namespace,
    results: dict[str, Any],
) -> None:
    import torch

    path = f"compile_{mode}"
    info = mode_info(mode)
    log(f"torch.compile mode={mode}: inductor options {info['options']}")
    torch._dynamo.reset()
    skips = cudagraph_skips()
    try:
        prepare: Preparer = compiled_path(mode, weights)
    except Exception as exc:
        log(f"torch.compile mode={mode}: ERROR {type(exc).__name__}: {exc}")
        traceback.print_exc(file=sys.stderr)
        prepare = exc
    for m in mode_sizes(args, mode):
        results["latency"][path][str(m)] = run_one(path, prepare, m, inputs[m], args)
    info["cudagraph_skips"] = cudagraph_skips() - skips
    results["compile_modes"][mode] = info
    torch._dynamo.reset()  # frees this mode's graphs and their memory pools


def run_one(
    path: str,
    prepare: Preparer,
    m: int,
    x_ref: tuple[Any, Any],
    args: argparse.Namespace,
) -> Result:
    if isinstance(prepare, BaseException):
        return {"error": f"{type(prepare).__name__}: {prepare}"[:1000]}
    try:
        r = measure(prepare, *x_ref, args)
    except Exception as exc:
        return failed(path, m, exc)
    flag = "" if ok(r["rel_error"], args.tol) else "  <-- ERROR ABOVE TOLERANCE"
    log(
        f"{long_label(path)} M={m}: {r['us']:.1f} µs/call, first call {r['first_call_s']:.2f} s, "
        f"rel. error {r['rel_error']:.1e}{flag}"
    )
    return r


def ok(err: float, tol: float) -> bool:
    return math.isfinite(err) and err <= tol


def cell_us(r: Result | None) -> str:
    if r is None:
        return "-"
    return "error" if r.get("error") else f"{r['us']:.1f}"


def cell_ratio(r: Result | None, graph: Result | None) -> str:
    """r's time as a multiple of the graph's: '1.73x' = takes 1.73 times as long."""
    if r is None or graph is None or r.get("error") or graph.get("error"):
        return "-"
    return f"{r['us'] / graph['us']:.2f}x"


def heading(path: str, modes: dict[str, Any]) -> str:
    """A column's title; a star marks torch.compile modes that replay CUDA graphs."""
    mode = path.removeprefix("compile_")
    graphs = path.startswith("compile_") and modes.get(mode, {}).get("cudagraphs")
    return label(path) + ("*" if graphs else "")


def print_latency(args: argparse.Namespace, results: dict[str, Any]) -> None:
    lat = results["latency"]
    modes = results.get("compile_modes", {})
    paths = path_names(args)
    heads = {p: heading(p, modes) for p in paths}
    w = {p: max(len(heads[p]), 8) + 2 for p in paths}
    rows = sorted({int(m) for p in paths for m in lat[p]})
    print(
        f"\nMLP block latency per call, µs (bf16, H=4096, I=14336; median of {args.repeats} "
        "CUDA-event-timed loops of back-to-back calls, host launch cost included)"
    )
    print(f"goal: aotc graph the fastest of all paths at M ≤ {GOAL_M}")
    print(
        f"{'M':>6}"
        + "".join(f"{heads[p]:>{w[p]}}" for p in paths)
        + "  |"
        + "".join(f"{heads[p]:>{w[p]}}" for p in paths[1:])
        + "   (time as a multiple of graph's)"
    )
    goal: dict[int, str] = {}
    for m in rows:
        rs = {p: lat[p].get(str(m)) for p in paths}
        g = rs["aotc_graph"]
        print(
            f"{m:>6}"
            + "".join(f"{cell_us(rs[p]):>{w[p]}}" for p in paths)
            + "  |"
            + "".join(f"{cell_ratio(rs[p], g):>{w[p]}}" for p in paths[1:])
        )
        if m <= GOAL_M:
            goal[m] = goal_verdict(rs, args.tol)
    if goal:
        met = ",".join(str(m) for m, v in goal.items() if not v) or "none"
        missed = "; ".join(f"M={m} ({v})" for m, v in goal.items() if v)
        print(
            f"goal at M ≤ {GOAL_M}: met at M = {met}" + (f"; missed at {missed}" if missed else "")
        )
    print_first_calls("graph", "capture of its bucket", lat["aotc_graph"])
    if any(info.get("cudagraphs") for info in modes.values()):
        print(
            "* replays CUDA graphs (inductor's default in this mode), as aotc graph does: "
            "the like-for-like comparison"
        )
    for mode, info in modes.items():
        skips = info.get("cudagraph_skips")
        print(
            f"{heading('compile_' + mode, modes)}: torch.compile mode={mode!r}, dynamic=False; "
            f"inductor options {info['options']}: CUDA graphs "
            + ("on" if info.get("cudagraphs") else "off")
            + (f" but SKIPPED {skips} time(s) (TORCH_LOGS=perf_hints says why)" if skips else "")
        )
        print_first_calls(
            f"torch.compile {mode}",
            "compile; caches empty when this process started",
            lat[f"compile_{mode}"],
        )
    print('"-": not measured; "error": failed, message on stderr')
    print_host(lat, paths, heads, w, rows)
    print_errors(args, lat, paths, rows)


def print_host(
    lat: dict[str, dict[str, Result]],
    paths: list[str],
    heads: dict[str, str],
    w: dict[str, int],
    rows: list[int],
) -> None:
    """The host's side of the same loops: µs of CPU per call, time the GPU does not see
    while it is busy, but a serving process pays."""
    print("\nhost time to submit one call, µs (CPU, same loops)")
    print(f"{'M':>6}" + "".join(f"{heads[p]:>{w[p]}}" for p in paths))
    for m in rows:
        cells = []
        for p in paths:
            r = lat[p].get(str(m))
            ok_ = r is not None and not r.get("error") and "host_us" in r
            cells.append(f"{r['host_us']:.1f}" if ok_ and r is not None else "-")
        print(f"{m:>6}" + "".join(f"{c:>{w[p]}}" for c, p in zip(cells, paths, strict=True)))


def print_first_calls(name: str, what: str, results: dict[str, Result]) -> None:
    firsts = [r["first_call_s"] for r in results.values() if not r.get("error")]
    if firsts:
        print(
            f"  {name}: first call per M ({what}) {min(firsts):.2f}-{max(firsts):.2f} s, "
            f"{sum(firsts):.1f} s in all"
        )


def goal_verdict(rs: dict[str, Result | None], tol: float) -> str:
    """'' when the graph is measured, correct and the fastest path measured; else why not."""
    g = rs["aotc_graph"]
    if g is None or g.get("error"):
        return "graph not measured"
    if not ok(g["rel_error"], tol):
        return "graph output wrong"
    faster = [
        f"{long_label(p)} {r['us'] / g['us']:.2f}x"
        for p, r in rs.items()
        if p != "aotc_graph" and r is not None and not r.get("error") and r["us"] < g["us"]
    ]
    return ", ".join(faster)


def print_errors(
    args: argparse.Namespace, lat: dict[str, dict[str, Result]], paths: list[str], rows: list[int]
) -> None:
    widths = {p: max(len(label(p)), 8) + 2 for p in paths}
    print(
        f"\ncorrectness: max|y - ref| / max|ref| against mlp_torch in float32 "
        f'("!" = above {args.tol:g})'
    )
    print(f"{'M':>6}" + "".join(f"{label(p):>{widths[p]}}" for p in paths))
    bad = 0
    for m in rows:
        line = f"{m:>6}"
        for p in paths:
            r = lat[p].get(str(m))
            if r is None:
                cell = "-"
            elif r.get("error"):
                cell = "error"
            else:
                cell = f"{r['rel_error']:.1e}" + ("" if ok(r["rel_error"], args.tol) else "!")
                bad += not ok(r["rel_error"], args.tol)
            line += f"{cell:>{widths[p]}}"
        print(line)
    print("all measured outputs within tolerance" if not bad else f"{bad} output(s) WRONG")


# --------------------------------------------------------------------------- time to ready

_READY_HEAD = r"""
import json, sys, time
t0 = time.perf_counter()
import torch
sys.path.insert(0, sys.argv[2])
from mlp_torch import TorchMLP, float_weights, make_input, make_weights, reference, rel_error
weights = make_weights()
x = make_input(1)
torch.cuda.synchronize()
t1 = time.perf_counter()
"""

READY_AOTC = (
    _READY_HEAD
    + r"""
import loader
t2 = time.perf_counter()
b = loader.open(sys.argv[1])
t3 = time.perf_counter()
w_norm, w_gate_up, w_down = weights
mlp = b.pipeline("mlp", w_norm=w_norm, w_gate_up=w_gate_up, w_down=w_down)
t4 = time.perf_counter()
y = mlp(x)
torch.cuda.synchronize()
t5 = time.perf_counter()
out = torch.empty_like(x)
for _ in range(2):
    mlp(x, out)
torch.cuda.synchronize()
t6 = time.perf_counter()
err = rel_error(y, reference(x, float_weights(weights)))
r = {"torch_setup": t1 - t0, "import": t2 - t1, "open": t3 - t2, "bind": t4 - t3,
     "first_call": t5 - t4, "ready": t5 - t1, "three_calls": t6 - t1, "total": t5 - t0,
     "rel_error": err}
try:
    t7 = time.perf_counter()
    mlp.warmup()
    torch.cuda.synchronize()
    r["warmup_all"] = time.perf_counter() - t7
    r["buckets"] = len(mlp.buckets["M"])
except Exception as exc:
    print(f"warmup() of all buckets failed: {type(exc).__name__}: {exc}", file=sys.stderr)
print(json.dumps(r))
"""
)

READY_COMPILE = (
    _READY_HEAD
    + r"""
import torch._dynamo, torch._inductor
t2 = time.perf_counter()
fn = torch.compile(TorchMLP(*weights), mode=sys.argv[1], dynamic=False)
t3 = time.perf_counter()
with torch.no_grad():
    y = fn(x)
    torch.cuda.synchronize()
    t4 = time.perf_counter()
    y = y.clone()
    for _ in range(2):
        fn(x)
    torch.cuda.synchronize()
    t5 = time.perf_counter()
err = rel_error(y, reference(x, float_weights(weights)))
print(json.dumps({"torch_setup": t1 - t0, "import": t2 - t1, "bind": t3 - t2,
                  "first_call": t4 - t3, "ready": t4 - t1, "three_calls": t5 - t1,
                  "total": t4 - t0,
                  "rel_error": err}))
"""
)


def ready_once(code: str, arg: str, env: dict[str, str], timeout: float) -> dict[str, Any]:
    t0 = time.perf_counter()
    try:
        proc = subprocess.run(
            [sys.executable, "-c", code, arg, str(BENCH)],
            capture_output=True,
            text=True,
            env=env,
            cwd=ROOT,
            timeout=timeout,
        )
    except subprocess.TimeoutExpired:
        return {"error": f"timeout after {timeout:g} s"}
    wall = time.perf_counter() - t0
    lines = proc.stdout.strip().splitlines()
    if proc.returncode != 0 or not lines:
        tail = proc.stderr.strip().splitlines()[-15:]
        sys.stderr.write("\n".join(tail) + "\n")
        last = tail[-1] if tail else ""
        return {"error": f"exit code {proc.returncode}: {last}"[:1000]}
    try:
        r: dict[str, Any] = json.loads(lines[-1])
    except ValueError:
        return {"error": f"no result on the last line of its output: {lines[-1][:200]!r}"}
    r["process_wall"] = wall
    return r


def median_run(runs: list[dict[str, Any]]) -> dict[str, Any]:
    good = [r for r in runs if not r.get("error")]
    if not good:
        return runs[0]
    keys = set.intersection(*(set(r) for r in good))
    return {k: statistics.median(r[k] for r in good) for k in sorted(keys)}


def ready(args: argparse.Namespace, results: dict[str, Any]) -> None:
    base = {**os.environ, "PYTHONUNBUFFERED": "1"}
    base["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))
    runs: dict[str, list[dict[str, Any]]] = {"aotc": []}
    for mode in args.modes:
        runs[f"compile_{mode}_cold"] = []
        runs[f"compile_{mode}_warm"] = []
    for i in range(args.ready_runs):
        r = ready_once(READY_AOTC, args.bundle, base, args.ready_timeout)
        log_ready("aotc", i, r)
        runs["aotc"].append(r)
        for mode in args.modes:
            with tempfile.TemporaryDirectory(prefix="pipeline-bench-") as tmp:
                env = {
                    **base,
                    "TORCHINDUCTOR_CACHE_DIR": os.path.join(tmp, "inductor"),
                    "TRITON_CACHE_DIR": os.path.join(tmp, "triton"),
                }
                for temp in ("cold", "warm"):
                    r = ready_once(READY_COMPILE, mode, env, args.ready_timeout)
                    log_ready(f"compile {mode} {temp}", i, r)
                    runs[f"compile_{mode}_{temp}"].append(r)
    results["ready_runs"] = runs
    results["ready"] = {k: median_run(v) for k, v in runs.items()}


def log_ready(name: str, i: int, r: dict[str, Any]) -> None:
    if r.get("error"):
        log(f"ready {name} (run {i + 1}): ERROR {r['error']}")
    else:
        log(f"ready {name} (run {i + 1}): {r['ready']:.3f} s, rel. error {r['rel_error']:.1e}")


def print_ready(args: argparse.Namespace, results: dict[str, Any]) -> None:
    rdy = results["ready"]
    print(
        "\ntime to ready at M=1 in a fresh process (s; median of "
        f"{args.ready_runs}; from after torch has made the inputs to the first result)"
    )
    print(f"goal: aotc ready under {READY_GOAL_S:g} s, where torch.compile takes tens of seconds")
    cols = ("import", "open", "bind", "first_call", "ready", "three_calls", "torch_setup", "total")
    heads = ("import", "open", "bind", "1st call", "ready", "3 calls", "setup", "total")
    print(f"{'path':<34}" + "".join(f"{h:>9}" for h in heads) + f"{'vs aotc':>9}{'rel.err':>9}")
    a = rdy.get("aotc", {})
    base = a.get("ready") if not a.get("error") else None
    for name, r in rdy.items():
        title = name.replace("compile_", "torch.compile ").replace("_", ", ")
        if r.get("error"):
            print(f"{title:<34}{'error':>9}  {r['error'][:100]}")
            continue
        cells = "".join(f"{r[c]:>9.3f}" if c in r else f"{'-':>9}" for c in cols)
        ratio = f"{r['ready'] / base:.1f}x" if base else "-"
        err = f"{r['rel_error']:.1e}" + ("" if ok(r["rel_error"], args.tol) else "!")
        print(f"{title:<34}{cells}{ratio:>9}{err:>9}")
    if base is not None:
        verdict = "met" if base < READY_GOAL_S and ok(a["rel_error"], args.tol) else "MISSED"
        print(f"aotc ready in {base:.3f} s: goal {verdict}")
    if "warmup_all" in a:
        print(
            f"aotc warmup() of all {int(a['buckets'])} buckets, after the first call: "
            f"{a['warmup_all']:.3f} s"
        )
    print(
        "ready = import + open + bind + 1st call; 1st call includes aotc's capture of the M=1 "
        "graph and torch.compile's compile.\n3 calls: ready to the end of the third call "
        "(torch.compile's CUDA graphs record at the second and replay from the third).\n"
        "setup: import torch, CUDA init and the inputs, before ready starts; total = setup + ready."
    )


# --------------------------------------------------------------------------- main


def environment() -> dict[str, Any]:
    import torch

    info: dict[str, Any] = {"python": sys.version.split()[0], "torch": torch.__version__}
    try:
        import triton

        info["triton"] = triton.__version__
    except Exception:
        info["triton"] = None
    if torch.cuda.is_available():
        info["gpu"] = torch.cuda.get_device_name()
    return info


def save(args: argparse.Namespace, results: dict[str, Any]) -> None:
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(results, indent=1, default=str))


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    print_plan(args)
    if args.dry_run:
        return
    # The in-process compiles get their own empty caches, so that their compile times do not
    # depend on earlier runs on this machine; set before torch reads them.
    own_cache = tempfile.mkdtemp(prefix="pipeline-bench-main-")
    os.environ["TORCHINDUCTOR_CACHE_DIR"] = os.path.join(own_cache, "inductor")
    os.environ["TRITON_CACHE_DIR"] = os.path.join(own_cache, "triton")
    results: dict[str, Any] = {"args": vars(args), "environment": environment()}
    log(f"environment: {results['environment']}")
    try:
        if not args.skip_latency:
            latency(args, results)
            save(args, results)
            print_latency(args, results)
        if not args.skip_ready:
            ready(args, results)
            save(args, results)
            print_ready(args, results)
    finally:
        save(args, results)
        shutil.rmtree(own_cache, ignore_errors=True)
    log("done")


if __name__ == "__main__":
    main()
