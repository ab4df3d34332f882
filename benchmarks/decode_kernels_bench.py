"""The decode bundle's kernels (recipes/decode.toml, issue 20) against PyTorch on a GPU, one
run: paged-decode attention against SDPA's flash backend, and the MoE layer against a
per-expert PyTorch loop and that loop under torch.compile(mode="max-autotune").

Run on a GPU machine from the repository root, with a bundle built from recipes/decode.toml:

    PYTHONPATH=$PWD python benchmarks/decode_kernels_bench.py --bundle decode.aotc --json out.json

Every path is timed the same way: ``triton.testing.do_bench`` (median, L2 flushed between
runs) around one call from Python, so each path pays its own launch costs (aotc's loader
calls, PyTorch's dispatch); attention also without them (below).

1. Attention (Llama-3-8B heads: 32 query heads on 8 KV heads, head dim 128, fp16, blocks of
   16 tokens), per (sequences, context), every sequence at the same context, at the
   buckets' bounds (1 to 256 sequences; 1k, 4k and 32k tokens). aotc: the bundle's plain
   ``paged_decode`` and, up to 16 sequences, its split-KV pair (``paged_decode_split`` then
   ``paged_decode_reduce``); the decode step runs the pair up to 4 tokens. The baseline:
   SDPA with the flash backend on the same K/V laid out contiguously (each KV head's query
   heads as its query rows, so no K/V is repeated; the other backends disabled once, up
   front). Both outputs are compared first. Each is timed twice: called from Python as
   above, in three interleaved rounds (the order rotating each round; the median of its
   rounds), and captured back to back in a CUDA graph and replayed
   (``triton.testing.do_bench_cudagraph``), as a serving engine's graphs run them: the
   GPU's time without the host's launch costs. GB/s:
   K and V read per second, also as a share of a measured device-to-device copy.
2. MoE layer (Mixtral-8x7B: 8 experts, top 2, hidden 4096, FFN 14336, bf16), per token
   count, from router logits (no two equal in a row, so both paths route alike) to the
   layer's output: aotc runs the bundle's ``topk``,
   ``align``, ``moe_up_step``, ``moe_down_step`` and ``combine`` (its residual a zero
   tensor) as the decode step chains them; the baseline is the per-expert loop
   (benchmarks/decode_jit_check.py's ``torch_moe``), eager and compiled per token count
   (``dynamic=False``; its compile time printed). The outputs are compared first.
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import torch  # noqa: E402

from benchmarks.decode_jit_check import copy_bandwidth, torch_moe  # noqa: E402
from benchmarks.hopper_bench import interleaved  # noqa: E402
from benchmarks.jit_common import bench, load  # noqa: E402

DECODE = ROOT / "recipes" / "decode"
ref = load(DECODE, "reference")
calls = load(DECODE, "calls")
# the recipe's shapes, as its inputs make them (recipes/decode/calls.py)
HQ, HKV, HEAD_DIM = calls.NUM_Q_HEADS, calls.NUM_KV_HEADS, calls.HEAD_DIM
BLOCK_SIZE, SPLITS = calls.BLOCK_SIZE, calls.NUM_SPLITS
EXPERTS, TOP_K, HIDDEN, FFN, ALIGN = 8, 2, 4096, 14336, 64
SEQS = [1, 2, 4, 8, 16, 32, 64, 128, 256]
CONTEXTS = [1024, 4096, 32768]
TOKENS = [1, 2, 4, 8, 16, 32, 64, 128, 256, 512]
ATTENTION_ROUNDS = 3  # called from Python: each path's time is the median of its rounds
MAX_TOKENS_IN_CACHE = 4 << 20  # K/V of 4M tokens: 16 GiB in each layout


def log(msg: str) -> None:
    print(f"[decode-kernels] {msg}", file=sys.stderr, flush=True)


def relative(out: torch.Tensor, expected: torch.Tensor) -> float:
    d = out.double() - expected.double()
    return float(torch.linalg.norm(d) / torch.linalg.norm(expected.double()))


# -- attention -------------------------------------------------------------------------------


def attention_row(bundle: Any, seqs: int, ctx: int, copy_gbs: float) -> dict[str, Any]:
    g = torch.Generator(device="cuda").manual_seed(seqs * 7 + ctx)
    q = torch.randn(seqs, HQ, HEAD_DIM, generator=g, device="cuda").half()
    k, v = (torch.randn(seqs, HKV, ctx, HEAD_DIM, generator=g, device="cuda").half()
            for _ in range(2))  # fmt: skip
    kc, vc, table = ref.paged_from_contiguous(k, v, BLOCK_SIZE)
    width = table.shape[1]
    lens = torch.full((seqs,), ctx, dtype=torch.int32, device="cuda")
    out = torch.empty_like(q)
    scale = 1.0 / math.sqrt(HEAD_DIM)
    strides = [q.stride(0), q.stride(1), *kc.stride()[:3], *vc.stride()[:3], table.stride(0)]

    def plain() -> None:
        bundle["paged_decode"](q, kc, vc, table, lens, out, scale, seqs, width, *strides,
                               out.stride(0), out.stride(1))  # fmt: skip

    rows = (seqs, HQ, SPLITS)
    part = (torch.empty(*rows, HEAD_DIM, device="cuda"), torch.empty(rows, device="cuda"),
            torch.empty(rows, device="cuda"))  # fmt: skip

    def split() -> None:
        bundle["paged_decode_split"](q, kc, vc, table, lens, *part, scale, seqs, width, *strides)
        bundle["paged_decode_reduce"](*part, out, seqs, out.stride(0), out.stride(1))

    qg = q.reshape(seqs, HKV, HQ // HKV, HEAD_DIM)  # each KV head's query heads as its rows

    def sdpa() -> torch.Tensor:  # only the flash backend is enabled (main)
        return torch.nn.functional.scaled_dot_product_attention(qg, k, v, scale=scale)

    expected = sdpa().reshape(out.shape)
    row: dict[str, Any] = {"seqs": seqs, "context": ctx}
    paths = {"plain": plain, **({"split": split} if seqs <= 16 else {})}
    for name, fn in paths.items():
        out.fill_(float("nan"))
        fn()
        row[f"{name}_error"] = relative(out, expected)  # the same data both ways
        assert row[f"{name}_error"] < 1e-2, (name, row)
    # interleaved rounds, the order rotating: no path always runs on a GPU another heated
    for name, us in interleaved({**paths, "sdpa": sdpa}, ATTENTION_ROUNDS).items():
        row[f"{name}_ms"] = statistics.median(us) / 1e3
    for name, fn in {**paths, "sdpa": sdpa}.items():  # as a serving graph replays them
        try:
            row[f"{name}_graph_ms"] = graph_ms(fn)
        except Exception as exc:  # reported in the JSON; the eager figures stand
            row[f"{name}_graph_error"] = f"{type(exc).__name__}: {exc}"[:300]
    best = min(row[f"{name}_ms"] for name in paths)
    gbytes = 2 * seqs * HKV * ctx * HEAD_DIM * 2 / 1e9
    row["gbs"] = gbytes / (best * 1e-3)
    row["of_copy"] = row["gbs"] / copy_gbs
    return row


def graph_ms(fn: Any) -> float:
    """Mean ms per call of calls captured back to back in one CUDA graph and replayed: the
    GPU's time without the host's launch costs (L2 not flushed)."""
    import triton.testing

    return float(triton.testing.do_bench_cudagraph(fn, rep=20))


# -- MoE ---------------------------------------------------------------------------------------


def moe_row(
    bundle: Any, t: int, weights: tuple[torch.Tensor, torch.Tensor], compile_: bool
) -> dict[str, Any]:
    w1, w2 = weights
    g = torch.Generator(device="cuda").manual_seed(t)
    x = torch.randn(t, HIDDEN, generator=g, device="cuda").bfloat16()
    logits = calls.topk_inputs({"num_tokens": t}, {"T": "bf16"})[0]  # no ties in a row
    pairs = t * TOP_K
    capacity = pairs + EXPERTS * (ALIGN - 1)
    i32 = {"dtype": torch.int32, "device": "cuda"}
    topk_w = torch.empty(pairs, device="cuda")
    topk_ids = torch.empty(pairs, **i32)
    sorted_ids = torch.empty(capacity, **i32)
    expert_ids = torch.empty(capacity // ALIGN, **i32)
    padded = torch.empty(1, **i32)
    act = torch.empty(pairs, FFN, device="cuda", dtype=torch.bfloat16)
    down = torch.empty(pairs, HIDDEN, device="cuda", dtype=torch.bfloat16)
    zero = torch.zeros_like(x)
    out = torch.empty_like(x)
    routing = (topk_w, sorted_ids, expert_ids, padded, pairs)

    def ours() -> torch.Tensor:
        bundle["topk"](logits, topk_w, topk_ids, t, logits.stride(0))
        bundle["align"](topk_ids, sorted_ids, expert_ids, padded, pairs)
        bundle["moe_up_step"](x, w1, act, *routing, FFN, HIDDEN, x.stride(0), *w1.stride(),
                              act.stride(0))  # fmt: skip
        bundle["moe_down_step"](act, w2, down, *routing, HIDDEN, FFN, act.stride(0),
                                *w2.stride(), down.stride(0))  # fmt: skip
        bundle["combine"](down, topk_w, zero, out, t, HIDDEN, down.stride(0), out.stride(0))
        return out

    def loop() -> torch.Tensor:
        return torch_moe(x, w1, w2, logits, TOP_K)

    expected = loop()
    row: dict[str, Any] = {"T": t, "error": relative(ours(), expected)}
    assert row["error"] < 2e-2, row
    row["aotc_ms"] = bench(ours)
    row["loop_ms"] = bench(loop)
    if compile_:
        compiled = torch.compile(torch_moe, mode="max-autotune", dynamic=False)
        t0 = time.perf_counter()
        compiled(x, w1, w2, logits, TOP_K)
        torch.cuda.synchronize()
        row["compile_s"] = time.perf_counter() - t0
        row["compiled_ms"] = bench(lambda: compiled(x, w1, w2, logits, TOP_K))
    return row


# -- tables ------------------------------------------------------------------------------------


def _cells(r: dict[str, Any], suffix: str) -> str:
    """plain, split, flash (µs) and flash over the faster aotc path, for one timing."""
    us = {name: r[f"{name}{suffix}"] * 1e3 for name in ("plain", "split", "sdpa")
          if f"{name}{suffix}" in r}  # fmt: skip
    cells = "".join(f"{us[n]:9.1f}" if n in us else f"{'-':>9}" for n in ("plain", "split", "sdpa"))
    ours = min((us[n] for n in ("plain", "split") if n in us), default=None)
    ratio = f"{us['sdpa'] / ours:11.2f}x" if ours and "sdpa" in us else f"{'-':>12}"
    return cells + ratio


def print_tables(out: dict[str, Any]) -> None:
    print(f"\nPaged decode attention, fp16, µs (ratio: SDPA flash's time / aotc's faster path; "
          f"device copy {out.get('copy_gbs', 0):.0f} GB/s); called from Python, then replayed "
          "from CUDA graphs")  # fmt: skip
    times = f"{'plain':>9}{'split':>9}{'flash':>9}{'flash/aotc':>12}"
    print(f"{'seqs':>5}{'context':>9}{times}{'GB/s':>7}{'of copy':>9}  |{times}")
    for r in out.get("attention", []):
        print(f"{r['seqs']:>5}{r['context']:>9}" + _cells(r, "_ms")
              + f"{r['gbs']:7.0f}{r['of_copy']:9.0%}  |" + _cells(r, "_graph_ms"))  # fmt: skip
    print("\nMoE layer, bf16, µs, routing to output (ratios: the path's time / aotc's)")
    print(f"{'T':>5}{'aotc':>9}{'loop':>9}{'compiled':>10}{'loop/aotc':>11}{'comp/aotc':>11}"
          f"{'compile s':>11}{'error':>9}")  # fmt: skip
    for r in out.get("moe", []):
        comp = "compiled_ms" in r
        print(f"{r['T']:>5}{r['aotc_ms'] * 1e3:9.1f}{r['loop_ms'] * 1e3:9.1f}"
              + (f"{r['compiled_ms'] * 1e3:10.1f}" if comp else f"{'-':>10}")
              + f"{r['loop_ms'] / r['aotc_ms']:10.2f}x"
              + (f"{r['compiled_ms'] / r['aotc_ms']:10.2f}x{r['compile_s']:11.1f}" if comp
                 else f"{'-':>11}{'-':>11}")
              + f"{r['error']:9.1e}")  # fmt: skip


def main(argv: list[str] | None = None) -> None:
    ints = lambda s: [int(x) for x in s.split(",") if x]  # noqa: E731
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--bundle", required=True)
    ap.add_argument("--json")
    ap.add_argument("--seqs", type=ints, default=SEQS)
    ap.add_argument("--contexts", type=ints, default=CONTEXTS)
    ap.add_argument("--tokens", type=ints, default=TOKENS)
    ap.add_argument(
        "--compile-tokens",
        type=ints,
        default=TOKENS,
        help="token counts at which the loop is also compiled (each compiles)",
    )
    ap.add_argument("--skip", choices=["attention", "moe"], action="append", default=[])
    args = ap.parse_args(argv)

    import loader

    bundle = loader.open(args.bundle)
    out: dict[str, Any] = {"device": torch.cuda.get_device_name()}

    def save() -> None:
        if args.json:
            Path(args.json).write_text(json.dumps(out, indent=1))

    if "attention" not in args.skip:
        # SDPA's flash backend and no other, set once (not a context manager per call)
        torch.backends.cuda.enable_math_sdp(False)
        torch.backends.cuda.enable_mem_efficient_sdp(False)
        torch.backends.cuda.enable_cudnn_sdp(False)
        torch.backends.cuda.enable_flash_sdp(True)
        out["copy_gbs"] = copy_bandwidth()
        for ctx in args.contexts:
            for seqs in args.seqs:
                if seqs * ctx > MAX_TOKENS_IN_CACHE:
                    continue
                try:
                    out.setdefault("attention", []).append(
                        attention_row(bundle, seqs, ctx, out["copy_gbs"])
                    )
                except Exception as exc:  # a failing shape is reported; the others go on
                    log(f"attention seqs={seqs} ctx={ctx}: {type(exc).__name__}: {exc}"[:400])
                log(json.dumps(out.get("attention", [{}])[-1]))
                torch.cuda.empty_cache()
                save()
    if "moe" not in args.skip:
        g = torch.Generator(device="cuda").manual_seed(0)
        w1 = (torch.randn(EXPERTS, HIDDEN, 2 * FFN, generator=g, device="cuda")
              * HIDDEN**-0.5).bfloat16()  # fmt: skip
        w2 = (torch.randn(EXPERTS, FFN, HIDDEN, generator=g, device="cuda") * FFN**-0.5).bfloat16()
        for t in args.tokens:
            try:
                out.setdefault("moe", []).append(moe_row(bundle, t, (w1, w2),
                                                         t in args.compile_tokens))  # fmt: skip
            except Exception as exc:
                log(f"moe T={t}: {type(exc).__name__}: {exc}"[:400])
            log(json.dumps(out.get("moe", [{}])[-1]))
            save()
    print_tables(out)


if __name__ == "__main__":
    main()
