"""Gated activation for a fused gate/up projection: out = act(x[:, :N]) * x[:, N:].

``ACTIVATION`` is a string constexpr, as model code names it: "silu" (SwiGLU, Llama),
"gelu" (GeGLU, exact erf form) or "" (no activation: the plain bilinear GLU). Each value is
its own compiled kernel; the branches on it cost nothing at run time.
"""

import torch
import triton
import triton.language as tl


@triton.autotune(
    configs=[
        triton.Config({"BLOCK_N": 512}, num_warps=4),
        triton.Config({"BLOCK_N": 1024}, num_warps=4),
        triton.Config({"BLOCK_N": 1024}, num_warps=8),
        triton.Config({"BLOCK_N": 2048}, num_warps=8),
        triton.Config({"BLOCK_N": 4096}, num_warps=16),
    ],
    key=["n_cols"],
)
@triton.jit
def act_mul_kernel(
    x_ptr,
    out_ptr,
    n_cols,
    stride_x,
    stride_out,
    ACTIVATION: tl.constexpr,
    BLOCK_N: tl.constexpr,
):
    row = tl.program_id(0).to(tl.int64)
    cols = tl.program_id(1) * BLOCK_N + tl.arange(0, BLOCK_N)
    mask = cols < n_cols
    gate_row = x_ptr + row * stride_x
    gate = tl.load(gate_row + cols, mask=mask, other=0.0).to(tl.float32)
    up = tl.load(gate_row + n_cols + cols, mask=mask, other=0.0).to(tl.float32)
    if ACTIVATION == "silu":
        gate = gate * tl.sigmoid(gate)
    elif ACTIVATION == "gelu":
        gate = 0.5 * gate * (1.0 + tl.erf(gate * 0.7071067811865476))
    tl.store(out_ptr + row * stride_out + cols, (gate * up).to(out_ptr.dtype.element_ty), mask=mask)


def act_mul(
    x: torch.Tensor, activation: str = "silu", out: torch.Tensor | None = None
) -> torch.Tensor:
    """x [..., 2 * n] -> [..., n]: act(first half) * second half."""
    if activation not in ("", "silu", "gelu"):
        raise ValueError(f"activation {activation!r}: use 'silu', 'gelu' or ''")
    rows = x.reshape(-1, x.shape[-1])
    assert rows.stride(-1) == 1 and rows.shape[1] % 2 == 0
    n_rows, n_cols = rows.shape[0], rows.shape[1] // 2
    y = torch.empty((n_rows, n_cols), device=x.device, dtype=x.dtype) if out is None else out

    def grid(meta):
        return (n_rows, triton.cdiv(n_cols, meta["BLOCK_N"]))

    act_mul_kernel[grid](rows, y, n_cols, rows.stride(0), y.stride(0), ACTIVATION=activation)
    return y.view(*x.shape[:-1], n_cols)
