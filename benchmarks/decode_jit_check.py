"""The decode kernels of recipes/decode through Triton's JIT on an H100/H200: correctness at
real sizes, then a small config sweep against PyTorch.

Standalone: torch and triton only (no aotc). From the repository root, on the GPU machine:

    python benchmarks/decode_jit_check.py            # checks, then the sweep and its table
    python benchmarks/decode_jit_check.py --quick    # checks only

Checks (against the float64 references of recipes/decode/reference.py):
- paged decode, plain and split-KV, fp16 and bf16, Llama-like heads (32 query heads on
  8 KV heads, head dim 128, cache blocks of 16 tokens): 8 sequences with ragged contexts up
  to 32k (1, 32768, block edges, random), 64 sequences up to 4k with one empty sequence;
  GQA groups of 1 and 8 in fp16; the cache slots no sequence owns hold NaN;
- the MoE layer at Mixtral's sizes (8 experts, top-2, hidden 4096, FFN 14336) for 1 to 512
  tokens (the serving buckets and three sizes between them), bf16 and fp16: routing, then
  the layer against a float64 loop over experts with the kernels' routing; in bf16, every
  GEMM config of the sweep once at 37 tokens.

Sweep (times from ``triton.testing.do_bench``, medians, L2 flushed between runs):
- decode attention over sequences of one length, per (sequences, context) the best of a few
  configs and split counts, against ``F.scaled_dot_product_attention`` with the flash
  backend on the same K/V laid out contiguously (the query heads of a KV head as its query
  rows, so no K/V is repeated); also the bandwidth reached, against a measured device copy;
- the MoE layer per token count, the best GEMM config for each projection, against the
  per-expert PyTorch loop (routing included in both).
A config that fails is printed and skipped. The final table comes last: per shape, the best
config, its time, the baseline's and baseline / ours (above 1: faster).
"""

from __future__ import annotations

import argparse
import functools
import math
import sys
import time
import traceback
import warnings
from dataclasses import dataclass
from pathlib import Path

import torch
import torch.nn.functional as F
import triton
import triton.testing

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from benchmarks.jit_common import bench, best_of, fail, load  # noqa: E402

DECODE = ROOT / "recipes" / "decode"


pa = load(DECODE, "paged_attention")
moe = load(DECODE, "moe")
ref = load(DECODE, "reference")

DEVICE = "cuda"
HQ, HKV, HEAD_DIM, BLOCK_SIZE = 32, 8, 128, 16
EXPERTS, TOP_K, HIDDEN, FFN = 8, 2, 4096, 14336
TOL = {"fp16": 1e-2, "bf16": 3e-2}  # largest error / largest expected magnitude


@dataclass(frozen=True)
class PA:
    block_n: int
    warps: int
    stages: int
    splits: int = 1

    def __str__(self) -> str:
        return f"n{self.block_n} w{self.warps} s{self.stages} x{self.splits}"


@dataclass(frozen=True)
class MG:
    bm: int
    bn: int
    bk: int
    warps: int
    stages: int

    def config(self) -> dict:
        return dict(BLOCK_M=self.bm, BLOCK_N=self.bn, BLOCK_K=self.bk, num_warps=self.warps,
                    num_stages=self.stages)  # fmt: skip

    def __str__(self) -> str:
        return f"{self.bm}x{self.bn}x{self.bk} w{self.warps} s{self.stages}"


PA_CHECK = [PA(64, 4, 2), PA(128, 8, 3), PA(64, 4, 2, 8), PA(32, 4, 3, 32)]
PA_SWEEP = [PA(64, 4, 2), PA(128, 4, 3), PA(64, 8, 3)]
PA_SPLITS = (1, 4, 16, 64)
PA_SWEEP_SHAPES = [(s, n) for s in (1, 8, 32, 128) for n in (1024, 8192, 32768)]
# decode-sized token counts take 16-row blocks (little padding); larger ones wgmma tiles
MG_SMALL = [MG(16, 64, 128, 4, 4), MG(16, 128, 128, 4, 3), MG(16, 64, 256, 4, 3),
            MG(16, 32, 256, 4, 4)]  # fmt: skip
MG_LARGE = [MG(64, 128, 64, 4, 4), MG(64, 128, 64, 8, 3), MG(128, 128, 64, 8, 3),
            MG(32, 128, 128, 4, 3)]  # fmt: skip
MOE_CHECK_TOKENS = [1, 2, 3, 4, 8, 16, 32, 37, 64, 128, 256, 300, 512]
MOE_SWEEP_TOKENS = [1, 4, 16, 64, 256, 512]


def _default_mg(T: int) -> MG:
    return MG_SMALL[0] if T <= 64 else MG_LARGE[0]


def relative_error(out, expected) -> float:
    if not bool(torch.isfinite(out).all()):
        return math.nan
    return float((out.double() - expected).abs().max() / expected.abs().max())


def _check(what: str, run, dtype: str, failures: list[str]) -> None:
    """Run one check; a failure (wrong, or raising) is recorded and printed, not raised."""
    try:
        err = run()
    except Exception as e:  # a failing config is a result, not a crash
        failures.append(f"{what}: {fail(what, e)}")
        return
    if not err < TOL[dtype]:  # NaN included
        failures.append(f"{what}: relative error {err:.3g}")
        print(f"  WRONG {what}: relative error {err:.3g}", flush=True)


# -- paged attention: checks ---------------------------------------------------------------


def attention(q, kc, vc, table, lens, out, cfg: PA):
    scale = 1.0 / math.sqrt(q.shape[-1])
    return pa.paged_attention(q, kc, vc, table, lens, out, scale, block_n=cfg.block_n,
                              num_splits=cfg.splits, num_warps=cfg.warps,
                              num_stages=cfg.stages)  # fmt: skip


def _run_paged(inputs, cfg: PA) -> float:
    q, kc, vc, table, lens = inputs
    out = torch.full_like(q, float("nan"))
    attention(q, kc, vc, table, lens, out, cfg)
    expected = ref.paged_reference(q, kc, vc, table, lens, 1.0 / math.sqrt(q.shape[-1]))
    return relative_error(out, expected)


def check_paged() -> list[str]:
    failures: list[str] = []
    long = ref.ragged_context_lens(8, 32768, BLOCK_SIZE, seed=1)
    many = [0, *ref.ragged_context_lens(63, 4096, BLOCK_SIZE, seed=2)]
    cases = [(dt, HQ, lens, PA_CHECK) for dt in ("fp16", "bf16") for lens in (long, many)]
    cases += [("fp16", hq, long, PA_CHECK[::2]) for hq in (HKV, 8 * HKV)]
    for dtype, hq, lens, cfgs in cases:
        inputs = ref.paged_inputs(lens, hq, HKV, HEAD_DIM, BLOCK_SIZE, dtype, device=DEVICE)
        for cfg in cfgs:
            what = f"paged {dtype} G={hq // HKV} seqs={len(lens)} max={max(lens)} {cfg}"
            _check(what, functools.partial(_run_paged, inputs, cfg), dtype, failures)
        del inputs
    print(f"  paged decode: {len(cases)} input sets checked", flush=True)
    return failures


# -- MoE: checks ---------------------------------------------------------------------------


def _run_route(logits) -> float:
    weights, ids = moe.route(logits, TOP_K)
    want, _ = ref.topk_reference(logits, TOP_K)
    # tie-proof: the reference's weights of the experts the kernel chose
    p = torch.softmax(logits.double(), -1).gather(1, ids.long())
    chosen = p / p.sum(-1, keepdim=True)
    return max(relative_error(weights, want), relative_error(chosen, want))


def _run_moe(inputs, cfg: MG) -> float:
    x, logits, w1, w2 = inputs
    out = moe.fused_moe(x, w1, w2, logits, TOP_K, cfg.config())
    weights, ids = moe.route(logits, TOP_K)
    return relative_error(out, ref.moe_reference(x, w1, w2, weights, ids.long()))


def check_moe() -> list[str]:
    failures: list[str] = []
    for dtype in ("bf16", "fp16"):
        x, logits, w1, w2 = ref.moe_inputs(max(MOE_CHECK_TOKENS), EXPERTS, HIDDEN, FFN, dtype,
                                           device=DEVICE)  # fmt: skip
        tokens = MOE_CHECK_TOKENS if dtype == "bf16" else MOE_CHECK_TOKENS[::3]
        for T in tokens:
            inputs = (x[:T], logits[:T], w1, w2)
            _check(f"route {dtype} T={T}", functools.partial(_run_route, logits[:T]), dtype,
                   failures)  # fmt: skip
            cfg = _default_mg(T)
            _check(f"moe {dtype} T={T} {cfg}", functools.partial(_run_moe, inputs, cfg), dtype,
                   failures)  # fmt: skip
        # every other config once (each is a compile or two: bf16 only)
        for cfg in MG_SMALL[1:] + MG_LARGE[1:] if dtype == "bf16" else []:
            inputs = (x[:37], logits[:37], w1, w2)
            _check(f"moe {dtype} T=37 {cfg}", functools.partial(_run_moe, inputs, cfg), dtype,
                   failures)  # fmt: skip
        del x, logits, w1, w2
    print("  MoE layer checked", flush=True)
    return failures


# -- sweep ---------------------------------------------------------------------------------


def copy_bandwidth() -> float:
    """GB/s of a 2 GiB device-to-device copy (bytes read plus bytes written)."""
    src = torch.empty(1 << 30, dtype=torch.float16, device=DEVICE)
    dst = torch.empty_like(src)
    ms = bench(lambda: dst.copy_(src))
    return 2 * src.numel() * 2 / (ms * 1e-3) / 1e9


def _splits(num_seqs: int, ctx: int, num_sms: int) -> list[int]:
    # more programs than a few waves, or splits of fewer than 256 tokens, only cost
    return [s for s in PA_SPLITS
            if s == 1 or (num_seqs * HKV * s <= 4 * num_sms and ctx // s >= 256)]  # fmt: skip


def _sdpa(q, k, v, scale):
    from torch.nn.attention import SDPBackend, sdpa_kernel

    qg = q.reshape(q.shape[0], HKV, -1, HEAD_DIM)  # [seqs, kv heads, group, head dim]

    def run():
        with sdpa_kernel([SDPBackend.FLASH_ATTENTION]):
            return F.scaled_dot_product_attention(qg, k, v, scale=scale)

    return run


def _sweep_one_attention(dtype: str, num_seqs: int, ctx: int, num_sms: int, copy_gbs: float):
    g = torch.Generator(device=DEVICE).manual_seed(0)
    dt = ref.DTYPES[dtype]
    q = torch.randn(num_seqs, HQ, HEAD_DIM, generator=g, device=DEVICE).to(dt)
    k, v = (torch.randn(num_seqs, HKV, ctx, HEAD_DIM, generator=g, device=DEVICE).to(dt)
            for _ in range(2))  # fmt: skip
    kc, vc, table = ref.paged_from_contiguous(k, v, BLOCK_SIZE)
    lens = torch.full((num_seqs,), ctx, dtype=torch.int32, device=DEVICE)
    out = torch.empty_like(q)
    scale = 1.0 / math.sqrt(HEAD_DIM)
    sdpa = _sdpa(q, k, v, scale)
    base = best_of([("sdpa/flash", lambda: sdpa)])
    cands = []
    for cfg in PA_SWEEP:
        for s in _splits(num_seqs, ctx, num_sms):
            c = PA(cfg.block_n, cfg.warps, cfg.stages, s)
            run = functools.partial(attention, q, kc, vc, table, lens, out, c)
            cands.append((str(c), lambda run=run: run))
    best = best_of(cands)
    if best is not None and base is not None:
        # the same data both ways: a layout slip in the benchmark shows here
        diff = (out.float() - sdpa().reshape(out.shape).float()).abs().max()
        assert float(diff) < 2e-2, f"paged and contiguous results differ by {float(diff)}"
    gbytes = 2 * num_seqs * HKV * ctx * HEAD_DIM * q.element_size() / 1e9
    shape = f"{dtype} seqs={num_seqs} ctx={ctx}"
    extra = f"{gbytes / (best[1] * 1e-3) / copy_gbs:.0%} of copy" if best else ""
    print(f"  attention {shape}: {best} vs {base} {extra}", flush=True)
    return ("attention", shape, best, gbytes, base)


def sweep_attention(dtypes: list[str], num_sms: int, copy_gbs: float) -> list[tuple]:
    rows = []
    for dtype in dtypes:
        for num_seqs, ctx in PA_SWEEP_SHAPES:
            try:
                rows.append(_sweep_one_attention(dtype, num_seqs, ctx, num_sms, copy_gbs))
            except Exception as e:
                fail(f"attention {dtype} seqs={num_seqs} ctx={ctx}", e)
            torch.cuda.empty_cache()
    return rows


def torch_moe(x, w1, w2, logits, top_k: int):
    """The per-expert loop a PyTorch model runs (Mixtral's, in eager mode)."""
    p = torch.softmax(logits.float(), -1)
    weights, ids = torch.topk(p, top_k, -1)
    weights = (weights / weights.sum(-1, keepdim=True)).to(x.dtype)
    out = torch.zeros_like(x)
    ffn = w2.shape[1]
    for e in range(w1.shape[0]):
        token, slot = torch.where(ids == e)
        if token.numel() == 0:
            continue
        h = x[token] @ w1[e]
        y = (F.silu(h[:, :ffn]) * h[:, ffn:]) @ w2[e]
        out.index_add_(0, token, y * weights[token, slot, None])
    return out


def _gemm_candidates(x, w1, w2, logits, T: int, which: str):
    weights, ids = moe.route(logits, TOP_K)
    cands = []
    for cfg in MG_SMALL if T <= 64 else MG_LARGE:
        aligned = moe.align(ids, EXPERTS, cfg.bm)
        act = x.new_empty(T * TOP_K, FFN)
        if which == "up":
            fn = functools.partial(moe.grouped_gemm, x, w1, act, weights, aligned, TOP_K,
                                   per_pair=False, mul_weight=False, silu_mul=True,
                                   config=cfg.config())  # fmt: skip
        else:
            down = x.new_empty(T * TOP_K, HIDDEN)
            fn = functools.partial(moe.grouped_gemm, act.normal_(), w2, down, weights, aligned,
                                   TOP_K, per_pair=True, mul_weight=True, silu_mul=False,
                                   config=cfg.config())  # fmt: skip
        cands.append((str(cfg), lambda fn=fn: fn))  # (label, make) for best_of: made
    return cands


def _sweep_one_moe(dtype: str, T: int, inputs):
    x, logits, w1, w2 = (t[:T] if i < 2 else t for i, t in enumerate(inputs))
    up = best_of(_gemm_candidates(x, w1, w2, logits, T, "up"))
    down = best_of(_gemm_candidates(x, w1, w2, logits, T, "down"))
    base = best_of([("torch loop", lambda: functools.partial(torch_moe, x, w1, w2, logits, TOP_K))])
    if up is None or down is None:
        return ("moe", f"{dtype} T={T}", None, 0.0, base)
    by_name = {str(c): c for c in MG_SMALL + MG_LARGE}
    cfg_up, cfg_down = by_name[up[0]], by_name[down[0]]

    def layer():
        weights, ids = moe.route(logits, TOP_K)
        a1 = moe.align(ids, EXPERTS, cfg_up.bm)
        a2 = a1 if cfg_down.bm == cfg_up.bm else moe.align(ids, EXPERTS, cfg_down.bm)
        act = x.new_empty(T * TOP_K, FFN)
        moe.grouped_gemm(x, w1, act, weights, a1, TOP_K, per_pair=False, mul_weight=False,
                         silu_mul=True, config=cfg_up.config())  # fmt: skip
        down_out = x.new_empty(T * TOP_K, HIDDEN)
        moe.grouped_gemm(act, w2, down_out, weights, a2, TOP_K, per_pair=True, mul_weight=True,
                         silu_mul=False, config=cfg_down.config())  # fmt: skip
        return moe.combine(down_out, weights, TOP_K)

    best = best_of([(f"up {cfg_up} | down {cfg_down}", lambda: layer)])
    _, ids = moe.route(logits, TOP_K)
    active = int(torch.unique(ids).numel())
    gbytes = active * (HIDDEN * 2 * FFN + FFN * HIDDEN) * x.element_size() / 1e9
    print(f"  moe {dtype} T={T}: {best} (up {up}, down {down}) vs {base}", flush=True)
    return ("moe", f"{dtype} T={T}", best, gbytes, base)


def sweep_moe(dtypes: list[str]) -> list[tuple]:
    rows = []
    for dtype in dtypes:
        inputs = ref.moe_inputs(max(MOE_SWEEP_TOKENS), EXPERTS, HIDDEN, FFN, dtype,
                                device=DEVICE)  # fmt: skip
        for T in MOE_SWEEP_TOKENS:
            try:
                rows.append(_sweep_one_moe(dtype, T, inputs))
            except Exception as e:
                fail(f"moe {dtype} T={T}", e)
        del inputs
        torch.cuda.empty_cache()
    return rows


def print_table(rows: list[tuple], copy_gbs: float) -> None:
    print("\n== decode kernels against PyTorch (ratio = baseline ms / ours; > 1: faster) ==")
    print(f"device copy bandwidth: {copy_gbs:.0f} GB/s (GB/s below: K/V or active expert "
          "weights read, per second)")  # fmt: skip
    head = f"{'kernel':<10} {'shape':<28} {'best config':<44} {'ms':>8} {'GB/s':>7} "
    print(head + f"{'baseline':<11} {'ms':>8} {'ratio':>6}")
    for kernel, shape, best, gbytes, base in rows:
        if best is None:
            print(f"{kernel:<10} {shape:<28} {'(every config failed)':<44}")
            continue
        label, ms = best
        base_name, base_ms = base if base else ("-", math.nan)
        print(
            f"{kernel:<10} {shape:<28} {label:<44} {ms:8.4f} {gbytes / (ms * 1e-3):7.0f} "
            f"{base_name:<11} {base_ms:8.4f} {base_ms / ms:6.2f}"
        )


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--quick", action="store_true", help="correctness checks only")
    p.add_argument("--attention-dtypes", default="fp16", help="dtypes of the attention sweep")
    p.add_argument("--moe-dtypes", default="bf16", help="dtypes of the MoE sweep")
    args = p.parse_args()
    warnings.filterwarnings("ignore", category=UserWarning)
    if not torch.cuda.is_available() or torch.cuda.get_device_capability()[0] < 9:
        print("needs a CUDA GPU of compute capability 9.0 or later (H100/H200)")
        return 2
    props = torch.cuda.get_device_properties(0)
    num_sms = props.multi_processor_count
    print(f"{props.name}, {num_sms} SMs; torch {torch.__version__}, triton {triton.__version__}")

    t0 = time.perf_counter()
    failures = check_paged() + check_moe()
    print(f"checks: {len(failures)} failed ({time.perf_counter() - t0:.0f} s)", flush=True)
    rows: list[tuple] = []
    copy_gbs = math.nan
    if not args.quick:
        t1 = time.perf_counter()
        copy_gbs = copy_bandwidth()
        rows += sweep_attention(args.attention_dtypes.split(","), num_sms, copy_gbs)
        t2 = time.perf_counter()
        rows += sweep_moe(args.moe_dtypes.split(","))
        print(f"sweep: attention {t2 - t1:.0f} s, moe {time.perf_counter() - t2:.0f} s")
    if failures:
        print("\n== FAILED CHECKS ==")
        print("\n".join(failures))
    print(
        f"\n{'FAIL' if failures else 'OK'}: {len(failures)} failed checks; "
        f"total {time.perf_counter() - t0:.0f} s"
    )
    if rows:
        print_table(rows, copy_gbs)
    return 1 if failures else 0


if __name__ == "__main__":
    try:
        sys.exit(main())
    except KeyboardInterrupt:
        sys.exit(130)
    except Exception:
        traceback.print_exc()
        sys.exit(1)
