"""Fused MoE grouped GEMM: every routed (token, expert) pair times that expert's weight.

Serving-engine style. The host sorts the routed pairs by expert and pads each expert's
list to a multiple of BLOCK_SIZE_M (``moe_align_block_size``), so each row-block of the
GEMM reads one expert's weight. The block size must therefore be known before the launch:
the launcher picks the whole config from a table keyed by the number of tokens (tuned
offline for Mixtral-8x7B's gate/up projection on an H100-class GPU), aligns with its
BLOCK_SIZE_M, then launches.
"""

import torch
import triton
import triton.language as tl
from moe_align import moe_align_block_size


@triton.jit
def fused_moe_kernel(
    a_ptr,
    b_ptr,
    c_ptr,
    topk_weights_ptr,
    sorted_token_ids_ptr,
    expert_ids_ptr,
    num_tokens_post_padded_ptr,
    N,
    K,
    EM,
    num_valid_tokens,
    stride_am,
    stride_ak,
    stride_be,
    stride_bn,
    stride_bk,
    stride_cm,
    stride_cn,
    BLOCK_SIZE_M: tl.constexpr,
    BLOCK_SIZE_N: tl.constexpr,
    BLOCK_SIZE_K: tl.constexpr,
    GROUP_SIZE_M: tl.constexpr,
    MUL_ROUTED_WEIGHT: tl.constexpr,
    top_k: tl.constexpr,
    compute_type: tl.constexpr,
):
    pid = tl.program_id(0)
    blocks_m = tl.cdiv(EM, BLOCK_SIZE_M)
    blocks_n = tl.cdiv(N, BLOCK_SIZE_N)
    in_group = GROUP_SIZE_M * blocks_n
    first_m = (pid // in_group) * GROUP_SIZE_M
    group_m = min(blocks_m - first_m, GROUP_SIZE_M)
    pid_m = first_m + (pid % in_group) % group_m
    pid_n = (pid % in_group) // group_m

    # The grid covers the worst-case padding; blocks past the real padded length stop here.
    if pid_m * BLOCK_SIZE_M >= tl.load(num_tokens_post_padded_ptr):
        return

    rows = pid_m * BLOCK_SIZE_M + tl.arange(0, BLOCK_SIZE_M).to(tl.int64)
    pair = tl.load(sorted_token_ids_ptr + rows)
    live = pair < num_valid_tokens
    expert = tl.load(expert_ids_ptr + pid_m).to(tl.int64)

    offs_n = (pid_n * BLOCK_SIZE_N + tl.arange(0, BLOCK_SIZE_N).to(tl.int64)) % N
    offs_k = tl.arange(0, BLOCK_SIZE_K)
    a_tile = a_ptr + (pair[:, None] // top_k) * stride_am + offs_k[None, :] * stride_ak
    b_tile = b_ptr + expert * stride_be + offs_k[:, None] * stride_bk + offs_n[None, :] * stride_bn

    acc = tl.zeros((BLOCK_SIZE_M, BLOCK_SIZE_N), dtype=tl.float32)
    for k in range(0, tl.cdiv(K, BLOCK_SIZE_K)):
        k_left = K - k * BLOCK_SIZE_K
        a = tl.load(a_tile, mask=live[:, None] & (offs_k[None, :] < k_left), other=0.0)
        b = tl.load(b_tile, mask=offs_k[:, None] < k_left, other=0.0)
        acc = tl.dot(a, b, acc)
        a_tile += BLOCK_SIZE_K * stride_ak
        b_tile += BLOCK_SIZE_K * stride_bk

    if MUL_ROUTED_WEIGHT:
        weight = tl.load(topk_weights_ptr + pair, mask=live, other=0.0)
        acc = acc * weight[:, None]

    cols = pid_n * BLOCK_SIZE_N + tl.arange(0, BLOCK_SIZE_N)
    c_tile = c_ptr + pair[:, None] * stride_cm + cols[None, :] * stride_cn
    tl.store(c_tile, acc.to(compute_type), mask=live[:, None] & (cols[None, :] < N))


def _cfg(bm, bn, bk, group, warps, stages):
    return {
        "BLOCK_SIZE_M": bm,
        "BLOCK_SIZE_N": bn,
        "BLOCK_SIZE_K": bk,
        "GROUP_SIZE_M": group,
        "num_warps": warps,
        "num_stages": stages,
    }


# Tokens per call -> config. Few tokens spread over 8 experts leave each expert a handful of
# rows: 16-row blocks and a long K step; large batches fill 64-row blocks.
MOE_CONFIGS = {
    1: _cfg(16, 64, 128, 1, 4, 4),
    2: _cfg(16, 64, 128, 1, 4, 4),
    4: _cfg(16, 64, 128, 1, 4, 4),
    8: _cfg(16, 128, 128, 1, 4, 4),
    16: _cfg(16, 128, 128, 1, 4, 3),
    32: _cfg(16, 128, 128, 1, 4, 3),
    64: _cfg(32, 128, 128, 8, 4, 3),
    128: _cfg(64, 128, 64, 8, 4, 4),
    256: _cfg(64, 128, 64, 8, 4, 4),
    512: _cfg(64, 256, 64, 8, 8, 3),
}


def get_config(num_tokens: int) -> dict:
    """The table entry nearest to num_tokens."""
    return MOE_CONFIGS[min(MOE_CONFIGS, key=lambda m: abs(m - num_tokens))]


def invoke_fused_moe_kernel(
    a,
    b,
    c,
    topk_weights,
    sorted_token_ids,
    expert_ids,
    num_tokens_post_padded,
    mul_routed_weight: bool,
    top_k: int,
    config: dict,
) -> None:
    """Launch over already aligned ids; c is [num_tokens * top_k, N]."""
    EM = sorted_token_ids.shape[0]
    N, K = b.shape[1], b.shape[2]

    def grid(meta):
        return (triton.cdiv(EM, meta["BLOCK_SIZE_M"]) * triton.cdiv(N, meta["BLOCK_SIZE_N"]),)

    fused_moe_kernel[grid](
        a,
        b,
        c,
        topk_weights,
        sorted_token_ids,
        expert_ids,
        num_tokens_post_padded,
        N,
        K,
        EM,
        topk_weights.numel(),
        a.stride(0),
        a.stride(1),
        b.stride(0),
        b.stride(1),
        b.stride(2),
        c.stride(0),
        c.stride(1),
        MUL_ROUTED_WEIGHT=mul_routed_weight,
        top_k=top_k,
        compute_type=tl.bfloat16 if a.dtype == torch.bfloat16 else tl.float16,
        **config,
    )


def fused_moe(
    hidden_states: torch.Tensor,
    w: torch.Tensor,
    topk_weights: torch.Tensor,
    topk_ids: torch.Tensor,
    mul_routed_weight: bool = False,
    config: dict | None = None,
) -> torch.Tensor:
    """hidden_states [T, K], w [E, N, K], topk_* [T, top_k] -> [T, top_k, N]."""
    num_tokens, top_k = topk_ids.shape
    num_experts, N, _ = w.shape
    config = get_config(num_tokens) if config is None else config
    sorted_ids, expert_ids, used = moe_align_block_size(
        topk_ids, config["BLOCK_SIZE_M"], num_experts
    )
    out = torch.empty(
        (num_tokens * top_k, N), device=hidden_states.device, dtype=hidden_states.dtype
    )
    invoke_fused_moe_kernel(
        hidden_states,
        w,
        out,
        topk_weights,
        sorted_ids,
        expert_ids,
        used,
        mul_routed_weight,
        top_k,
        config,
    )
    return out.view(num_tokens, top_k, N)
