"""Split-K matmul for skinny products (decode): C (fp32) += A @ B, K split over SPLIT_K programs.

With only a few rows of A there are too few output tiles to fill the GPU, so the K
dimension is cut into SPLIT_K interleaved slices, each reduced by its own program and added
into C with an atomic. C must therefore start at zero: the wrapper allocates it zeroed, and
``reset_to_zero`` zeroes it again before each config the autotuner times. ``EVEN_K`` (a
heuristic on the tuned BLOCK_K and SPLIT_K) drops the K masks when the slices tile K exactly.
"""

import torch
import triton
import triton.language as tl


def _config(bm, bn, bk, split, warps=4, stages=4):
    return triton.Config(
        {"BLOCK_M": bm, "BLOCK_N": bn, "BLOCK_K": bk, "SPLIT_K": split},
        num_warps=warps,
        num_stages=stages,
    )


SPLITK_CONFIGS = [
    _config(16, 64, 128, 4),
    _config(16, 64, 128, 8),
    _config(16, 64, 256, 4, stages=3),
    _config(16, 128, 128, 2),
    _config(16, 128, 128, 4),
    _config(16, 128, 64, 8, stages=5),
    _config(32, 64, 128, 4),
    _config(32, 128, 64, 4),
    _config(64, 64, 128, 2),
    _config(64, 128, 64, 2, stages=3),
    _config(64, 128, 64, 1, stages=4),
    _config(128, 128, 64, 1, warps=8, stages=3),
]


@triton.autotune(configs=SPLITK_CONFIGS, key=["M", "N", "K"], reset_to_zero=["c_ptr"])
@triton.heuristics({"EVEN_K": lambda args: args["K"] % (args["BLOCK_K"] * args["SPLIT_K"]) == 0})
@triton.jit
def splitk_matmul_kernel(
    a_ptr,
    b_ptr,
    c_ptr,
    M,
    N,
    K,
    stride_am,
    stride_ak,
    stride_bk,
    stride_bn,
    stride_cm,
    stride_cn,
    BLOCK_M: tl.constexpr,
    BLOCK_N: tl.constexpr,
    BLOCK_K: tl.constexpr,
    SPLIT_K: tl.constexpr,
    EVEN_K: tl.constexpr,
):
    pid = tl.program_id(0)
    slice_k = tl.program_id(1)
    tiles_n = tl.cdiv(N, BLOCK_N)
    tile_m = pid // tiles_n
    tile_n = pid % tiles_n

    rm = tile_m * BLOCK_M + tl.arange(0, BLOCK_M)
    rn = tile_n * BLOCK_N + tl.arange(0, BLOCK_N)
    # Slice s reads K-blocks s, s + SPLIT_K, s + 2 * SPLIT_K, ...
    rk = slice_k * BLOCK_K + tl.arange(0, BLOCK_K)
    ram = tl.max_contiguous(tl.multiple_of(rm % M, BLOCK_M), BLOCK_M)
    rbn = tl.max_contiguous(tl.multiple_of(rn % N, BLOCK_N), BLOCK_N)
    a_tile = a_ptr + ram[:, None] * stride_am + rk[None, :] * stride_ak
    b_tile = b_ptr + rk[:, None] * stride_bk + rbn[None, :] * stride_bn
    step = BLOCK_K * SPLIT_K

    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for k in range(0, tl.cdiv(K, step)):
        if EVEN_K:
            a = tl.load(a_tile)
            b = tl.load(b_tile)
        else:
            k_left = K - k * step
            a = tl.load(a_tile, mask=rk[None, :] < k_left, other=0.0)
            b = tl.load(b_tile, mask=rk[:, None] < k_left, other=0.0)
        acc = tl.dot(a, b, acc)
        a_tile += step * stride_ak
        b_tile += step * stride_bk

    c_tile = c_ptr + rm[:, None] * stride_cm + rn[None, :] * stride_cn
    # The slices only add: no ordering between them is needed.
    tl.atomic_add(c_tile, acc, mask=(rm[:, None] < M) & (rn[None, :] < N), sem="relaxed")


def splitk_matmul(
    a: torch.Tensor, b: torch.Tensor, out: torch.Tensor | None = None
) -> torch.Tensor:
    """a [M, K] @ b [K, N] -> fp32 [M, N]. ``out``, if given, is zeroed first."""
    M, K = a.shape
    N = b.shape[1]
    assert b.shape[0] == K, "shapes do not chain"
    c = torch.zeros((M, N), device=a.device, dtype=torch.float32) if out is None else out.zero_()

    def grid(meta):
        return (triton.cdiv(M, meta["BLOCK_M"]) * triton.cdiv(N, meta["BLOCK_N"]), meta["SPLIT_K"])

    splitk_matmul_kernel[grid](
        a,
        b,
        c,
        M,
        N,
        K,
        a.stride(0),
        a.stride(1),
        b.stride(0),
        b.stride(1),
        c.stride(0),
        c.stride(1),
    )
    return c
