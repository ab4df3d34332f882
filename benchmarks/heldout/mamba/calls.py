"""Example arguments and float64 references for the held-out mamba recipe here."""

import torch

DT = {"fp16": torch.float16, "bf16": torch.bfloat16}


def ssu_inputs(sizes, dtypes, device="cuda"):
    """_selective_scan_update_kernel's arguments as selective_state_update passes them (with
    heads, dt_bias and D given, dt_softplus on): a float32 state, activations in T."""
    b, h, d, n = sizes["batch"], sizes["nheads"], sizes["dim"], sizes["dstate"]
    g = h // sizes["nheads_ngroups_ratio"]
    t, f32 = DT[dtypes["T"]], torch.float32
    state = torch.randn(b, h, d, n, device=device, dtype=f32)
    x = torch.randn(b, h, d, device=device, dtype=t)
    dt = torch.randn(b, h, d, device=device, dtype=t)
    dt_bias = torch.rand(h, d, device=device, dtype=f32) - 4.0
    A = -torch.rand(h, d, n, device=device, dtype=f32)
    B = torch.randn(b, g, n, device=device, dtype=t)
    C = torch.randn(b, g, n, device=device, dtype=t)
    D = torch.randn(h, d, device=device, dtype=f32)
    z = torch.randn(b, h, d, device=device, dtype=t)
    out = torch.empty_like(x)
    indices = torch.randperm(b, device=device, dtype=torch.int32)
    tensors = [state, x, dt, dt_bias, A, B, C, D, z, out]
    strides = [s for a in (state, x, dt, dt_bias, A, B, C, D, z, out) for s in a.stride()]
    return [*tensors, indices, b, h, d, n, sizes["nheads_ngroups_ratio"], *strides]


def ssu(state, x, dt, dt_bias, A, B, C, D, z, indices, ratio):
    """float64: the updated states of the batch's rows and the output."""
    rows = indices.long() if indices is not None else torch.arange(x.shape[0], device=x.device)
    s = state.double()[rows]
    delta = dt.double() + dt_bias.double()
    delta = torch.where(delta <= 20.0, torch.nn.functional.softplus(delta), delta)
    dA = torch.exp(A.double()[None] * delta[..., None])
    Bh = B.double().repeat_interleave(ratio, dim=1)
    Ch = C.double().repeat_interleave(ratio, dim=1)
    new = s * dA + Bh[:, :, None, :] * delta[..., None] * x.double()[..., None]
    out = (new * Ch[:, :, None, :]).sum(-1) + x.double() * D.double()[None]
    if z is not None:
        out = out * torch.nn.functional.silu(z.double())
    whole = state.double().clone()
    whole[rows] = new
    return whole, out


def ssu_reference(state, x, dt, dt_bias, A, B, C, D, z, out, indices, batch, nheads, dim,
                  dstate, ratio, *strides):  # fmt: skip
    whole, o = ssu(state, x, dt, dt_bias, A, B, C, D, z, indices, ratio)
    return {"state_ptr": whole, "out_ptr": o}


def bmm_inputs(sizes, dtypes, device="cuda"):
    """_bmm_chunk_fwd_kernel's arguments as _bmm_chunk_fwd passes them with groups: a and b
    (batch, seqlen, ngroups, K), out (batch, nchunks, ngroups, cs, cs), and a seq_idx
    (batch, seqlen) the kernel reads only with HAS_SEQ_IDX (the recipe fixes it off; a
    caller may pass None)."""
    b, L, g, k, cs = (sizes[n] for n in ("batch", "seqlen", "ngroups", "K", "chunk_size"))
    t = DT[dtypes["T"]]
    nchunks = -(-L // cs)
    a = torch.randn(b, L, g, k, device=device, dtype=t)
    bb = torch.randn(b, L, g, k, device=device, dtype=t)
    out = torch.empty(b, nchunks, g, cs, cs, device=device, dtype=t)
    seq_idx = torch.zeros(b, L, device=device, dtype=torch.int32)
    return [a, bb, out, seq_idx, L, cs, k, g, *a.stride(), *bb.stride(), *out.stride(),
            *seq_idx.stride()]  # fmt: skip


def bmm_chunks(a, b, chunk_size):
    """float64: each chunk's a · bᵀ per group, the last chunk's missing rows as zeros."""
    batch, L, g, k = a.shape
    nchunks = -(-L // chunk_size)
    pad = nchunks * chunk_size - L
    a64 = torch.nn.functional.pad(a.double(), (0, 0, 0, 0, 0, pad))
    b64 = torch.nn.functional.pad(b.double(), (0, 0, 0, 0, 0, pad))
    a64 = a64.view(batch, nchunks, chunk_size, g, k)
    b64 = b64.view(batch, nchunks, chunk_size, g, k)
    return torch.einsum("bcmgk,bcngk->bcgmn", a64, b64)


def bmm_reference(a, b, out, seq_idx, seqlen, chunk_size, *rest):
    return {"out_ptr": bmm_chunks(a, b, chunk_size)}
