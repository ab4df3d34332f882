"""Token alignment for the grouped MoE GEMM, in plain PyTorch (no Triton, no custom op).

Every (token, slot) pair routed to expert e is listed under e, and each expert's list is
padded to a multiple of ``block_size`` (the GEMM's BLOCK_SIZE_M), so that every block of
``block_size`` rows belongs to exactly one expert. Nothing here reads a value back to the
host, so it queues behind the router on the stream like a kernel would.
"""

import torch


def sorted_ids_capacity(num_pairs: int, num_experts: int, block_size: int) -> int:
    """Length of the padded id list: every expert may waste up to block_size - 1 slots."""
    return num_pairs + num_experts * (block_size - 1)


def moe_align_block_size(
    topk_ids: torch.Tensor, block_size: int, num_experts: int
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """(sorted_token_ids, expert_ids, num_tokens_post_padded), all int32 on topk_ids' device.

    sorted_token_ids: flat (token * top_k + slot) ids grouped by expert, each group padded
    with the sentinel topk_ids.numel(); expert_ids: the expert of each block of block_size
    ids; num_tokens_post_padded: one element, the padded length actually used.
    """
    flat = topk_ids.reshape(-1).to(torch.int64)
    pairs = flat.numel()
    device = flat.device
    capacity = sorted_ids_capacity(pairs, num_experts, block_size)

    counts = torch.bincount(flat, minlength=num_experts)
    padded = (counts + block_size - 1) // block_size * block_size
    padded_end = torch.cumsum(padded, 0)
    padded_start = padded_end - padded
    first_of_expert = torch.cumsum(counts, 0) - counts

    order = torch.argsort(flat, stable=True)
    expert_of = flat[order]
    rank = torch.arange(pairs, device=device) - first_of_expert[expert_of]
    sorted_ids = torch.full((capacity,), pairs, dtype=torch.int32, device=device)
    sorted_ids[padded_start[expert_of] + rank] = order.to(torch.int32)

    blocks = (capacity + block_size - 1) // block_size
    block_rows = torch.arange(blocks, device=device) * block_size
    # Blocks past the used length get the last expert: the kernel returns before reading it.
    expert_ids = torch.searchsorted(padded_end, block_rows, right=True)
    expert_ids = expert_ids.clamp_(max=num_experts - 1).to(torch.int32)
    used = padded_end[-1:].to(torch.int32)
    return sorted_ids, expert_ids, used
