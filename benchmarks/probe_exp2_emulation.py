"""Probe: is the persistent Gluon attention at head dim 64 bound by the SFU's exponentials,
and does computing some of them with a polynomial on the FMA units (FlashAttention-4's
software exp2) take it past cuDNN on the H200 (issue 21: d = 64 non-causal from 4096 tokens
reads 0.97-1.01x)?

At head dim 64 a 128 x 128 block's 16,384 exponentials take the SFU (16 a clock per SM)
about as many cycles as its two products take the tensor cores, so the softmax hides under
the MMAs only as well as the two warp groups interleave. Here every ``PACK``-th exp2 (1 of 4,
or 1 of 2) is instead 2**floor(x) * p(x - floor(x)), p a cubic (relative error 1.0e-4,
below fp16's and bf16's rounding), on the FMA and integer units: fewer SFU operations for
more FMA ones. ``noexp`` skips the exponential altogether (wrong results; an upper bound on
what any exp2 saving can give).

Times, through Triton's JIT and interleaved, ``attn_fwd_ws2p``
(recipes/hopper/attention_gluon_persistent.py) at the bundle's pick with each softmax,
beside PyTorch's fastest SDPA backend, Z * N = 16384 and 32 heads as
benchmarks/hopper_bench.py does; each output is checked against SDPA's:

    python benchmarks/probe_exp2_emulation.py [--lengths 1024,4096,16384] [--dims 64,128]
        [--dtypes fp16,bf16] [--variants base,emu4,emu2,noexp] [--wider] [--json out.json]

"cuDNN / x" above 1 means x is faster. Not a benchmark of the bundle.
"""

from __future__ import annotations

import argparse
import functools
import importlib.util
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from triton.experimental import gluon
from triton.experimental.gluon import language as gl

from benchmarks.probe_attention_regs import probe
from benchmarks.probe_gluon_attention import persistent
from benchmarks.probe_splitk import HOPPER, hopper_module

# 2**x for x <= 0 on the FMA units: t = max(x, -126); j = floor(t) (adding 1.5 * 2**23
# rounded down leaves j in the low mantissa bits); f = t - j in [0, 1); p = 1 + f * (C1 +
# f * (C2 + f * C3)) ~ 2**f (p(0) = 1, p(1) = 2; fitted on [0, 1)); then j added to p's
# exponent field.
_POLY = """{{
.reg .f32 t, j, f, p;
.reg .b32 jb, pb;
max.ftz.f32 t, ${x}, 0fC2FC0000;
add.rm.ftz.f32 j, t, 0f4B400000;
sub.ftz.f32 f, j, 0f4B400000;
sub.ftz.f32 f, t, f;
fma.rn.ftz.f32 p, f, 0f3DA04AF5, 0f3E67BD33;
fma.rn.ftz.f32 p, p, f, 0f3F320755;
fma.rn.ftz.f32 p, p, f, 0f3F800000;
mov.b32 jb, j;
shl.b32 jb, jb, 23;
mov.b32 pb, p;
add.s32 ${y}, pb, jb;
}}
"""


def exp2_asm(pack: int) -> str:
    """One inline-assembly instance for ``pack`` values: the last by the polynomial, the
    others by the SFU (outputs $0..$pack-1, inputs $pack..)."""
    lines = [f"ex2.approx.ftz.f32 ${i}, ${pack + i};\n" for i in range(pack - 1)]
    return "".join(lines) + _POLY.format(x=pack + pack - 1, y=pack - 1)


EMU4 = gl.constexpr(exp2_asm(4))
EMU2 = gl.constexpr(exp2_asm(2))
CONSTRAINTS4 = gl.constexpr(",".join(["=r"] * 4 + ["r"] * 4))
CONSTRAINTS2 = gl.constexpr(",".join(["=r"] * 2 + ["r"] * 2))


@gluon.jit
def _stats(s, m_i, j, diag_block, offs_m, qk_scale, BLOCK_N: gl.constexpr, CAUSAL: gl.constexpr):
    # attention_gluon.py's _softmax up to its exponentials: exp2's argument and the new maxima
    if CAUSAL and j >= diag_block:
        offs_n = j * BLOCK_N + gl.arange(0, BLOCK_N, layout=gl.SliceLayout(0, s.type.layout))
        visible = gl.expand_dims(offs_m, 1) >= gl.expand_dims(offs_n, 0)
        s = gl.where(visible, s, -1.0e6)
    m_new = gl.maximum(m_i, gl.max(s, 1) * qk_scale)
    return s * qk_scale - gl.expand_dims(m_new, 1), m_new


@gluon.jit
def _finish(p, m_i, l_i, m_new):
    # _softmax's return: the probabilities, the old rows' rescale and the new row statistics
    alpha = gl.exp2(m_i - m_new)
    return p, alpha, m_new, l_i * alpha + gl.sum(p, 1)


@gluon.jit
def _softmax_emu4(s, m_i, l_i, j, diag_block, offs_m, qk_scale,
                  BLOCK_N: gl.constexpr, CAUSAL: gl.constexpr):  # fmt: skip
    x, m_new = _stats(s, m_i, j, diag_block, offs_m, qk_scale, BLOCK_N, CAUSAL)
    p = gl.inline_asm_elementwise(EMU4, CONSTRAINTS4, [x], dtype=gl.float32, is_pure=True,
                                  pack=4)  # fmt: skip
    return _finish(p, m_i, l_i, m_new)


@gluon.jit
def _softmax_emu2(s, m_i, l_i, j, diag_block, offs_m, qk_scale,
                  BLOCK_N: gl.constexpr, CAUSAL: gl.constexpr):  # fmt: skip
    x, m_new = _stats(s, m_i, j, diag_block, offs_m, qk_scale, BLOCK_N, CAUSAL)
    p = gl.inline_asm_elementwise(EMU2, CONSTRAINTS2, [x], dtype=gl.float32, is_pure=True,
                                  pack=2)  # fmt: skip
    return _finish(p, m_i, l_i, m_new)


@gluon.jit
def _softmax_noexp(s, m_i, l_i, j, diag_block, offs_m, qk_scale,
                   BLOCK_N: gl.constexpr, CAUSAL: gl.constexpr):  # fmt: skip
    x, m_new = _stats(s, m_i, j, diag_block, offs_m, qk_scale, BLOCK_N, CAUSAL)
    return _finish(x * 0.0625 + 1.0, m_i, l_i, m_new)  # not exp2: the rest without the SFU


SOFTMAX = {"emu4": _softmax_emu4, "emu2": _softmax_emu2, "noexp": _softmax_noexp}


@functools.cache
def kernels(variant: str):
    """A copy of attention_gluon_persistent.py of its own (its own jit functions and
    caches) whose tiles call ``variant``'s softmax."""
    hopper_module("attention_gluon")  # puts recipes/ on the path for its imports
    sys.path.insert(0, str(HOPPER))
    spec = importlib.util.spec_from_file_location(
        f"agp_{variant}", HOPPER / "attention_gluon_persistent.py"
    )
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    if variant != "base":
        # the global name _attend_tile's body calls, resolved when the kernel compiles
        vars(module)["_softmax"] = SOFTMAX[variant]
    return module


def runner(cfg: tuple, q, k, v, o, causal: bool):
    variant, bm, bn, stages = cfg
    return persistent(kernels(variant).attn_fwd_ws2p, q, k, v, o, causal, bm, bn, stages,
                      bm // 2, CAUSAL=causal)  # fmt: skip


def label(cfg: tuple) -> str:
    variant, bm, bn, stages = cfg
    return f"{variant}-{bm}x{bn}-s{stages}"


VARIANTS = ("base", "emu4", "emu2", "noexp")
# (head dim, causal) -> the bundle's picks (BLOCK_M, BLOCK_N, STAGES) at 1024-16384
PICKS = {(64, False): [(128, 128, 4)], (64, True): [(128, 128, 3)],
         (128, False): [(128, 128, 2)], (128, True): [(128, 128, 2)]}  # fmt: skip
# and 256-row tiles (128 rows a warp group), a second call's question: do fewer, larger
# tiles amortise each block's waits?
WIDER = {(64, False): [(256, 64, 4), (256, 64, 6), (256, 128, 3)],
         (64, True): [(256, 64, 4), (256, 64, 6)]}  # fmt: skip


def configs(variants: list[str], wider: bool) -> dict:
    return {key: [(v, *pick) for pick in picks for v in variants]
            + ([("base", *w) for w in WIDER.get(key, [])] if wider else [])
            for key, picks in PICKS.items()}  # fmt: skip


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--lengths", default="1024,4096,16384")
    ap.add_argument("--dims", default="64")
    ap.add_argument("--dtypes", default="fp16,bf16")
    ap.add_argument("--causal", default="0")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--variants", default=",".join(VARIANTS))
    ap.add_argument("--wider", action="store_true", help="also 256-row tiles (base softmax)")
    ap.add_argument("--json")
    args = ap.parse_args()
    table = configs(args.variants.split(","), args.wider)
    results = [probe(d, causal, n, args.rounds, dtype, table, runner, label)
               for dtype in args.dtypes.split(",")
               for d in (int(x) for x in args.dims.split(","))
               for causal in (bool(int(c)) for c in args.causal.split(","))
               for n in (int(x) for x in args.lengths.split(","))]  # fmt: skip
    print("\nsummary: cuDNN (or the best SDPA) / x")
    print(f"{'dtype':<5} {'d':>4} {'causal':<6} {'N':>6} " + " ".join(f"{v:>7}" for v in VARIANTS))
    for r in results:
        by = {row["cfg"].split("-")[0]: row for row in r["rows"] if "-128x" in row["cfg"]}
        cells = [f"{r['ref_us'] / by[v]['us']:7.3f}" if v in by else "      -" for v in VARIANTS]
        print(f"{r['dtype']:<5} {r['d']:>4} {r['causal']!s:<6} {r['N']:>6} " + " ".join(cells))
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=1))


if __name__ == "__main__":
    main()
