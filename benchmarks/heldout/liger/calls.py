"""Example arguments and float64 references for the held-out Liger recipes here."""

import torch

DT = {"fp16": torch.float16, "bf16": torch.bfloat16}
EPS = 1e-6
KL_EPS = 1e-10
IGNORE = -100
DT32 = {**DT, "fp32": torch.float32}


def rms_inputs(sizes, dtypes, device="cuda"):
    """_rms_norm_forward_kernel's arguments as rms_norm_forward passes them (Llama mode)."""
    n, c, t = sizes["n_rows"], sizes["n_cols"], DT[dtypes["T"]]
    x = torch.randn(n, c, device=device, dtype=t)
    w = torch.randn(c, device=device, dtype=t)
    y = torch.empty_like(x)
    rstd = torch.empty(n, device=device, dtype=torch.float32)
    return [y, c, x, c, w, 1, rstd, 1, c, EPS, 0.0]


def rms_norm(x, w):
    """float64: x / rms(x) * w (offset 0)."""
    x = x.double()
    return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + EPS) * w.double()


def rms_reference(y, ys, x, xs, w, ws, rstd, rs, n_cols, eps, offset):
    x64 = x.double()
    return {"Y_ptr": rms_norm(x, w),
            "RSTD_ptr": torch.rsqrt(x64.pow(2).mean(-1) + eps)}  # fmt: skip


def swiglu_inputs(sizes, dtypes, device="cuda"):
    """_swiglu_forward_kernel's arguments: a, b, c, the row stride, the gate multiplier."""
    n, c, t = sizes["n_rows"], sizes["cols"], DT[dtypes["T"]]
    a = torch.randn(n, c, device=device, dtype=t)
    return [a, torch.randn_like(a), torch.empty_like(a), c, 1.0]


def swiglu(a, b):
    """float64: silu(a) * b."""
    return torch.nn.functional.silu(a.double()) * b.double()


def swiglu_reference(a, b, c, stride, gate):
    return {"c_ptr": swiglu(a * gate, b)}


def kl_inputs(sizes, dtypes, device="cuda"):
    """_kldiv_kernel_forward's arguments as kldiv_forward_triton passes them (batchmean):
    log-probabilities, probabilities, one loss per row, the width, eps."""
    n, c, t = sizes["n_rows"], sizes["n_cols"], DT32[dtypes["T"]]
    y = torch.randn(n, c, device=device, dtype=torch.float32).log_softmax(-1).to(t)
    gt = torch.randn(n, c, device=device, dtype=torch.float32).softmax(-1).to(t)
    loss = torch.zeros(n, device=device, dtype=torch.float32)
    return [y, c, gt, c, loss, 1, c, KL_EPS]


def kl_rows(y, gt, eps=KL_EPS):
    """float64: sum over the row of gt * (log(max(gt, eps)) - y)."""
    y, gt = y.double(), gt.double()
    return (gt * (gt.clamp_min(eps).log() - y)).sum(-1)


def kl_reference(y, ys, gt, gs, loss, ls, n_cols, eps):
    return {"loss_ptr": kl_rows(y, gt, eps)}


def rope_inputs(sizes, dtypes, device="cuda"):
    """_triton_rope's arguments as rope_forward passes them: q and k (batch, seq, heads,
    head_dim), cos and sin (1, seq, head_dim), their row strides, the sequence length."""
    b, s, t = sizes["batch"], sizes["sl"], DT[dtypes["T"]]
    hq, hk, d = sizes["q_heads"], sizes["kv_heads"], sizes["head_dim"]
    q = torch.randn(b, s, hq, d, device=device, dtype=t)
    k = torch.randn(b, s, hk, d, device=device, dtype=t)
    pos = torch.arange(s, device=device, dtype=torch.float32)[:, None]
    freq = 1e4 ** (-torch.arange(0, d, 2, device=device, dtype=torch.float32) / d)
    angle = torch.cat([pos * freq, pos * freq], -1)[None]
    cos, sin = angle.cos().to(t), angle.sin().to(t)
    return [q, q.stride(1), k, k.stride(1), cos, cos.stride(-2), sin, sin.stride(-2), s]


def rotate(x, cos, sin):
    """float64: HF Llama's rotary embedding of x (batch, seq, heads, head_dim)."""
    x, cos, sin = x.double(), cos.double()[:, :, None], sin.double()[:, :, None]
    half = x.shape[-1] // 2
    turned = torch.cat([-x[..., half:], x[..., :half]], -1)
    return x * cos + turned * sin


def rope_reference(q, qs, k, ks, cos, cs, sin, ss, sl):
    return {"q_ptr": rotate(q, cos, sin), "k_ptr": rotate(k, cos, sin)}


def ce_inputs(sizes, dtypes, device="cuda"):
    """liger_cross_entropy_kernel's arguments as cross_entropy_forward passes them in
    training without weight, z-loss, accuracy or softcap: logits (overwritten with their
    gradient), targets (a tenth ignored), one loss per row (zeros), the width, the count
    of rows not ignored, ignore_index."""
    n, c, t = sizes["n_rows"], sizes["n_cols"], DT32[dtypes["T"]]
    x = torch.randn(n, c, device=device, dtype=t)
    y = torch.randint(0, c, (n,), device=device)
    if n > 1:
        y[::10] = IGNORE
    kept = n - (n + 9) // 10 if n > 1 else n
    loss = torch.zeros(n, device=device, dtype=t)
    return [x, c, y, 1, None, loss, None, 1, None, 0, None, 0, c, kept, kept, 0.0,
            IGNORE, None]  # fmt: skip


def ce_rows(x, y, kept):
    """float64: each row's loss / kept (0 where ignored) and the logits' gradient."""
    x64, keep = x.double(), (y != IGNORE)
    target = torch.where(keep, y, 0)
    grad = x64.log_softmax(-1)
    loss = -grad.gather(1, target[:, None])[:, 0] / kept
    grad = grad.exp_().scatter_add_(1, target[:, None], -torch.ones_like(grad[:, :1]))
    grad = grad.div_(kept).mul_(keep[:, None])
    return loss * keep, grad


def ce_reference(x, xs, y, ys, w, loss, z, ls, acc, accs, pred, ps, n_cols, kept, *rest):
    loss64, grad = ce_rows(x, y, kept)
    return {"X_ptr": grad, "loss_ptr": loss64}
