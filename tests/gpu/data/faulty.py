"""A kernel with planted failures, chosen by the MODE meta-parameter (GPU tuning tests)."""

import torch
import triton
import triton.language as tl


@triton.jit
def faulty_kernel(x_ptr, out_ptr, n, BLOCK: tl.constexpr, MODE: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    x = tl.load(x_ptr + offs, mask=mask)
    if MODE == 1:  # an illegal address: far outside any allocation
        tl.store(out_ptr + offs + (1 << 40), x, mask=mask)
    elif MODE == 2:  # a wrong result
        tl.store(out_ptr + offs, x * 3.0, mask=mask)
    elif MODE == 3:  # a hang: spin on a value that never changes
        flag = tl.load(x_ptr, volatile=True)
        while flag == flag:
            flag = tl.load(x_ptr, volatile=True)
        tl.store(out_ptr + offs, x * 2.0, mask=mask)
    else:
        tl.store(out_ptr + offs, x * 2.0, mask=mask)


def inputs(sizes, dtypes):
    n = sizes["n"]
    x = torch.randn(n, device="cuda", dtype=torch.float32)
    return [x, torch.empty_like(x), n]


def reference(x, out, n):
    return {"out_ptr": x.double() * 2.0}
