"""Small kernels for CPU tests: real Triton code, cheap to compile."""

import triton
import triton.language as tl


@triton.jit
def _square(x):
    return x * x


@triton.jit
def scale_kernel(x_ptr, out_ptr, n, alpha, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    x = tl.load(x_ptr + offs, mask=mask)
    tl.store(out_ptr + offs, (_square(x) * alpha).to(out_ptr.dtype.element_ty), mask=mask)


@triton.jit
def broken_kernel(x_ptr, n, BLOCK: tl.constexpr):
    # BLOCK must be a power of two for tl.arange: BLOCK=48 fails to compile.
    offs = tl.arange(0, BLOCK)
    tl.store(x_ptr + offs, tl.load(x_ptr + offs), mask=offs < n)


not_a_kernel = 42
