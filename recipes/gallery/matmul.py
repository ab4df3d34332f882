"""C = A @ B in fp16/bf16 with fp32 accumulation, autotuned per (M, N, K).

Tutorial style: one program per BLOCK_M x BLOCK_N tile of C, programs swizzled in groups of
GROUP_M tile-rows so that neighbours reuse the same tiles of B from L2. The configs cover
decode (a handful of rows: 16-row tiles with a long K step) through prefill (128 x 256 tiles);
``prune_configs_by`` keeps only the tiles that make sense for the M being tuned, so small
batches do not spend their tuning time on 128-row tiles that would be almost all padding.
"""

import torch
import triton
import triton.language as tl


def _config(bm, bn, bk, warps, stages, group=8):
    return triton.Config(
        {"BLOCK_M": bm, "BLOCK_N": bn, "BLOCK_K": bk, "GROUP_M": group},
        num_warps=warps,
        num_stages=stages,
    )


MATMUL_CONFIGS = [
    # prefill: big tiles, the most reuse per byte loaded
    _config(128, 256, 64, 8, 3),
    _config(256, 128, 64, 8, 3),
    _config(128, 128, 64, 8, 4),
    _config(128, 128, 64, 4, 4),
    _config(128, 64, 64, 4, 4),
    _config(64, 128, 64, 4, 4),
    _config(64, 256, 32, 4, 4),
    _config(64, 64, 64, 4, 5),
    # decode: few rows, so walk K in long steps and spread N over many programs
    _config(32, 64, 128, 4, 4),
    _config(32, 128, 64, 4, 4),
    _config(16, 64, 128, 4, 4),
    _config(16, 128, 128, 4, 3),
    _config(16, 64, 256, 4, 3),
]


def prune_by_m(configs, named_args, **kwargs):
    """Keep tiles no taller than M needs; past 256 rows also drop the decode tiles."""
    m = named_args["M"]
    tallest = max(16, triton.next_power_of_2(m))
    kept = [c for c in configs if c.kwargs["BLOCK_M"] <= tallest]
    if m >= 256:
        kept = [c for c in kept if c.kwargs["BLOCK_M"] >= 64]
    return kept


@triton.autotune(
    configs=MATMUL_CONFIGS,
    key=["M", "N", "K"],
    prune_configs_by={"early_config_prune": prune_by_m},
)
@triton.jit
def matmul_kernel(
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
    GROUP_M: tl.constexpr,
):
    pid = tl.program_id(0)
    tiles_m = tl.cdiv(M, BLOCK_M)
    tiles_n = tl.cdiv(N, BLOCK_N)
    per_group = GROUP_M * tiles_n
    first_m = (pid // per_group) * GROUP_M
    rows_in_group = min(tiles_m - first_m, GROUP_M)
    tile_m = first_m + (pid % per_group) % rows_in_group
    tile_n = (pid % per_group) // rows_in_group

    rm = tile_m * BLOCK_M + tl.arange(0, BLOCK_M)
    rn = tile_n * BLOCK_N + tl.arange(0, BLOCK_N)
    rk = tl.arange(0, BLOCK_K)
    # Clamp the edge rows/columns onto valid ones rather than masking them: every load stays
    # in bounds and unmasked along M and N; the store below drops the duplicates.
    ram = tl.max_contiguous(tl.multiple_of(rm % M, BLOCK_M), BLOCK_M)
    rbn = tl.max_contiguous(tl.multiple_of(rn % N, BLOCK_N), BLOCK_N)
    a_tile = a_ptr + ram[:, None] * stride_am + rk[None, :] * stride_ak
    b_tile = b_ptr + rk[:, None] * stride_bk + rbn[None, :] * stride_bn

    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for k in range(0, tl.cdiv(K, BLOCK_K)):
        k_left = K - k * BLOCK_K
        a = tl.load(a_tile, mask=rk[None, :] < k_left, other=0.0)
        b = tl.load(b_tile, mask=rk[:, None] < k_left, other=0.0)
        acc = tl.dot(a, b, acc)
        a_tile += BLOCK_K * stride_ak
        b_tile += BLOCK_K * stride_bk

    c_tile = c_ptr + rm[:, None] * stride_cm + rn[None, :] * stride_cn
    tl.store(c_tile, acc.to(c_ptr.dtype.element_ty), mask=(rm[:, None] < M) & (rn[None, :] < N))


def matmul(a: torch.Tensor, b: torch.Tensor, out: torch.Tensor | None = None) -> torch.Tensor:
    """a [M, K] @ b [K, N] -> [M, N], in a's dtype."""
    assert a.ndim == 2 and b.ndim == 2 and a.shape[1] == b.shape[0], "shapes do not chain"
    M, K = a.shape
    N = b.shape[1]
    c = torch.empty((M, N), device=a.device, dtype=a.dtype) if out is None else out

    def grid(meta):
        return (triton.cdiv(M, meta["BLOCK_M"]) * triton.cdiv(N, meta["BLOCK_N"]),)

    matmul_kernel[grid](
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
