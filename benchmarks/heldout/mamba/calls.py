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
