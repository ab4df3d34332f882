"""The LLM decode step (recipes/decode.toml's pipeline ``decode_step``, issue 20) on a GPU:
aotc's captured graph against the same step in eager PyTorch and under torch.compile
(max-autotune), per token bucket; then the time to ready in a fresh process.

Run on a GPU machine from the repository root, with a bundle built from recipes/decode.toml:

    PYTHONPATH=$PWD python benchmarks/decode_step_bench.py --bundle decode.aotc --json out.json

1. Latency per step at each T (tokens, one per sequence), every sequence at the same
   context length (``--context``, or as many tokens as the 16384-block cache holds), in µs
   with the others' time over aotc's (higher: aotc faster). Each path is called once first
   (capture, or compile: its time is printed), then ``--warmup`` calls and ``--repeats``
   loops of back-to-back calls (~``--target-ms`` each) timed with CUDA events, as
   pipeline_bench.py times them; the median.
   torch.compile runs only at ``--compile-sizes`` (each compiles for long). The eager step
   and the compiled one are recipes/decode/step.py's ``eager_step``: the cache written by
   index, the context gathered through the block table for SDPA, the MoE as a loop over
   the experts.
2. Time to ready (``--ready``): a fresh process imports the loader, opens the bundle,
   binds the weights, captures all ten buckets' graphs (``warmup()``) and runs the first
   step at T=1, synchronised; the weights are made first, untimed. The loader and the
   recipe's Python are compiled to bytecode beforehand, as pip does at install
   (bytecode_env.py).
3. The same for torch.compile (``--compile-ready SIZES``): a fresh process compiles
   ``eager_step`` (max-autotune, ``dynamic=False``) and runs its first step at each size,
   synchronised, twice: with empty Inductor and Triton caches (cold), then again in a new
   process over the caches the first left (warm: what a service that keeps its compile
   caches pays at every start).
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(Path(__file__).resolve().parent))
SIZES = [1, 2, 4, 8, 16, 32, 64, 128, 256, 512]


def log(msg: str) -> None:
    print(f"[decode-step] {msg}", file=sys.stderr, flush=True)


def step_module() -> Any:
    spec = importlib.util.spec_from_file_location("decode_step", ROOT / "recipes/decode/step.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def time_us(fn: Any, args: argparse.Namespace) -> float:
    """Median µs per call of back-to-back calls (pipeline_bench's loops)."""
    from pipeline_bench import time_calls

    return statistics.median(time_calls(fn, args)[0])


def first_call_s(fn: Any) -> float:
    import torch

    torch.cuda.synchronize()
    t0 = time.perf_counter()
    fn()
    torch.cuda.synchronize()
    return time.perf_counter() - t0


def latency(args: argparse.Namespace, out: dict[str, Any]) -> None:
    import torch

    import loader

    step = step_module()
    weights = step.make_weights("cuda")
    pipeline = loader.open(args.bundle).pipeline("decode_step", **weights)
    rows = out.setdefault("latency", [])
    for t in args.sizes:
        per_seq = args.verify or 1  # tokens per sequence
        context = min(args.context, step.CACHE_BLOCKS * step.BLOCK_SIZE * per_seq // t)
        if args.verify:
            inputs = step.make_verify_inputs([context] * (t // per_seq), per_seq, seed=t)
        else:
            inputs = step.make_inputs([context] * t, seed=t)
        given = [inputs[k] for k in step.INPUTS]
        blocks = -(-context // step.BLOCK_SIZE)
        row: dict[str, Any] = {"T": t, "context": context, "verify": args.verify}
        aotc_out = torch.empty_like(inputs["x"])
        paths = {"aotc": lambda: pipeline(*given, aotc_out),  # noqa: B023
                 "eager": lambda: step.eager_step(*given, weights, blocks)}  # noqa: B023  # fmt: skip
        if t in args.compile_sizes:
            compiled = torch.compile(step.eager_step, mode="max-autotune", dynamic=False)
            paths["compiled"] = lambda: compiled(*given, weights, blocks)  # noqa: B023
        for name, fn in paths.items():
            try:
                row[f"{name}_first_s"] = first_call_s(fn)
                row[f"{name}_us"] = time_us(fn, args)
            except Exception as exc:  # reported in its cell; the other paths go on
                row[f"{name}_error"] = f"{type(exc).__name__}: {exc}"[:300]
                log(f"T={t} {name}: {row[f'{name}_error']}")
        log(json.dumps(row))
        rows.append(row)
        save(args, out)


def ready_child(bundle: str) -> None:
    """In a fresh process: the weights (untimed), then import, open, bind, capture all
    buckets, first step."""
    import torch

    step = step_module()
    weights = step.make_weights("cuda")
    inputs = step.make_inputs([1], seed=1)
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    import loader

    t_import = time.perf_counter()
    pipeline = loader.open(bundle).pipeline("decode_step", **weights)
    t_bind = time.perf_counter()
    pipeline.warmup()
    t_capture = time.perf_counter()
    pipeline(*(inputs[k] for k in step.INPUTS))
    torch.cuda.synchronize()
    t_end = time.perf_counter()
    times = {"import_s": t_import - t0, "open_bind_s": t_bind - t_import,
             "capture_10_s": t_capture - t_bind, "first_step_s": t_end - t_capture,
             "total_s": t_end - t0, "captured": len(pipeline.captured)}  # fmt: skip
    print("RESULT " + json.dumps(times))


def ready(args: argparse.Namespace, out: dict[str, Any]) -> None:
    from bytecode_env import compile_bytecode

    compile_bytecode(ROOT / "loader", ROOT / "recipes" / "decode")  # as installed
    runs = []
    for _ in range(args.ready_runs):
        runs.append(child_result(["--child", "--bundle", args.bundle], dict(os.environ)))
        log(json.dumps(runs[-1]))
    out["ready"] = runs
    save(args, out)


def child_result(argv: list[str], env: dict[str, str]) -> dict[str, Any]:
    """The RESULT line of this script run in a fresh process with ``argv``."""
    proc = subprocess.run([sys.executable, __file__, *argv], env=env, capture_output=True,
                          text=True, timeout=1800)  # fmt: skip
    line = next((x for x in proc.stdout.splitlines() if x.startswith("RESULT ")), None)
    if line is None:
        return {"error": (proc.stderr or proc.stdout)[-600:]}
    result: dict[str, Any] = json.loads(line[len("RESULT ") :])
    return result


def compile_ready_child(sizes: list[int]) -> None:
    """In a fresh process: the weights and inputs (untimed), then torch.compile's first
    step at each size."""
    import torch

    step = step_module()
    weights = step.make_weights("cuda")
    contexts = [min(1024, step.CACHE_BLOCKS * step.BLOCK_SIZE // t) for t in sizes]  # latency's
    calls = [[step.make_inputs([n] * t, seed=t)[k] for k in step.INPUTS]
             for t, n in zip(sizes, contexts, strict=True)]  # fmt: skip
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    compiled = torch.compile(step.eager_step, mode="max-autotune", dynamic=False)
    per_size = {}
    for t, n, given in zip(sizes, contexts, calls, strict=True):
        t1 = time.perf_counter()
        compiled(*given, weights, -(-n // step.BLOCK_SIZE))
        torch.cuda.synchronize()
        per_size[str(t)] = time.perf_counter() - t1
    print("RESULT " + json.dumps({"total_s": time.perf_counter() - t0, "per_size_s": per_size}))


def compile_ready(args: argparse.Namespace, out: dict[str, Any]) -> None:
    from bytecode_env import compile_bytecode

    compile_bytecode(ROOT / "recipes" / "decode")  # as installed
    runs = {}
    with tempfile.TemporaryDirectory(prefix="decode-compile-ready-") as tmp:
        env = {**os.environ, "TORCHINDUCTOR_CACHE_DIR": f"{tmp}/inductor",
               "TRITON_CACHE_DIR": f"{tmp}/triton"}  # fmt: skip
        for cache in ("cold", "warm"):  # the second process finds the first's caches
            sizes = ",".join(map(str, args.compile_ready))
            runs[cache] = child_result(["--compile-child", sizes, "--bundle", args.bundle], env)
            log(f"torch.compile ready, {cache}: {json.dumps(runs[cache])}")
    out["compile_ready"] = runs
    save(args, out)


def save(args: argparse.Namespace, out: dict[str, Any]) -> None:
    if args.json:
        Path(args.json).write_text(json.dumps(out, indent=1))


def cell(row: dict[str, Any], name: str) -> str:
    if f"{name}_error" in row:
        return "error"
    return f"{row[f'{name}_us']:.1f}" if f"{name}_us" in row else "-"


def ratio(row: dict[str, Any], name: str) -> str:
    if f"{name}_us" not in row or "aotc_us" not in row:
        return "-"
    return f"{row[f'{name}_us'] / row['aotc_us']:.2f}x"


def print_tables(out: dict[str, Any]) -> None:
    rows = out.get("latency", [])
    verify = f", {rows[0]['verify']} tokens per sequence" if rows and rows[0]["verify"] else ""
    print(f"\nDecode step latency{verify}, µs per step (ratios: the path's time / aotc's)")
    print(f"{'T':>5}{'context':>9}{'aotc':>10}{'eager':>10}{'compiled':>10}"
          f"{'eager/aotc':>12}{'comp/aotc':>11}{'capture s':>11}{'compile s':>11}")  # fmt: skip
    for r in out.get("latency", []):
        comp = f"{r['compiled_first_s']:.1f}" if "compiled_first_s" in r else "-"
        cap = f"{r['aotc_first_s']:.3f}" if "aotc_first_s" in r else "-"
        print(f"{r['T']:>5}{r['context']:>9}{cell(r, 'aotc'):>10}{cell(r, 'eager'):>10}"
              f"{cell(r, 'compiled'):>10}{ratio(r, 'eager'):>12}{ratio(r, 'compiled'):>11}"
              f"{cap:>11}{comp:>11}")  # fmt: skip
    for cache, r in out.get("compile_ready", {}).items():
        total = f"{r['total_s']:.1f} s" if "total_s" in r else r.get("error", "?")[-200:]
        print(f"torch.compile max-autotune to its first step at every size, {cache} caches: "
              f"{total}")  # fmt: skip
    for r in out.get("ready", []):
        print("\nTime to ready in a fresh process (all ten buckets captured, first step done): "
              + ", ".join(f"{k} {v:.3f}" if isinstance(v, float) else f"{k} {v}"
                          for k, v in r.items()))  # fmt: skip


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--bundle", required=True)
    ap.add_argument("--json")
    ap.add_argument("--sizes", type=lambda s: [int(x) for x in s.split(",")], default=SIZES)
    ap.add_argument("--compile-sizes", type=lambda s: [int(x) for x in s.split(",") if x],
                    default=[1, 16, 128])  # fmt: skip
    ap.add_argument("--context", type=int, default=1024)
    ap.add_argument("--verify", type=int, default=0,
                    help="tokens per sequence (speculative decoding's verification); sizes "
                    "are then multiples of it")  # fmt: skip
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--warmup", type=int, default=10)
    ap.add_argument("--target-ms", type=float, default=25.0, help="length of one timed loop")
    ap.add_argument("--ready-runs", type=int, default=2)
    ap.add_argument("--no-latency", action="store_true")
    ap.add_argument("--compile-ready", type=lambda s: [int(x) for x in s.split(",") if x],
                    default=[], metavar="SIZES",
                    help="also time torch.compile's start at these sizes, cold, warm")  # fmt: skip
    ap.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--compile-child", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.child:
        ready_child(args.bundle)
        return
    if args.compile_child:
        compile_ready_child([int(x) for x in args.compile_child.split(",")])
        return
    out: dict[str, Any] = {}
    if not args.no_latency:
        latency(args, out)
    if args.ready_runs:
        ready(args, out)
    if args.compile_ready:
        compile_ready(args, out)
    print_tables(out)


if __name__ == "__main__":
    main()
