"""Example arguments and float64 references for the held-out lightllm recipe here."""

import torch

DT = {"fp16": torch.float16, "bf16": torch.bfloat16}


def rotary_inputs(sizes, dtypes, device="cuda"):
    """_rotary_kernel's arguments as rotary_emb_fwd passes them: q (tokens, HEAD_Q, d) and
    k (tokens, HEAD_K, d) rotated in place, cos and sin (tokens, d / 2)."""
    n, hq, hk, d = (sizes[k] for k in ("max_total_len", "HEAD_Q", "HEAD_K", "head_dim"))
    t = DT[dtypes["T"]]
    q = torch.randn(n, hq, d, device=device, dtype=t)
    k = torch.randn(n, hk, d, device=device, dtype=t)
    angle = torch.rand(n, d // 2, device=device) * 6.28
    cos, sin = angle.cos().to(t), angle.sin().to(t)
    strides = [s for a in (q, k, cos, sin) for s in a.stride()]
    return [q, k, cos, sin, *strides, n, hq, hk]


def rotate(x, cos, sin):
    """float64: x's first and second halves rotated by the angles (not interleaved)."""
    half = x.shape[-1] // 2
    x0, x1 = x.double()[..., :half], x.double()[..., half:]
    c, s = cos.double()[:, None, :], sin.double()[:, None, :]
    return torch.cat((x0 * c - x1 * s, x0 * s + x1 * c), dim=-1)


def rotary_reference(q, k, cos, sin, *rest):
    return {"Q": rotate(q, cos, sin), "K": rotate(k, cos, sin)}


def stage1_inputs(sizes, dtypes, device="cuda"):
    """_fwd_kernel_flash_decode_stage1's arguments as flash_decode_stage1 passes them: q
    (batch, 32, d), the KV pool k and v (tokens, 8, d) with each request's token slots in
    req_to_tokens (shuffled, as a serving engine's allocator leaves them), every context
    max_len long (so every range is written), and the partials mid_o (batch, 32, ranges, d)
    and mid_o_logexpsum (batch, 32, ranges) in float32."""
    b, n, h_kv, d = (sizes[k] for k in ("batch", "max_len", "kv_heads", "head_dim"))
    h_q, t = h_kv * sizes["gqa_group_size"], DT[dtypes["T"]]
    ranges = -(-n // 128)
    q = torch.randn(b, h_q, d, device=device, dtype=t)
    k = torch.randn(b * n, h_kv, d, device=device, dtype=t)
    v = torch.randn(b * n, h_kv, d, device=device, dtype=t)
    req_to_tokens = torch.randperm(b * n, device=device, dtype=torch.int32).view(b, n)
    req_idx = torch.arange(b, device=device, dtype=torch.int32)
    seqlen = torch.full((b,), n, device=device, dtype=torch.int32)
    mid_o = torch.empty(b, h_q, ranges, d, device=device, dtype=torch.float32)
    mid_lse = torch.empty(b, h_q, ranges, device=device, dtype=torch.float32)
    strides = [*req_to_tokens.stride(), *q.stride(), *k.stride(), *v.stride(), *mid_o.stride(),
               *mid_lse.stride()]  # fmt: skip
    return [q, k, v, 1.0 / d**0.5, req_to_tokens, req_idx, seqlen, mid_o, mid_lse, *strides,
            h_q // h_kv]  # fmt: skip


def ranges_attention(q, k, v, req_to_tokens, req_idx, seqlen, block=128):
    """float64: per (sequence, query head, range of ``block`` tokens) the range's softmax-
    weighted values and its log-sum-exp; a range past the context is NaN (never written)."""
    b, h_q, d = q.shape
    group = h_q // k.shape[1]
    ranges = -(-int(seqlen.max()) // block)
    out = torch.full((b, h_q, ranges, d), float("nan"), dtype=torch.float64, device=q.device)
    lse = torch.full((b, h_q, ranges), float("nan"), dtype=torch.float64, device=q.device)
    for i in range(b):
        n = int(seqlen[i])
        r = -(-n // block)
        slots = req_to_tokens[int(req_idx[i]), :n].long()
        keys = k[slots].double().repeat_interleave(group, dim=1)  # (n, h_q, d)
        vals = torch.zeros(r * block, h_q, d, dtype=torch.float64, device=q.device)
        vals[:n] = v[slots].double().repeat_interleave(group, dim=1)
        scores = torch.full((h_q, r * block), float("-inf"), dtype=torch.float64, device=q.device)
        scores[:, :n] = torch.einsum("hd,nhd->hn", q[i].double(), keys) / d**0.5
        scores = scores.view(h_q, r, block)  # the last range padded with -inf
        lse[i, :, :r] = torch.logsumexp(scores, dim=2)
        weights = torch.softmax(scores, dim=2)
        out[i, :, :r] = torch.einsum("hrn,rnhd->hrd", weights, vals.view(r, block, h_q, d))
    return out, lse


def stage1_reference(q, k, v, sm_scale, req_to_tokens, req_idx, seqlen, mid_o, mid_lse, *rest):
    out, lse = ranges_attention(q, k, v, req_to_tokens, req_idx, seqlen)
    return {"Mid_O": out, "Mid_O_LogExpSum": lse}


def stage2_inputs(sizes, dtypes, device="cuda"):
    """_fwd_kernel_flash_decode_stage2's arguments as flash_decode_stage2 passes them: the
    contexts' lengths (ragged, up to max_len), the partials of stage 1 for those lengths
    (random, float32; (batch, 32, ranges, d) and (batch, 32, ranges)) and the output o
    (batch, 32, d)."""
    b, n, h_q, d = (sizes[k] for k in ("batch", "max_len", "q_heads", "head_dim"))
    ranges = -(-n // 128)
    seqlen = torch.randint(1, n + 1, (b,), device=device, dtype=torch.int32)
    seqlen[0] = n
    mid_o = torch.randn(b, h_q, ranges, d, device=device, dtype=torch.float32)
    mid_lse = torch.randn(b, h_q, ranges, device=device, dtype=torch.float32) * 4
    o = torch.empty(b, h_q, d, device=device, dtype=DT[dtypes["T"]])
    return [seqlen, mid_o, mid_lse, o, *mid_o.stride(), *mid_lse.stride(), *o.stride()]


def combine(seqlen, mid_o, mid_lse, block=128):
    """float64: each (sequence, query head)'s ranges weighted by their log-sum-exps."""
    out = torch.empty(mid_o.shape[0], mid_o.shape[1], mid_o.shape[3], dtype=torch.float64,
                      device=mid_o.device)  # fmt: skip
    for i in range(mid_o.shape[0]):
        r = -(-int(seqlen[i]) // block)
        w = torch.softmax(mid_lse[i, :, :r].double(), dim=1)  # (h_q, r)
        out[i] = torch.einsum("hr,hrd->hd", w, mid_o[i, :, :r].double())
    return out


def stage2_reference(seqlen, mid_o, mid_lse, o, *rest):
    return {"O": combine(seqlen, mid_o, mid_lse)}
