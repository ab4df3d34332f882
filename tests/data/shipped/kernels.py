import triton
import triton.language as tl


@triton.jit
def rms_kernel(Y, X, W, stride, n_cols, eps, BLOCK_SIZE: tl.constexpr):
    row = tl.program_id(0)
    cols = tl.arange(0, BLOCK_SIZE)
    mask = cols < n_cols
    x = tl.load(X + row * stride + cols, mask=mask, other=0.0).to(tl.float32)
    r = 1.0 / tl.sqrt(tl.sum(x * x, axis=0) / n_cols + eps)
    w = tl.load(W + cols, mask=mask, other=0.0).to(tl.float32)
    tl.store(Y + row * stride + cols, (x * r * w).to(Y.dtype.element_ty), mask=mask)


@triton.autotune(
    configs=[
        triton.Config({"BLOCK_M": 32, "BLOCK_N": 32, "BLOCK_K": 32}, num_warps=4, num_stages=2),
        triton.Config({"BLOCK_M": 64, "BLOCK_N": 64, "BLOCK_K": 32}, num_warps=4, num_stages=3),
        triton.Config({"BLOCK_M": 128, "BLOCK_N": 64, "BLOCK_K": 64}, num_warps=8, num_stages=3),
    ],
    key=["M", "N", "K"],
    prune_configs_by={
        "early_config_prune": lambda configs, nargs, **kw: [
            c for c in configs if c.kwargs["BLOCK_M"] <= max(32, nargs["M"])
        ]
    },
)
@triton.heuristics({"EVEN_K": lambda args: args["K"] % args["BLOCK_K"] == 0})
@triton.jit
def mm_kernel(
    a_ptr,
    b_ptr,
    c_ptr,
    bias_ptr,
    M,
    N,
    K,
    sam,
    sak,
    sbk,
    sbn,
    scm,
    scn,
    BLOCK_M: tl.constexpr,
    BLOCK_N: tl.constexpr,
    BLOCK_K: tl.constexpr,
    EVEN_K: tl.constexpr,
    ACTIVATION: tl.constexpr = "",
):
    pid_m = tl.program_id(0)
    pid_n = tl.program_id(1)
    rm = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    rn = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    rk = tl.arange(0, BLOCK_K)
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for k in range(0, K, BLOCK_K):
        a = tl.load(
            a_ptr + rm[:, None] * sam + (k + rk)[None, :] * sak,
            mask=(rm[:, None] < M) & ((k + rk)[None, :] < K),
            other=0.0,
        )
        b = tl.load(
            b_ptr + (k + rk)[:, None] * sbk + rn[None, :] * sbn,
            mask=((k + rk)[:, None] < K) & (rn[None, :] < N),
            other=0.0,
        )
        acc += tl.dot(a, b)
    if bias_ptr is not None:
        acc += tl.load(bias_ptr + rn, mask=rn < N, other=0.0)[None, :].to(tl.float32)
    if ACTIVATION == "relu":
        acc = tl.maximum(acc, 0.0)
    tl.store(
        c_ptr + rm[:, None] * scm + rn[None, :] * scn,
        acc.to(c_ptr.dtype.element_ty),
        mask=(rm[:, None] < M) & (rn[None, :] < N),
    )


@triton.jit
def consts_kernel(
    out_ptr,
    n,
    SCALE: tl.constexpr,
    FLAG: tl.constexpr,
    MODE: tl.constexpr,
    NOTHING: tl.constexpr,
    OUT_T: tl.constexpr,
    BLOCK: tl.constexpr,
):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    v = tl.full((BLOCK,), SCALE, tl.float32)
    if FLAG:
        v = v * 2
    if MODE == "neg":
        v = -v
    if NOTHING is None:
        v = v + 1
    tl.store(out_ptr + offs, v.to(OUT_T), mask=offs < n)


@triton.heuristics({"BLOCK": lambda args: args["x_ptr"].dtype.itemsize * 64})
@triton.jit
def opaque_kernel(x_ptr, n, BLOCK: tl.constexpr):
    offs = tl.arange(0, BLOCK)
    tl.store(x_ptr + offs, tl.load(x_ptr + offs, mask=offs < n), mask=offs < n)


@triton.heuristics({"HAS_BIAS": lambda args: args["bias_ptr"] is not None})
@triton.jit
def blocked_kernel(
    x_ptr, bias_ptr, out_ptr, n, EM, DT: tl.constexpr, BLOCK_M: tl.constexpr, HAS_BIAS: tl.constexpr
):
    offs = tl.program_id(0) * BLOCK_M + tl.arange(0, BLOCK_M)
    x = tl.load(x_ptr + offs, mask=offs < n, other=0.0)
    if HAS_BIAS:
        x += tl.load(bias_ptr + offs, mask=offs < n, other=0.0)
    tl.store(out_ptr + offs, x.to(DT), mask=offs < EM)


@triton.heuristics({"HAS_SCALE": lambda args: args["scale"] is not None})
@triton.jit
def scaled_kernel(x_ptr, out_ptr, scale, n, HAS_SCALE: tl.constexpr, BLOCK: tl.constexpr):
    """out = x * scale, or x where the caller passes scale=None (an optional scalar)."""
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    x = tl.load(x_ptr + offs, mask=offs < n, other=0.0)
    if HAS_SCALE:
        x = x * scale
    tl.store(out_ptr + offs, x, mask=offs < n)
