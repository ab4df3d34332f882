"""Example inputs, float64 references and calling conventions for the gallery kernels.

For each recipe kernel NAME (see the ``*.toml`` files beside this one):

- ``NAME_inputs(sizes, dtypes, device="cuda", config=None)``: the kernel's runtime
  arguments in order (constexprs excluded) for ``sizes`` (bucket keys, sizes and call
  values by name; extra names are ignored) and the dtype binding. ``config``, the launched
  meta-parameters, matters only to the MoE GEMM, whose host-side alignment depends on
  BLOCK_SIZE_M. ``device="meta"`` gives tensors with the right shapes and dtypes and no data.
- ``NAME_reference(*args)``: ``{output parameter: float64 tensor}``, from the same arguments.
- ``CONVENTIONS[NAME]``: how a service calls the kernel, for the GPU test and the benchmark:
  the keyword call values, what must be zeroed before a launch, how to run the same work
  through the author's own host wrapper (Triton's JIT, with its autotuning or launcher
  table), and, for the MoE GEMM, how to redo the host alignment for a given config.

Imports torch only; the kernel files (and so Triton) are imported when a JIT adapter runs.
"""

from __future__ import annotations

import importlib.util
import inspect
import itertools
import os
import sys
import tomllib
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from moe_align import moe_align_block_size, sorted_ids_capacity

HERE = Path(__file__).resolve().parent
_DTYPES = {"fp16": torch.float16, "bf16": torch.bfloat16, "fp32": torch.float32}

Args = list[Any]
Outputs = dict[str, torch.Tensor]


def _dtype(dtypes: Mapping[str, str]) -> torch.dtype:
    return _DTYPES[dtypes["T"]]


def _randn(shape: tuple[int, ...], dtype: torch.dtype, device: str, scale: float = 1.0) -> Any:
    if device == "meta":
        return torch.empty(shape, dtype=dtype, device="meta")
    return (torch.randn(shape, device=device, dtype=torch.float32) * scale).to(dtype)


# -- matmul, splitk: C = A @ B ---------------------------------------------------------------


def matmul_inputs(sizes, dtypes, device="cuda", config=None):  # type: ignore[no-untyped-def]
    M, N, K = sizes["M"], sizes["N"], sizes["K"]
    dt = _dtype(dtypes)
    a = _randn((M, K), dt, device)
    b = _randn((K, N), dt, device, K**-0.5)
    c = torch.empty((M, N), dtype=dt, device=device)
    strides = [a.stride(0), a.stride(1), b.stride(0), b.stride(1), c.stride(0), c.stride(1)]
    return [a, b, c, M, N, K, *strides]


def matmul_reference(a, b, c, *sizes_and_strides):  # type: ignore[no-untyped-def]
    return {"c_ptr": a.double() @ b.double()}


def splitk_inputs(sizes, dtypes, device="cuda", config=None):  # type: ignore[no-untyped-def]
    args = matmul_inputs(sizes, dtypes, device)
    args[2] = torch.zeros(args[2].shape, dtype=torch.float32, device=device)
    return args


splitk_reference = matmul_reference


# -- linear: y = x @ W^T + bias ------------------------------------------------------------------


def linear_inputs(sizes, dtypes, device="cuda", config=None):  # type: ignore[no-untyped-def]
    M, N, K = sizes["M"], sizes["N"], sizes["K"]
    dt = _dtype(dtypes)
    x = _randn((M, K), dt, device)
    w = _randn((N, K), dt, device, K**-0.5)
    bias = _randn((N,), dt, device)
    y = torch.empty((M, N), dtype=dt, device=device)
    return [
        x,
        w,
        bias,
        y,
        M,
        N,
        K,
        x.stride(0),
        x.stride(1),
        w.stride(0),
        w.stride(1),
        y.stride(0),
        y.stride(1),
    ]


def linear_reference(x, w, bias, y, *sizes_and_strides):  # type: ignore[no-untyped-def]
    out = x.double() @ w.double().t()
    return {"y_ptr": out if bias is None else out + bias.double()}


# -- softmax over rows -------------------------------------------------------------------------


def softmax_inputs(sizes, dtypes, device="cuda", config=None):  # type: ignore[no-untyped-def]
    rows, cols = sizes["n_rows"], sizes["n_cols"]
    dt = _dtype(dtypes)
    x = _randn((rows, cols), dt, device, 4.0)  # logits with a realistic spread
    out = torch.empty((rows, cols), dtype=dt, device=device)
    return [out, x, out.stride(0), x.stride(0), cols]


def softmax_reference(out, x, out_row_stride, in_row_stride, n_cols):  # type: ignore[no-untyped-def]
    return {"out_ptr": torch.softmax(x.double(), dim=-1)}


# -- gated activations: act(x[:, :n]) * x[:, n:] ----------------------------------------------


def act_mul_inputs(sizes, dtypes, device="cuda", config=None):  # type: ignore[no-untyped-def]
    rows, cols = sizes["n_rows"], sizes["n_cols"]
    dt = _dtype(dtypes)
    x = _randn((rows, 2 * cols), dt, device)
    out = torch.empty((rows, cols), dtype=dt, device=device)
    return [x, out, cols, x.stride(0), out.stride(0)]


def _act_mul_reference(activation: str) -> Callable[..., Outputs]:
    def reference(x, out, n_cols, stride_x, stride_out):  # type: ignore[no-untyped-def]
        gate, up = x[:, :n_cols].double(), x[:, n_cols:].double()
        if activation == "silu":
            gate = torch.nn.functional.silu(gate)
        elif activation == "gelu":
            gate = torch.nn.functional.gelu(gate)
        return {"out_ptr": gate * up}

    return reference


act_mul_silu_inputs = act_mul_gelu_inputs = act_mul_none_inputs = act_mul_inputs
act_mul_silu_reference = _act_mul_reference("silu")
act_mul_gelu_reference = _act_mul_reference("gelu")
act_mul_none_reference = _act_mul_reference("")


# -- RMSNorm --------------------------------------------------------------------------------------

RMSNORM_EPS = 1e-6


def rmsnorm_inputs(sizes, dtypes, device="cuda", config=None):  # type: ignore[no-untyped-def]
    rows, cols = sizes["n_rows"], sizes["n_cols"]
    dt = _dtype(dtypes)
    x = _randn((rows, cols), dt, device)
    w = _randn((cols,), dt, device, 0.1)  # Gemma-style: used as (1 + w), see offset
    y = torch.empty((rows, cols), dtype=dt, device=device)
    rstd = torch.empty((rows,), dtype=torch.float32, device=device)
    return [y, y.stride(0), x, x.stride(0), w, rstd, cols, RMSNORM_EPS, 1.0]


def rmsnorm_reference(Y, y_stride, X, x_stride, W, RSTD, n_cols, eps, offset):  # type: ignore[no-untyped-def]
    x = X.double()
    rstd = torch.rsqrt(x.pow(2).mean(dim=-1) + eps)
    return {"Y_ptr": x * rstd[:, None] * (offset + W.double()), "RSTD_ptr": rstd}


# -- MoE grouped GEMM ---------------------------------------------------------------------------

MOE_TOP_K = 2


def moe_inputs(sizes, dtypes, device="cuda", config=None):  # type: ignore[no-untyped-def]
    """Hidden states, expert weights [E, N, K] and a random top-k routing, aligned for
    ``config["BLOCK_SIZE_M"]``. The alignment must match the block size that will be
    launched, so a real device needs ``config``; without it the ids would be silently
    wrong, and this refuses."""
    tokens, N, K = sizes["num_tokens"], sizes["N"], sizes["K"]
    experts = sizes.get("num_experts", 8)
    top_k = (config or {}).get("top_k", MOE_TOP_K)
    dt = _dtype(dtypes)
    a = _randn((tokens, K), dt, device)
    w = _randn((experts, N, K), dt, device, K**-0.5)
    c = torch.empty((tokens * top_k, N), dtype=dt, device=device)
    if device == "meta":
        block = (config or {}).get("BLOCK_SIZE_M", 16)
        cap = sorted_ids_capacity(tokens * top_k, experts, block)
        ids = torch.empty(cap, dtype=torch.int32, device="meta")
        blocks = torch.empty(-(-cap // block), dtype=torch.int32, device="meta")
        used = torch.empty(1, dtype=torch.int32, device="meta")
        weights = torch.empty(tokens * top_k, dtype=torch.float32, device="meta")
        return _moe_args(a, w, c, weights, ids, blocks, used)
    if config is None or "BLOCK_SIZE_M" not in config:
        raise ValueError(
            "moe_inputs: pass config with BLOCK_SIZE_M (the block size the "
            "kernel will be launched with); the alignment depends on it"
        )
    scores = torch.randn(tokens, experts, device=device)
    weights, topk_ids = torch.topk(torch.softmax(scores, dim=-1), top_k, dim=-1)
    ids, blocks, used = moe_align_block_size(topk_ids, config["BLOCK_SIZE_M"], experts)
    return _moe_args(a, w, c, weights.reshape(-1).contiguous(), ids, blocks, used)


def _moe_args(a, w, c, weights, ids, blocks, used):  # type: ignore[no-untyped-def]
    N, K = w.shape[1], w.shape[2]
    return [
        a,
        w,
        c,
        weights,
        ids,
        blocks,
        used,
        N,
        K,
        ids.shape[0],
        weights.numel(),
        a.stride(0),
        a.stride(1),
        w.stride(0),
        w.stride(1),
        w.stride(2),
        c.stride(0),
        c.stride(1),
    ]


def moe_routing(args: Args) -> tuple[torch.Tensor, int]:
    """The [tokens, top_k] expert ids that ``args`` were aligned from, and the block size."""
    a, w, _, _, ids, blocks, _, _, _, em, pairs = args[:11]
    experts = w.shape[0]
    block = (em - pairs) // experts + 1  # sorted_ids_capacity, solved for the block size
    live = ids < pairs
    expert_at = blocks.long()[torch.arange(em, device=ids.device) // block]
    topk_ids = torch.empty(pairs, dtype=torch.int64, device=ids.device)
    topk_ids[ids[live].long()] = expert_at[live]
    return topk_ids.view(a.shape[0], pairs // a.shape[0]), block


def moe_realign(args: Args, config: Mapping[str, Any], topk_ids: Any = None) -> Args:
    """The same routing, aligned again for ``config["BLOCK_SIZE_M"]``: the service's host
    step before each call. ``topk_ids``: the router's output, if the caller has it (a
    service does); else recovered from ``args``."""
    if topk_ids is None:
        topk_ids, _ = moe_routing(args)
    a, w, c, weights = args[:4]
    aligned = moe_align_block_size(topk_ids, config["BLOCK_SIZE_M"], w.shape[0])
    return _moe_args(a, w, c, weights, *aligned)


def moe_reference(*args):  # type: ignore[no-untyped-def]
    a, w, c = args[:3]
    topk_ids, _ = moe_routing(list(args))
    flat = topk_ids.reshape(-1)
    top_k = topk_ids.shape[1]
    out = torch.empty(c.shape, dtype=torch.float64, device=c.device)
    for e in range(w.shape[0]):
        pairs = (flat == e).nonzero().reshape(-1)
        if pairs.numel():
            out[pairs] = a[pairs // top_k].double() @ w[e].double().t()
    return {"c_ptr": out}


# -- the kernel files, and the same work through their own host wrappers (Triton's JIT) -----------

_modules: dict[tuple[str, bool], Any] = {}


def kernel_module(stem: str) -> Any:
    """The gallery file ``<stem>.py``, imported once per process and interpreter mode.
    Triton reads TRITON_INTERPRET when ``@triton.jit`` decorates: at this import for the
    kernel, but at ``import triton`` for Triton's own library, so set it before that."""
    interpret = os.environ.get("TRITON_INTERPRET", "0") not in ("", "0")
    mod = _modules.get((stem, interpret))
    if mod is None:
        if str(HERE) not in sys.path:
            sys.path.insert(0, str(HERE))
        name = f"gallery_{stem}" + ("_interpreted" if interpret else "")
        spec = importlib.util.spec_from_file_location(name, HERE / f"{stem}.py")
        assert spec is not None and spec.loader is not None
        mod = importlib.util.module_from_spec(spec)
        sys.modules[name] = mod
        spec.loader.exec_module(mod)
        _modules[(stem, interpret)] = mod
    return mod


def runtime_params(kernel: Any) -> list[str]:
    """A kernel object's non-constexpr parameters, through any autotune/heuristics stacking."""
    fn = kernel
    while not inspect.isfunction(fn):
        fn = fn.fn
    return [
        p.name
        for p in inspect.signature(fn).parameters.values()
        if "constexpr" not in str(p.annotation)
    ]


Runner = Callable[[], Outputs]


def _matmul_jit(args: Args) -> Runner:
    mod = kernel_module("matmul")
    a, b, c = args[:3]
    out = torch.empty_like(c)
    return lambda: {"c_ptr": mod.matmul(a, b, out=out)}


def _splitk_jit(args: Args) -> Runner:
    mod = kernel_module("splitk")
    a, b, c = args[:3]
    out = torch.empty_like(c)
    return lambda: {"c_ptr": mod.splitk_matmul(a, b, out=out)}


def _linear_jit(args: Args) -> Runner:
    mod = kernel_module("linear")
    x, w, bias, y = args[:4]
    out = torch.empty_like(y)
    return lambda: {"y_ptr": mod.linear(x, w, bias, out=out)}


def _softmax_jit(args: Args) -> Runner:
    mod = kernel_module("softmax")
    out, x = args[:2]
    y = torch.empty_like(out)
    return lambda: {"out_ptr": mod.softmax(x, out=y)}


def _act_mul_jit(activation: str) -> Callable[[Args], Runner]:
    def prepare(args: Args) -> Runner:
        mod = kernel_module("act_mul")
        x, out = args[:2]
        y = torch.empty_like(out)
        return lambda: {"out_ptr": mod.act_mul(x, activation, out=y)}

    return prepare


def _rmsnorm_jit(args: Args) -> Runner:
    mod = kernel_module("rmsnorm")
    _, _, x, _, w, _, _, eps, offset = args

    def run() -> Outputs:
        y, rstd = mod.rms_norm_forward(x, w, eps, offset)
        return {"Y_ptr": y, "RSTD_ptr": rstd}

    return run


def _moe_jit(args: Args, topk_ids: Any = None) -> Runner:
    """The launcher's own config table and alignment, done once; each run is the GEMM.
    ``topk_ids`` as for ``moe_realign``."""
    mod = kernel_module("moe")
    if topk_ids is None:
        topk_ids, _ = moe_routing(args)
    a, w, c, weights = args[:4]
    config = mod.get_config(a.shape[0])
    aligned = mod.moe_align_block_size(topk_ids, config["BLOCK_SIZE_M"], w.shape[0])
    out = torch.empty_like(c)
    top_k = topk_ids.shape[1]

    def run() -> Outputs:
        mod.invoke_fused_moe_kernel(a, w, out, weights, *aligned, False, top_k, config)
        return {"c_ptr": out}

    return run


@dataclass(frozen=True)
class Convention:
    """How a service calls one recipe kernel; see the module docstring."""

    stem: str  # the kernel's file, recipes/gallery/<stem>.py
    jit: Callable[..., Runner]  # prepares the same work through the author's wrapper
    keywords: tuple[str, ...] = ()  # call values passed to the bundle's kernel by keyword
    zeroed: tuple[str, ...] = ()  # outputs the kernel accumulates into: zero before launch
    realign: Callable[..., Args] | None = None  # host prep per config: (args, config)
    optional: tuple[str, ...] = ()  # pointer parameters the author may pass as None
    fresh: tuple[str, ...] = ()  # outputs the author's wrapper allocates at every call


CONVENTIONS: dict[str, Convention] = {
    "matmul": Convention("matmul", _matmul_jit),
    "softmax": Convention("softmax", _softmax_jit, keywords=("n_rows",)),
    "linear": Convention("linear", _linear_jit, optional=("bias_ptr",)),
    "act_mul_silu": Convention("act_mul", _act_mul_jit("silu")),
    "act_mul_gelu": Convention("act_mul", _act_mul_jit("gelu")),
    "act_mul_none": Convention("act_mul", _act_mul_jit("")),
    "rmsnorm": Convention("rmsnorm", _rmsnorm_jit, fresh=("Y_ptr", "RSTD_ptr")),
    "moe": Convention("moe", _moe_jit, realign=moe_realign),
    "splitk": Convention("splitk", _splitk_jit, zeroed=("c_ptr",)),
}


# -- the recipes' sizes, for the GPU test and the benchmark ---------------------------------------


def recipe_kernels() -> dict[str, dict[str, Any]]:
    """Every ``[[kernel]]`` table of the gallery's recipes by name, with ``recipe`` (its path)."""
    found: dict[str, dict[str, Any]] = {}
    for path in sorted(HERE.glob("*.toml")):
        for table in tomllib.loads(path.read_text())["kernel"]:
            found[table["name"]] = {**table, "recipe": path}
    return found


def _between(bounds: list[int]) -> list[int]:
    """Sizes inside each bucket (not on a bound), and one past the last bucket."""
    inside = [
        v for lo, hi in itertools.pairwise(bounds) for v in (lo + 1, (lo + hi) // 2 + 1) if v < hi
    ]
    return [*inside, bounds[-1] + bounds[-1] // 2 + 1]


def bucket_points(table: Mapping[str, Any], between: bool = False) -> list[dict[str, int]]:
    """``sizes`` for every combination of bucket bounds and listed sizes (with ``between``:
    also sizes inside and past the buckets), the other sizes at their recipe values.
    Sizes given as expressions (the MoE's EM) are left to ``inputs``."""
    fixed = {k: v for k, v in table.get("sizes", {}).items() if isinstance(v, int)}
    axes = {k: list(v) for k, v in table.get("sizes", {}).items() if isinstance(v, list)}
    for key, bounds in table["buckets"].items():
        axes[key] = sorted(set(bounds) | set(_between(bounds))) if between else list(bounds)
    names = list(axes)
    return [
        {**fixed, **dict(zip(names, combo, strict=True))}
        for combo in itertools.product(*(axes[n] for n in names))
    ]


def launch_values(table: Mapping[str, Any], sizes: Mapping[str, int]) -> dict[str, int]:
    """What picks the bundle's config: the bucket keys and the listed sizes."""
    listed = [k for k, v in table.get("sizes", {}).items() if isinstance(v, list)]
    return {k: sizes[k] for k in [*table["buckets"], *listed] if k in sizes}


def call_args(
    name: str,
    sizes: Mapping[str, int],
    dtypes: Mapping[str, str],
    launch_config: Callable[..., Mapping[str, Any]] | None = None,
) -> Args:
    """A call's arguments, as a service prepares them: where the host data depends on the
    launched config (the MoE alignment), ``launch_config`` (a bundle kernel's) is asked
    first, with the launch values by keyword."""
    inputs = globals()[f"{name}_inputs"]
    if CONVENTIONS[name].realign is None:
        return list(inputs(sizes, dtypes))
    if launch_config is None:
        raise ValueError(f"{name}: its inputs depend on the launched config; pass launch_config")
    values = launch_values(recipe_kernels()[name], sizes)
    return list(inputs(sizes, dtypes, config=dict(launch_config(**values))))


def call_keywords(name: str, sizes: Mapping[str, int], kernel: Any = None) -> dict[str, int]:
    """What the bundle's kernel takes by keyword: its call values, and the host values the
    arguments were prepared for (the MoE's BLOCK_SIZE_M, from ``kernel.launch_config``)."""
    out = {k: sizes[k] for k in CONVENTIONS[name].keywords}
    host = recipe_kernels()[name].get("host", [])
    if host:
        config = kernel.launch_config(**launch_values(recipe_kernels()[name], sizes))
        out.update({h: config[h] for h in host})
    return out


def kernel_object(name: str) -> Any:
    """The recipe kernel's Triton object, as its file defines it (decorators included)."""
    function = recipe_kernels()[name]["source"].rpartition(":")[2]
    return getattr(kernel_module(CONVENTIONS[name].stem), function)


def kernel_params(name: str) -> list[str]:
    """The recipe kernel's runtime parameters: where each output sits in the arguments."""
    return runtime_params(kernel_object(name))
