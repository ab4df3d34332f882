"""Row softmax over long rows (logits over a vocabulary), autotuned per row width.

Each program owns one row and walks it in BLOCK_N-wide chunks twice: an online pass keeps a
running max and a running sum per lane (rescaled whenever the max grows), then a second pass
writes exp(x - max) / sum. ``EVEN_N`` (a heuristic on the tuned BLOCK_N) drops the bounds
masks when the row is a whole number of chunks.
"""

import torch
import triton
import triton.language as tl

SOFTMAX_CONFIGS = [
    triton.Config({"BLOCK_N": 1024}, num_warps=4),
    triton.Config({"BLOCK_N": 2048}, num_warps=4),
    triton.Config({"BLOCK_N": 2048}, num_warps=8),
    triton.Config({"BLOCK_N": 4096}, num_warps=8),
    triton.Config({"BLOCK_N": 4096}, num_warps=16),
    triton.Config({"BLOCK_N": 8192}, num_warps=16),
]


@triton.autotune(configs=SOFTMAX_CONFIGS, key=["n_cols"])
@triton.heuristics({"EVEN_N": lambda args: args["n_cols"] % args["BLOCK_N"] == 0})
@triton.jit
def softmax_kernel(
    out_ptr,
    in_ptr,
    out_row_stride,
    in_row_stride,
    n_cols,
    BLOCK_N: tl.constexpr,
    EVEN_N: tl.constexpr,
):
    row = tl.program_id(0).to(tl.int64)
    src = in_ptr + row * in_row_stride
    dst = out_ptr + row * out_row_stride
    cols = tl.arange(0, BLOCK_N)

    # A finite floor, not -inf: a lane that only ever sees padding must give exp(0) * 0,
    # never exp(-inf - -inf) = nan.
    lane_max = tl.full((BLOCK_N,), -1.0e30, dtype=tl.float32)
    lane_sum = tl.zeros((BLOCK_N,), dtype=tl.float32)
    for start in range(0, n_cols, BLOCK_N):
        if EVEN_N:
            x = tl.load(src + start + cols)
        else:
            x = tl.load(src + start + cols, mask=start + cols < n_cols, other=-float("inf"))
        x = x.to(tl.float32)
        grown = tl.maximum(lane_max, x)
        lane_sum = lane_sum * tl.exp(lane_max - grown) + tl.exp(x - grown)
        lane_max = grown
    row_max = tl.max(lane_max, axis=0)
    inv_sum = 1.0 / tl.sum(lane_sum * tl.exp(lane_max - row_max), axis=0)

    for start in range(0, n_cols, BLOCK_N):
        if EVEN_N:
            x = tl.load(src + start + cols).to(tl.float32)
            tl.store(
                dst + start + cols, (tl.exp(x - row_max) * inv_sum).to(out_ptr.dtype.element_ty)
            )
        else:
            mask = start + cols < n_cols
            x = tl.load(src + start + cols, mask=mask, other=-float("inf")).to(tl.float32)
            y = tl.exp(x - row_max) * inv_sum
            tl.store(dst + start + cols, y.to(out_ptr.dtype.element_ty), mask=mask)


def softmax(x: torch.Tensor, out: torch.Tensor | None = None) -> torch.Tensor:
    """Softmax over the last dimension of x (any leading shape), in x's dtype."""
    n_cols = x.shape[-1]
    rows = x.reshape(-1, n_cols)
    assert rows.stride(-1) == 1, "the last dimension must be contiguous"
    y = torch.empty_like(rows) if out is None else out.view(-1, n_cols)
    n_rows = rows.shape[0]
    softmax_kernel[(n_rows,)](y, rows, y.stride(0), rows.stride(0), n_cols)
    return y.view(x.shape)
