"""The decode step's glue between the QKV projection and paged attention, in one kernel.

``rotary_cache`` takes the projection's output, one row per token laid out as
[q heads | k heads | v heads] of HEAD_DIM each, and:
- rotates the queries and keys by the token's position (rotary embedding, the
  rotate-half form: the two halves of a head are the real and imaginary parts, angle
  position * theta ** (-2 i / HEAD_DIM) for pair i), in fp32;
- writes the rotated queries to ``q_out`` ([tokens, NUM_Q_HEADS * HEAD_DIM]);
- writes the rotated key and the value into the paged KV cache at the token's slot
  (block = slot // BLOCK_SIZE, position in the block = slot % BLOCK_SIZE), the layout
  paged_attention.py reads: [blocks, kv heads, BLOCK_SIZE, HEAD_DIM].

A slot of -1 (or one past the cache) writes nothing: a CUDA graph's padded rows carry -1,
so that replaying a bucket larger than the call never touches another sequence's cache.
Grid (tokens, NUM_Q_HEADS + 2 * NUM_KV_HEADS): one program per token and head.
"""

import triton
import triton.language as tl


@triton.jit
def rotary_cache(
    qkv_ptr,
    positions_ptr,
    slots_ptr,
    q_out_ptr,
    k_cache_ptr,
    v_cache_ptr,
    num_tokens,
    num_slots,
    rope_theta,
    stride_qkv,
    stride_qo,
    stride_kc_block,
    stride_kc_head,
    stride_kc_tok,
    stride_vc_block,
    stride_vc_head,
    stride_vc_tok,
    NUM_Q_HEADS: tl.constexpr,
    NUM_KV_HEADS: tl.constexpr,
    HEAD_DIM: tl.constexpr,
    BLOCK_SIZE: tl.constexpr,
):
    tok = tl.program_id(0)
    head = tl.program_id(1)
    if tok >= num_tokens:
        return
    HALF: tl.constexpr = HEAD_DIM // 2
    offs = tl.arange(0, HALF)
    row = qkv_ptr + tok.to(tl.int64) * stride_qkv + head * HEAD_DIM
    x1 = tl.load(row + offs).to(tl.float32)
    x2 = tl.load(row + HALF + offs).to(tl.float32)
    if head < NUM_Q_HEADS + NUM_KV_HEADS:
        pos = tl.load(positions_ptr + tok).to(tl.float32)
        inv_freq = tl.exp2(offs.to(tl.float32) * (-2.0 / HEAD_DIM) * tl.log2(rope_theta))
        angle = pos * inv_freq
        c = tl.cos(angle)
        s = tl.sin(angle)
        y1 = x1 * c - x2 * s
        y2 = x2 * c + x1 * s
    else:
        y1 = x1
        y2 = x2
    if head < NUM_Q_HEADS:
        dst = q_out_ptr + tok.to(tl.int64) * stride_qo + head * HEAD_DIM
        tl.store(dst + offs, y1.to(q_out_ptr.dtype.element_ty))
        tl.store(dst + HALF + offs, y2.to(q_out_ptr.dtype.element_ty))
    else:
        slot = tl.load(slots_ptr + tok)
        if (slot >= 0) & (slot < num_slots):
            block = (slot // BLOCK_SIZE).to(tl.int64)
            within = slot % BLOCK_SIZE
            if head < NUM_Q_HEADS + NUM_KV_HEADS:
                kv = head - NUM_Q_HEADS
                dst = k_cache_ptr + block * stride_kc_block + kv * stride_kc_head
                dst += within * stride_kc_tok
            else:
                kv = head - NUM_Q_HEADS - NUM_KV_HEADS
                dst = v_cache_ptr + block * stride_vc_block + kv * stride_vc_head
                dst += within * stride_vc_tok
            tl.store(dst + offs, y1.to(k_cache_ptr.dtype.element_ty))
            tl.store(dst + HALF + offs, y2.to(k_cache_ptr.dtype.element_ty))


def rotary_reference(qkv, positions, slots, k_cache, v_cache, num_q_heads, num_kv_heads,
                     head_dim, rope_theta):  # fmt: skip
    """In float64: (rotated queries [T, NQ * D], the caches after the writes, as float64
    copies). Slots of -1 or past the cache write nothing."""
    import torch

    t = qkv.shape[0]
    x = qkv.double().reshape(t, -1, head_dim)
    half = head_dim // 2
    i = torch.arange(half, dtype=torch.float64, device=qkv.device)
    inv_freq = rope_theta ** (-2.0 * i / head_dim)
    angle = positions.double()[:, None] * inv_freq[None, :]
    c, s = torch.cos(angle)[:, None, :], torch.sin(angle)[:, None, :]
    rot = num_q_heads + num_kv_heads
    x1, x2 = x[:, :rot, :half], x[:, :rot, half:]
    rotated = torch.cat([x1 * c - x2 * s, x2 * c + x1 * s], dim=-1)
    q = rotated[:, :num_q_heads].reshape(t, -1)
    k, v = rotated[:, num_q_heads:], x[:, rot:]
    kc, vc = k_cache.double().clone(), v_cache.double().clone()
    block_size, slots_total = kc.shape[2], kc.shape[0] * kc.shape[2]
    for tok, slot in enumerate(slots.tolist()):
        if 0 <= slot < slots_total:
            kc[slot // block_size, :, slot % block_size] = k[tok]
            vc[slot // block_size, :, slot % block_size] = v[tok]
    return q, kc, vc
