"""Cross-entropy forward over a vocabulary, one program per row of logits.

The row is swept once in BLOCK_V-wide tiles with an online log-sum-exp (a running maximum
and a rescaled sum of exponentials, in base 2); the target's logit is picked up on the
way. A row whose target is ``ignore_index`` gets a loss of 0. The log-sum-exp is stored
for a backward pass.
"""

import triton
import triton.language as tl

LOG2E = tl.constexpr(1.4426950408889634)
LN2 = tl.constexpr(0.6931471805599453)


@triton.jit
def cross_entropy_fwd(
    logits_ptr,
    target_ptr,
    loss_ptr,
    lse_ptr,
    stride_row,
    V,
    ignore_index,
    BLOCK_V: tl.constexpr,
):
    row = tl.program_id(0).to(tl.int64)
    base = logits_ptr + row * stride_row
    target = tl.load(target_ptr + row)
    run_max = tl.full([BLOCK_V], float("-inf"), dtype=tl.float32)
    run_sum = tl.zeros([BLOCK_V], dtype=tl.float32)
    picked = tl.zeros([BLOCK_V], dtype=tl.float32)
    for start in range(0, V, BLOCK_V):
        cols = start + tl.arange(0, BLOCK_V)
        mask = cols < V
        x = tl.load(base + cols, mask=mask, other=float("-inf")).to(tl.float32) * LOG2E
        new_max = tl.maximum(run_max, x)
        # lanes that have seen only -inf keep a sum of 0 (avoid inf - inf)
        safe = tl.where(new_max == float("-inf"), 0.0, new_max)
        run_sum = run_sum * tl.exp2(run_max - safe) + tl.exp2(x - safe)
        run_max = new_max
        picked += tl.where(cols == target, x, 0.0)
    top = tl.max(run_max, axis=0)
    total = tl.sum(run_sum * tl.exp2(run_max - top), axis=0)
    lse = (top + tl.log2(total)) * LN2
    loss = lse - tl.sum(picked, axis=0) * LN2
    loss = tl.where(target == ignore_index, 0.0, loss)
    tl.store(lse_ptr + row, lse)
    tl.store(loss_ptr + row, loss)
