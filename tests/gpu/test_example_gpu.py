"""The example bundle, built without a GPU, loaded and called on a real GPU.

Every kernel at every bucket boundary, between buckets, beyond the last bucket and off
alignment, for each dtype; outputs are poisoned with NaN before each call and compared
with a float64 reference by relative error.
"""

from __future__ import annotations

import pytest

pytestmark = pytest.mark.gpu

BETWEEN = [3, 5, 17, 33, 100, 300, 1000, 3000, 5000, 8193]
TOL = {"fp16": 1e-2, "bf16": 1e-2, "fp32": 1e-4}


def _fn(recipe, text):  # type: ignore[no-untyped-def]
    from aot.source import load_module

    file, _, name = text.rpartition(":")
    return getattr(load_module(recipe.root / file), name)


def _rel_error(out, ref) -> float:  # type: ignore[no-untyped-def]
    import torch

    out64 = out.double()
    assert torch.isfinite(out64).all(), "output has NaN/inf (unwritten or broken elements)"
    return float(torch.linalg.norm(out64 - ref) / torch.linalg.norm(ref))


def _run(bundle, recipe, kname, sizes, dtype, mutate=None):  # type: ignore[no-untyped-def]
    import torch

    kr = next(k for k in recipe.kernels if k.name == kname)
    args = _fn(recipe, kr.inputs)(sizes, {"T": dtype})
    if mutate is not None:
        args = mutate(args)
    expected = _fn(recipe, kr.reference)(*args)
    names = list(kr.signature)
    for name in expected:
        args[names.index(name)].fill_(float("nan"))
    kernel = bundle.kernel(kname)
    variant = kernel.variant_for(*args)
    kernel(*args)
    torch.cuda.synchronize()
    errors = {n: _rel_error(args[names.index(n)], ref) for n, ref in expected.items()}
    return variant, errors


@pytest.fixture(scope="module")
def bundle(example_bundle):  # type: ignore[no-untyped-def]
    import torch

    import loader

    torch.cuda.init()
    b = loader.open(example_bundle)
    yield b
    b.close()


def _sizes(kname: str, m: int) -> dict[str, int]:
    return {"M": m, "N": 4096} if kname == "rmsnorm" else {"M": m, "N": 4096, "K": 4096}


@pytest.mark.parametrize("dtype", ["fp16", "bf16"])
@pytest.mark.parametrize("kname", ["matmul", "matmul_tma", "rmsnorm"])
def test_every_bucket_and_between(bundle, example_recipe, kname, dtype):  # type: ignore[no-untyped-def]
    kr = next(k for k in example_recipe.kernels if k.name == kname)
    ms = sorted(set(kr.buckets["M"]) | set(BETWEEN))
    for m in ms:
        variant, errors = _run(bundle, example_recipe, kname, _sizes(kname, m), dtype)
        assert variant.assume, (
            f"M={m}: aligned contiguous inputs should get the specialized variant"
        )
        for name, err in errors.items():
            assert err < TOL[dtype], f"{kname} {dtype} M={m}: {name} rel. error {err:.2e}"


@pytest.mark.parametrize("dtype", ["fp16", "bf16"])
def test_matmul_off_alignment_uses_generic(bundle, example_recipe, dtype):  # type: ignore[no-untyped-def]
    # N and K not multiples of 16: the specialized variant's assumptions fail.
    for m, n, k in [(7, 1000, 999), (300, 4095, 257), (1025, 130, 4097)]:
        variant, errors = _run(bundle, example_recipe, "matmul", {"M": m, "N": n, "K": k}, dtype)
        assert not variant.assume, "misaligned sizes must use the generic variant"
        assert errors["c_ptr"] < TOL[dtype], (m, n, k, errors)


@pytest.mark.parametrize("dtype", ["fp16", "bf16"])
def test_matmul_transposed_and_offset_pointers(bundle, example_recipe, dtype):  # type: ignore[no-untyped-def]
    import torch

    def transpose_b(args):  # type: ignore[no-untyped-def]
        b = args[1]
        bt = b.t().contiguous().t()  # same values, column-major: stride_bn != 1
        return [args[0], bt, *args[2:8], bt.stride(0), bt.stride(1), *args[10:]]

    variant, errors = _run(
        bundle, example_recipe, "matmul", {"M": 64, "N": 512, "K": 256}, dtype, transpose_b
    )
    assert not variant.assume and errors["c_ptr"] < TOL[dtype]

    def offset_a(args):  # type: ignore[no-untyped-def]
        a = args[0]
        big = torch.empty(a.numel() + 1, dtype=a.dtype, device=a.device)
        shifted = big[1:].view_as(a)  # 2-byte offset: not 16-byte aligned
        shifted.copy_(a)
        return [shifted, *args[1:]]

    variant, errors = _run(
        bundle, example_recipe, "matmul", {"M": 64, "N": 512, "K": 256}, dtype, offset_a
    )
    assert not variant.assume and errors["c_ptr"] < TOL[dtype]


def test_rmsnorm_odd_hidden_size(bundle, example_recipe):  # type: ignore[no-untyped-def]
    for n in (1, 17, 1000, 5000):
        variant, errors = _run(bundle, example_recipe, "rmsnorm", {"M": 33, "N": n}, "bf16")
        assert not variant.assume
        assert errors["out_ptr"] < 1e-2, (n, errors)


def test_raw_pointers_stream_and_errors(bundle, example_recipe):  # type: ignore[no-untyped-def]
    import torch

    import loader

    kr = next(k for k in example_recipe.kernels if k.name == "rmsnorm")
    x, w, out, M, N, sx, so, eps = _fn(example_recipe, kr.inputs)(
        {"M": 8, "N": 4096}, {"T": "fp16"}
    )
    expected = _fn(example_recipe, kr.reference)(x, w, out, M, N, sx, so, eps)["out_ptr"]
    k = bundle.kernel("rmsnorm")
    stream = torch.cuda.Stream()
    out.fill_(float("nan"))
    k(
        x.data_ptr(),
        w.data_ptr(),
        out.data_ptr(),
        M,
        N,
        sx,
        so,
        eps,
        stream=stream,
        dtypes={"T": "fp16"},
    )
    stream.synchronize()
    assert _rel_error(out, expected) < 1e-2
    with pytest.raises(loader.ArgumentError, match="takes 8 arguments"):
        k(x, w, out)
    with pytest.raises(loader.ArgumentError, match="null pointer"):
        k(x, w, 0, M, N, sx, so, eps)
    with pytest.raises(loader.ArgumentError, match="element type fp32"):
        k(x, w, out.float(), M, N, sx, so, eps)
    with pytest.raises(loader.ArgumentError, match="not a CUDA device"):
        k(x.cpu(), w, out, M, N, sx, so, eps)
    with pytest.raises(loader.ArgumentError, match="cannot tell the element type"):
        k(x.data_ptr(), w.data_ptr(), out.data_ptr(), M, N, sx, so, eps)


def test_modules_load_lazily_once(example_bundle):  # type: ignore[no-untyped-def]
    import loader

    b = loader.open(example_bundle)
    k = b.kernel("rmsnorm")
    loaded = lambda: sum(  # noqa: E731
        1 for inst in k._instances.values() for lz in inst.launchers.values() if lz.function
    )
    assert loaded() == 0
    import torch

    x = torch.randn(4, 4096, device="cuda", dtype=torch.float16)
    out = torch.empty_like(x)
    w = torch.ones(4096, device="cuda", dtype=torch.float16)
    k(x, w, out, 4, 4096, 4096, 4096, 1e-6)
    assert loaded() == 1
    k(x, w, out, 4, 4096, 4096, 4096, 1e-6)
    assert loaded() == 1
    assert b.warmup() >= 1
    b.close()


def test_bundle_built_on_cpu_reports_target(bundle):  # type: ignore[no-untyped-def]
    assert bundle.target.arch == "sm_90"
    assert bundle.device.cc == (9, 0)


@pytest.mark.parametrize("dtype", ["fp16", "bf16"])
def test_the_gemm_op_at_every_bucket_and_between(bundle, example_recipe, dtype):  # type: ignore[no-untyped-def]
    """``bundle["gemm"]`` runs, per bucket, the kernel the build routed it to (printed), and
    a transposed A, which the TMA kernel refuses, still gets the right product."""
    import torch

    kr = next(k for k in example_recipe.kernels if k.name == "matmul")
    gemm = bundle["gemm"]
    routed = {}
    for m in sorted(set(kr.buckets["M"]) | set(BETWEEN)):
        args = _fn(example_recipe, kr.inputs)(_sizes("matmul", m), {"T": dtype})
        expected = args[0].double() @ args[1].double()
        routed[m] = gemm.route(*args)[0].name
        args[2].fill_(float("nan"))
        gemm(*args)
        torch.cuda.synchronize()
        err = _rel_error(args[2], expected)
        assert err < TOL[dtype], f"gemm {dtype} M={m} ({routed[m]}): rel. error {err:.2e}"
    print(f"gemm {dtype} routes:", routed)
    a, b, c, m, n, k, *_ = _fn(example_recipe, kr.inputs)(_sizes("matmul", 2048), {"T": dtype})
    at = a.t().contiguous().t()  # same values, column-major
    c.fill_(float("nan"))
    gemm(at, b, c, m, n, k, *at.stride(), *b.stride(), *c.stride())
    torch.cuda.synchronize()
    assert _rel_error(c, at.double() @ b.double()) < TOL[dtype]
