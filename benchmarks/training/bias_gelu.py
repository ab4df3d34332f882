"""Bias add and GELU (tanh approximation) over a row-major M x N tensor, flattened: each
program handles BLOCK contiguous elements, and an element's bias is its column's."""

import triton
import triton.language as tl

SQRT_2_OVER_PI = tl.constexpr(0.7978845608028654)


@triton.jit
def bias_gelu(
    x_ptr,
    bias_ptr,
    y_ptr,
    M,
    N,
    BLOCK: tl.constexpr,
):
    offs = tl.program_id(0).to(tl.int64) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < M.to(tl.int64) * N
    x = tl.load(x_ptr + offs, mask=mask, other=0.0).to(tl.float32)
    b = tl.load(bias_ptr + offs % N, mask=mask, other=0.0).to(tl.float32)
    h = x + b
    inner = SQRT_2_OVER_PI * (h + 0.044715 * h * h * h)
    # tanh(u) = 2 * sigmoid(2u) - 1, written with one exp that cannot overflow
    t = 2.0 / (1.0 + tl.exp(-2.0 * inner)) - 1.0
    y = 0.5 * h * (1.0 + t)
    tl.store(y_ptr + offs, y.to(y_ptr.dtype.element_ty), mask=mask)
