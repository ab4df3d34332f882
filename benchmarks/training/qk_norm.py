"""Per-head RMSNorm of queries or keys (the "QK norm" of Qwen3, Gemma 3, OLMo 2): every
row of a [tokens x heads, HEAD_DIM] tensor scaled by its reciprocal root mean square and a
weight shared by the heads. BLOCK_R rows per program: a short row (64 or 128 elements)
leaves each program little work, so the space is how many rows a program takes and how
few warps it takes them with.
"""

import triton
import triton.language as tl


@triton.jit
def qk_norm(x_ptr, w_ptr, y_ptr, n_rows, eps, HEAD_DIM: tl.constexpr, BLOCK_R: tl.constexpr):
    rows = tl.program_id(0) * BLOCK_R + tl.arange(0, BLOCK_R)
    cols = tl.arange(0, HEAD_DIM)
    ok = (rows < n_rows)[:, None]
    offs = rows.to(tl.int64)[:, None] * HEAD_DIM + cols[None, :]
    x = tl.load(x_ptr + offs, mask=ok, other=0.0).to(tl.float32)
    rstd = tl.rsqrt(tl.sum(x * x, axis=1) / HEAD_DIM + eps)
    w = tl.load(w_ptr + cols).to(tl.float32)
    y = x * rstd[:, None] * w[None, :]
    tl.store(y_ptr + offs, y.to(y_ptr.dtype.element_ty), mask=ok)
