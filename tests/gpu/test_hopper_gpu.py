"""Hopper kernels on an H100/H200 (issue 21): recipes/hopper.toml's TMA matmuls (host and
in-kernel descriptors, split-K with its workspace, the op over split-K and persistent) and
attention forward (causal and not, head dims 64 and 128; the Triton kernel, the Gluon one
and the op over both), fp16 and bf16, through the
loader: at buckets and between them, against float64 references, with outputs poisoned
first; tensors TMA cannot read are refused before any launch.

AOTC_TEST_HOPPER_BUNDLE names a bundle of recipes/hopper.toml (tuned on this GPU by
benchmarks/run_hopper_on_gpu.sh); without it one is built here with the heuristic's picks.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from tests.modules import load_module

pytestmark = pytest.mark.gpu

ROOT = Path(__file__).resolve().parents[2]
RECIPE = ROOT / "recipes" / "hopper.toml"
TOL = 1e-2


@pytest.fixture(scope="module")
def hopper(given_or_built: Callable[..., Path]) -> Any:
    import torch

    import loader

    path = given_or_built(RECIPE, "AOTC_TEST_HOPPER_BUNDLE")
    torch.cuda.init()  # type: ignore[no-untyped-call]
    return loader.open(path)


def _dt(name: str) -> Any:
    import torch

    return {"fp16": torch.float16, "bf16": torch.bfloat16}[name]


def _check(out: Any, ref: Any) -> float:
    import torch

    out64 = out.double()
    assert torch.isfinite(out64).all(), "output has NaN/inf (unwritten elements)"
    return float(torch.linalg.norm(out64 - ref) / torch.linalg.norm(ref))


@pytest.mark.parametrize("dtype", ["fp16", "bf16"])
@pytest.mark.parametrize("m", [64, 100, 128, 300, 512, 1000, 4096, 5000, 8192])
@pytest.mark.parametrize("name", ["matmul_tma", "matmul_ws"])
def test_matmul_with_host_descriptors(hopper: Any, dtype: str, m: int, name: str) -> None:
    # name: the persistent Triton kernel, or the warp-specialised Gluon one
    import torch

    n, k = 4096, 4096
    a = torch.randn(m, k, device="cuda", dtype=_dt(dtype))
    b = torch.randn(k, n, device="cuda", dtype=_dt(dtype)) / k**0.5
    c = torch.full((m, n), float("nan"), device="cuda", dtype=_dt(dtype))
    hopper[name](a, b, c, m, n, k)
    torch.cuda.synchronize()
    assert _check(c, a.double() @ b.double()) < TOL


def _hopper_module(name: str) -> Any:
    """recipes/hopper/NAME.py, imported as aotc imports a recipe's files (its folder
    importable: splitk_matmul imports tma_matmul)."""
    from aot.source import load_module

    return load_module(RECIPE.parent / "hopper" / f"{name}.py")


@pytest.mark.parametrize("split_k", [1, 2, 4, 8])
@pytest.mark.parametrize(("m", "n", "k"), [(64, 4096, 4096), (77, 200, 1000), (300, 512, 96)])
def test_split_k_kernel_sums_its_partials_and_leaves_the_locks_zero(
    split_k: int, m: int, n: int, k: int
) -> None:
    """The kernel itself through Triton's JIT, at every split count the recipe searches
    (a split may get no K step at all: K = 96 in 64-deep steps), three calls on the same
    workspace: each finds the locks as the one before left them, zero."""
    import torch
    import triton
    from triton.tools.tensor_descriptor import TensorDescriptor

    kernel = _hopper_module("splitk_matmul").matmul_tma_splitk
    config = {"BLOCK_M": 64, "BLOCK_N": 64, "BLOCK_K": 64, "SPLIT_K": split_k}
    ws, locks = _hopper_module("calls").splitk_workspace(m, n, config)
    a = torch.randn(m, k, device="cuda", dtype=torch.float16)
    b = torch.randn(k, n, device="cuda", dtype=torch.float16) / k**0.5
    grid = (triton.cdiv(m, 64) * triton.cdiv(n, 64) * split_k,)
    for _ in range(3):
        c = torch.full((m, n), float("nan"), device="cuda", dtype=torch.float16)
        descs = [TensorDescriptor.from_tensor(t, [64, 64]) for t in (a, b, c)]
        kernel[grid](*descs, ws, locks, m, n, k, **config, GROUP_M=8)
        torch.cuda.synchronize()
        assert _check(c, a.double() @ b.double()) < TOL
        assert not locks.any()


@pytest.mark.parametrize("dtype", ["fp16", "bf16"])
@pytest.mark.parametrize("m", [64, 100, 128, 300, 512, 1000, 4096, 5000])
def test_matmul_op_routes_each_bucket_and_computes_the_product(
    hopper: Any, dtype: str, m: int
) -> None:
    """``bundle["matmul"]``: split-K, the persistent kernel or the warp-specialised one,
    whichever the build measured fastest at the bucket, with the workspace sized from the
    split kernel's launch config."""
    import torch

    n, k = 4096, 4096
    config = hopper["matmul_tma_splitk"].launch_config(dtypes={"T": dtype}, M=m)
    ws, locks = _hopper_module("calls").splitk_workspace(m, n, config)
    a = torch.randn(m, k, device="cuda", dtype=_dt(dtype))
    b = torch.randn(k, n, device="cuda", dtype=_dt(dtype)) / k**0.5
    for _ in range(2):
        c = torch.full((m, n), float("nan"), device="cuda", dtype=_dt(dtype))
        hopper["matmul"](a, b, c, ws, locks, m, n, k)
        torch.cuda.synchronize()
        assert _check(c, a.double() @ b.double()) < TOL
    assert not locks.any()


@pytest.mark.parametrize("m", [33, 64, 100])
def test_a_splitk_workspace_too_small_is_never_written_past(hopper: Any, m: int) -> None:
    """A workspace one element short of what the bucket's config needs: the call runs a
    variant it is large enough for, or is refused naming ws_len; the memory after it, a
    canary, is never touched."""
    import torch

    from loader.errors import ArgumentError

    n, k = 4096, 4096
    kernel = hopper["matmul_tma_splitk"]
    workspace = _hopper_module("calls").splitk_workspace
    config = kernel.launch_config(dtypes={"T": "fp16"}, M=m)
    if config["SPLIT_K"] == 1:
        pytest.skip(f"the bundle runs SPLIT_K = 1 at M = {m}: no workspace")
    short = workspace(m, n, config)[0].numel() - 1
    ws = torch.full((short + 4096,), 7.0, device="cuda")
    locks = torch.zeros(4096, device="cuda", dtype=torch.int32)
    a = torch.randn(m, k, device="cuda", dtype=torch.float16)
    b = torch.randn(k, n, device="cuda", dtype=torch.float16) / k**0.5
    c = torch.full((m, n), float("nan"), device="cuda", dtype=torch.float16)
    args = (a, b, c, ws[:short], locks, m, n, k)
    try:
        variant = kernel.variant_for(*args)
    except ArgumentError as err:
        assert "ws_len" in str(err)
        with pytest.raises(ArgumentError, match="no variant in the bundle was built"):
            kernel(*args)
    else:  # another bucket's variant, whose own workspace fits
        assert workspace(m, n, variant.meta)[0].numel() <= short or variant.meta["SPLIT_K"] == 1
        kernel(*args)
        torch.cuda.synchronize()
        assert _check(c, a.double() @ b.double()) < TOL
    torch.cuda.synchronize()
    assert (ws[short:] == 7.0).all()


@pytest.mark.parametrize("dtype", ["fp16", "bf16"])
@pytest.mark.parametrize(("m", "n", "k"), [(64, 4096, 4096), (77, 200, 120), (1000, 4096, 4096),
                                           (4096, 4096, 4096), (5000, 1024, 2048)])  # fmt: skip
def test_matmul_with_device_descriptors_and_scratch(
    hopper: Any, dtype: str, m: int, n: int, k: int
) -> None:
    import torch

    a = torch.randn(m, k, device="cuda", dtype=_dt(dtype))
    b = torch.randn(k, n, device="cuda", dtype=_dt(dtype)) / k**0.5
    c = torch.full((m, n), float("nan"), device="cuda", dtype=_dt(dtype))
    hopper["matmul_tma_device"](a, b, c, m, n, k, a.stride(0), b.stride(0), c.stride(0))
    torch.cuda.synchronize()
    assert _check(c, a.double() @ b.double()) < TOL


def test_odd_sizes_with_host_descriptors(hopper: Any) -> None:
    import torch

    m, n, k = 77, 200, 120  # edges: TMA pads loads with zeros and clips stores
    a = torch.randn(m, k, device="cuda", dtype=torch.float16)
    b = torch.randn(k, n, device="cuda", dtype=torch.float16)
    c = torch.full((m, n), float("nan"), device="cuda", dtype=torch.float16)
    hopper["matmul_tma"](a, b, c, m, n, k)
    torch.cuda.synchronize()
    assert _check(c, a.double() @ b.double()) < TOL


def test_tensors_tma_cannot_read_are_refused(hopper: Any) -> None:
    import torch

    import loader

    m, n, k = 256, 4096, 4096
    base = torch.randn(m * k + 8, device="cuda", dtype=torch.float16)
    b = torch.randn(k, n, device="cuda", dtype=torch.float16)
    c = torch.zeros(m, n, device="cuda", dtype=torch.float16)
    shifted = base[1 : 1 + m * k].view(m, k)  # 2 bytes past a 16-byte boundary
    with pytest.raises(loader.ArgumentError, match=r"a_desc.*16-byte aligned"):
        hopper["matmul_tma"](shifted, b, c, m, n, k)
    wide = torch.randn(m, k + 4, device="cuda", dtype=torch.float16)[:, :k]  # row 8200 B
    with pytest.raises(loader.ArgumentError, match=r"a_desc.*multiple of 16 bytes"):
        hopper["matmul_tma"](wide, b, c, m, n, k)
    with pytest.raises(loader.ArgumentError, match=r"b_desc.*innermost"):
        hopper["matmul_tma"](base[: m * k].view(m, k), b.t(), c, m, n, k)
    torch.cuda.synchronize()
    assert not c.any()  # nothing ran


def _attention(q: Any, k: Any, v: Any, z: int, h: int, n: int, causal: bool, scale: float) -> Any:
    import torch

    shape = (z, h, n, q.shape[-1])
    q64, k64, v64 = (t.reshape(shape).double() for t in (q, k, v))
    s = (q64 @ k64.transpose(-1, -2)) * scale
    if causal:
        s = s.masked_fill(torch.ones(n, n, dtype=torch.bool, device=q.device).triu(1), -torch.inf)
    return (s.softmax(-1) @ v64).reshape(z * h * n, -1)


@pytest.mark.parametrize("dtype", ["fp16", "bf16"])
@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("d", [64, 128])
@pytest.mark.parametrize("n", [512, 640, 768, 1024, 4096])
@pytest.mark.parametrize("form", ["triton", "gluon", "persistent", "3wg", "op"])
def test_attention_with_host_descriptors(
    hopper: Any, dtype: str, causal: bool, d: int, n: int, form: str
) -> None:
    # form: the Triton kernel, the Gluon one (hopper/attention_gluon.py), its persistent
    # form, its three-warp-group form (d = 64, non-causal only), or the op that routes each
    # bucket to the fastest of them. At n = 640 a head has five query blocks of 128: the
    # persistent causal form's middle one is a unit alone; no n here is a multiple of the
    # three-group form's 192 rows, so its last tile of each head reaches past the end.
    import torch

    if form == "3wg" and (causal or d != 64):
        pytest.skip("the three-warp-group form is built for d = 64, non-causal")

    z, h = 2, 8
    q, k, v = (torch.randn(z * h * n, d, device="cuda", dtype=_dt(dtype)) for _ in range(3))
    o = torch.full_like(q, float("nan"))
    scale = d**-0.5
    name = f"attention_d{d}" + ("_causal" if causal else "")
    name = {"triton": name, "gluon": f"{name}_gluon", "persistent": f"{name}_gluon_persistent",
            "3wg": f"{name}_gluon_3wg", "op": name.replace("_d", "_fwd_d")}[form]  # fmt: skip
    hopper[name](q, k, v, o, scale, z, h, n)
    torch.cuda.synchronize()
    assert _check(o, _attention(q, k, v, z, h, n, causal, scale)) < TOL


def test_attention_refuses_a_length_its_blocks_do_not_divide(hopper: Any) -> None:
    import torch

    import loader

    z, h, n, d = 1, 2, 520, 64
    q, k, v = (torch.randn(z * h * n, d, device="cuda", dtype=torch.float16) for _ in range(3))
    o = torch.zeros_like(q)
    for name in ("attention_d64", "attention_d64_gluon", "attention_d64_gluon_3wg",
                 "attention_fwd_d64"):  # fmt: skip
        with pytest.raises(loader.ArgumentError, match="N_CTX"):
            hopper[name](q, k, v, o, 0.125, z, h, n)


@pytest.fixture(scope="module")
def shipped(tmp_path_factory: pytest.TempPathFactory) -> Any:
    """tests/data/tma_shipped: the tutorial-style TMA kernel, built unchanged on this GPU
    (tuned: its inputs build TensorDescriptors, its configs' pre_hook gives the blocks)."""
    import shutil

    import torch

    import loader
    from aot.build import build
    from aot.env import Environment

    tmp = tmp_path_factory.mktemp("tma_shipped")
    shutil.copytree(ROOT / "tests" / "data" / "tma_shipped", tmp / "r")
    env = Environment(cache_dir=tmp / "cache", jobs=8, progress=False)
    build(tmp / "r" / "tma.toml", tmp / "t.aotc", env, tmp)
    torch.cuda.init()  # type: ignore[no-untyped-call]
    return loader.open(tmp / "t.aotc"), tmp / "r"


@pytest.mark.parametrize("dtype", ["fp16", "bf16"])
@pytest.mark.parametrize("m", [100, 128, 1000, 4096])
def test_a_tutorial_style_kernel_matches_its_own_wrapper(shipped: Any, dtype: str, m: int) -> None:
    """The bundle, called with the author's TensorDescriptors, against the author's own
    wrapper (Triton's JIT and autotuner) and float64."""
    import torch
    from triton.tools.tensor_descriptor import TensorDescriptor

    bundle, root = shipped
    module = load_module(root / "tma_tutorial.py", "tma_tutorial")
    n = k = 4096
    a = torch.randn(m, k, device="cuda", dtype=_dt(dtype))
    b = torch.randn(k, n, device="cuda", dtype=_dt(dtype)) / k**0.5
    c = torch.full((m, n), float("nan"), device="cuda", dtype=_dt(dtype))
    descs = [TensorDescriptor.from_tensor(t, [1, 1]) for t in (a, b, c)]
    bundle["matmul"](*descs, m, n, k)
    jit = module.matmul(a, b)
    torch.cuda.synchronize()
    ref = a.double() @ b.double()
    assert _check(c, ref) < TOL and _check(jit, ref) < TOL
