"""The Llama-3-8B MLP block in PyTorch: the reference and the baselines of pipeline_bench.py.

Imported by pipeline_bench.py and by the fresh processes it starts to measure time to ready.
Weights are in [K, N] row-major layout (``x @ W``), as the aotc bundle built from
recipes/mlp.toml takes them: w_gate_up holds the gate columns 0..I-1, then the up columns.
"""

from __future__ import annotations

import math

import torch

H = 4096  # hidden size
INTER = 14336  # intermediate size
EPS = 1e-5


def mlp_torch(
    x: torch.Tensor,
    w_norm: torch.Tensor,
    w_gate_up: torch.Tensor,
    w_down: torch.Tensor,
    eps: float = EPS,
) -> torch.Tensor:
    h = torch.nn.functional.rms_norm(x, (x.shape[-1],), w_norm, eps)
    gu = h @ w_gate_up
    g, u = gu.split(gu.shape[-1] // 2, dim=-1)
    return (torch.nn.functional.silu(g) * u) @ w_down + x


class TorchMLP(torch.nn.Module):
    """mlp_torch with the weights held as parameters. torch.compile treats parameters as
    static inputs, so its CUDA graphs use them in place; plain tensor arguments would be
    copied into the graph's own buffers on every replay (352 MB here), which is not how a
    served model runs."""

    def __init__(
        self,
        w_norm: torch.Tensor,
        w_gate_up: torch.Tensor,
        w_down: torch.Tensor,
        eps: float = EPS,
    ):
        super().__init__()
        self.w_norm = torch.nn.Parameter(w_norm, requires_grad=False)
        self.w_gate_up = torch.nn.Parameter(w_gate_up, requires_grad=False)
        self.w_down = torch.nn.Parameter(w_down, requires_grad=False)
        self.eps = eps

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return mlp_torch(x, self.w_norm, self.w_gate_up, self.w_down, self.eps)


def make_weights(seed: int = 0) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Random bf16 weights on the GPU: (w_norm [H], w_gate_up [H, 2I], w_down [I, H])."""
    gen = torch.Generator(device="cuda").manual_seed(seed)
    kw = {"device": "cuda", "dtype": torch.bfloat16, "generator": gen}
    w_norm = torch.rand(H, **kw).add_(0.5)
    w_gate_up = torch.randn(H, 2 * INTER, **kw).div_(math.sqrt(H))
    w_down = torch.randn(INTER, H, **kw).div_(math.sqrt(INTER))
    return w_norm, w_gate_up, w_down


def make_input(m: int, seed: int | None = None) -> torch.Tensor:
    """x [m, H] bf16, random normal; the seed defaults to m so that each size is fixed."""
    gen = torch.Generator(device="cuda").manual_seed(m if seed is None else seed)
    return torch.randn(m, H, device="cuda", dtype=torch.bfloat16, generator=gen)


def float_weights(
    weights: tuple[torch.Tensor, ...],
) -> tuple[torch.Tensor, ...]:
    return tuple(w.float() for w in weights)


def reference(x: torch.Tensor, weights32: tuple[torch.Tensor, ...]) -> torch.Tensor:
    """The block in float32 (full fp32 matmuls unless TF32 was enabled) from bf16 x."""
    with torch.no_grad():
        return mlp_torch(x.float(), *weights32)


def rel_error(y: torch.Tensor, ref: torch.Tensor) -> float:
    """max|y - ref| / max|ref|: the worst element's error on the output's scale. NaN or inf
    when y holds NaN or inf (an unwritten, poisoned output)."""
    if tuple(y.shape) != tuple(ref.shape):
        raise ValueError(f"output shape {tuple(y.shape)}, expected {tuple(ref.shape)}")
    return float((y.float() - ref).abs().max() / ref.abs().max())
