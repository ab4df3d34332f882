"""Ops (issue 21): interchangeable kernels behind one name, each bucket routed to the one
the build measured fastest. The example recipe's ``gemm`` holds its matmul and a persistent
TMA matmul; on the CPU nothing is measured, so every bucket routes to the first listed,
and a route the build did measure is checked through the loader on the stand-in driver.
tests/gpu/test_example_gpu.py calls the op on an H200."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

import loader
from aot.build import build
from aot.errors import RecipeError
from aot.ops import FIRST_LISTED, route
from aot.recipe import load
from loader.errors import ArgumentError
from loader.manifest import ChoiceSpec
from loader.op import Op, OpRoute, OpSpec
from tests.conftest import env_for
from tests.fakecuda import FakeLib
from tests.test_descriptors import Tensor

ROOT = Path(__file__).resolve().parents[1]
EXAMPLE = ROOT / "recipes" / "example.toml"
BUCKETS = (1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024, 2048, 4096, 8192)


@pytest.fixture(scope="module")
def bundle(tmp_path_factory: pytest.TempPathFactory, compile_cache: Path) -> Path:
    root = tmp_path_factory.mktemp("ops")
    build(EXAMPLE, root / "example.aotc", env_for(compile_cache), root)
    return root / "example.aotc"


def _choice(ms: float | None, device: str = "NVIDIA H200") -> ChoiceSpec:
    if ms is None:
        return ChoiceSpec((64,), "c", "untuned (heuristic)", ("v",))
    return ChoiceSpec((64,), "c", f"measured on {device}", ("v",), {"ms": ms, "device": device})


def test_a_bucket_goes_to_the_fastest_only_when_every_kernel_was_measured_on_one_gpu() -> None:
    name, why = route([("matmul", _choice(0.030)), ("matmul_tma", _choice(0.020))])
    assert name == "matmul_tma" and "20.0 µs" in why and "matmul 30.0 µs" in why
    assert route([("matmul", _choice(0.010)), ("matmul_tma", _choice(0.020))])[0] == "matmul"
    # one unmeasured, or measured on different GPUs, or not built: the first listed
    for second in (_choice(None), _choice(0.001, "NVIDIA H100"), None):
        name, why = route([("matmul", _choice(0.030)), ("matmul_tma", second)])
        assert name == "matmul" and why.startswith(FIRST_LISTED)


def _kernel_name(fake: FakeLib) -> str:
    return fake.functions[fake.launches[-1].function]


def _args(m: int, a: Tensor | None = None) -> list[object]:
    n = k = 4096
    a = a or Tensor(0x100000, (m, k))
    b, c = Tensor(0x2000000, (k, n)), Tensor(0x4000000, (m, n))
    return [a, b, c, m, n, k, *a.stride(), *b.stride(), *c.stride()]


def test_the_example_op_routes_every_bucket_to_matmul_without_a_gpu(
    fake: FakeLib, bundle: Path
) -> None:
    b = loader.open(bundle)
    gemm = b["gemm"]
    assert isinstance(gemm, Op) and b.op_names == ["gemm"]
    routes = {(r.target, r.dtypes["T"]): set(r.kernels) for r in gemm.spec.routes}
    assert routes == {(t, d): {"matmul"} for t in ("sm_80", "sm_90") for d in ("fp16", "bf16")}
    gemm(*_args(100))
    assert _kernel_name(fake) == "matmul_kernel"
    assert [k.name for k in gemm.route(*_args(100))] == ["matmul", "matmul_tma"]
    with pytest.raises(ArgumentError, match=r"gemm\(\) takes 12 arguments"):
        gemm(*_args(100)[:6])


def test_a_measured_route_runs_its_kernel_and_a_refused_call_falls_back(
    fake: FakeLib, bundle: Path
) -> None:
    b = loader.open(bundle)
    # as a GPU build that measured the TMA kernel faster from M = 1024 up would route
    tma = tuple("matmul_tma" if m >= 1024 else "matmul" for m in BUCKETS)
    route = OpRoute("sm_90", {"T": "fp16"}, tma, ("measured",) * len(BUCKETS))
    spec = OpSpec("gemm", ("matmul", "matmul_tma"), (route,))
    gemm = Op(spec, [b.kernel("matmul"), b.kernel("matmul_tma")], "sm_90")
    gemm(*_args(2048))
    assert _kernel_name(fake) == "matmul_tma_kernel"  # the TMA kernel, given descriptors
    assert fake.launches[-1].grid[0] <= fake.sms  # persistent: at most one program per SM
    gemm(*_args(100))
    assert _kernel_name(fake) == "matmul_kernel"
    # a transposed A: TMA needs a contiguous innermost dimension, so matmul takes it
    at = Tensor(0x100000, (2048, 4096), strides=(1, 2048))
    gemm(*_args(2048, at))
    assert _kernel_name(fake) == "matmul_kernel"
    assert [k.name for k in gemm.route(*_args(2048))] == ["matmul_tma", "matmul"]
    gemm(*_args(9000))  # past the last bucket: served as the last bucket is
    assert _kernel_name(fake) == "matmul_tma_kernel"
    # routes are per dtype binding (this spec routes fp16 only: bf16 takes the recipe's order)
    bf16 = [Tensor(0x100000 * (i + 1), (2048, 4096), dtype="torch.bfloat16") for i in range(3)]
    gemm(*bf16, 2048, 4096, 4096, 4096, 1, 4096, 1, 4096, 1)
    assert _kernel_name(fake) == "matmul_kernel"
    gemm(*_args(2048))  # and fp16 again, from the op's cache of bindings
    assert _kernel_name(fake) == "matmul_tma_kernel"


def test_an_op_takes_its_arguments_by_keyword_too(fake: FakeLib, bundle: Path) -> None:
    """By the first kernel's parameter names, as its kernels take them; the routed kernel
    gets the ones it takes."""
    b = loader.open(bundle)
    tma = tuple("matmul_tma" if m >= 1024 else "matmul" for m in BUCKETS)
    route = OpRoute("sm_90", {"T": "fp16"}, tma, ("measured",) * len(BUCKETS))
    gemm = Op(OpSpec("gemm", ("matmul", "matmul_tma"), (route,)),
              [b.kernel("matmul"), b.kernel("matmul_tma")], "sm_90")  # fmt: skip
    names = [p.name for p in gemm.params]
    for m, kernel in ((2048, "matmul_tma_kernel"), (100, "matmul_kernel")):
        args = _args(m)
        gemm(*args[:3], **dict(zip(names[3:], args[3:], strict=True)))
        assert _kernel_name(fake) == kernel
        gemm(**dict(zip(names, args, strict=True)))
        assert _kernel_name(fake) == kernel
        assert gemm.route(*args[:6], **dict(zip(names[6:], args[6:], strict=True))) == \
            gemm.route(*args)  # fmt: skip
    args = _args(100)
    with pytest.raises(ArgumentError, match=r"gemm\(\) got multiple values for argument 'a_ptr'"):
        gemm(*args, a_ptr=args[0])
    with pytest.raises(ArgumentError, match=r"gemm\(\) is missing argument 'stride_cn'"):
        gemm(*args[:3], **dict(zip(names[3:-1], args[3:-1], strict=True)))


def _recipe(tmp_path: Path, op: str) -> Path:
    shutil.copytree(ROOT / "recipes" / "kernels", tmp_path / "kernels")
    text = EXAMPLE.read_text()
    cut = text.index("[[op]]")
    path = tmp_path / "example.toml"
    path.write_text(text[:cut] + op + text[text.index("\n[[kernel]]", cut) :])
    return path


@pytest.mark.parametrize(
    ("op", "key", "message"),
    [
        ('[[op]]\nname = "gemm"\nkernels = ["matmul"]\n', "kernels", "two or more"),
        ('[[op]]\nname = "gemm"\nkernels = ["matmul", "mm"]\n', "kernels", "'mm' is no"),
        ('[[op]]\nname = "rmsnorm"\nkernels = ["matmul", "matmul_tma"]\n', "name", "already"),
        ('[[op]]\nname = "gemm"\nkernels = ["matmul", "rmsnorm"]\n', "kernels", "'x_ptr'"),
        ('[[op]]\nname = "gemm"\nkernels = ["matmul_tma", "matmul"]\n', "kernels", "'stride_am'"),
        ('[[op]]\nname = "gemm"\nkernel = ["matmul", "matmul_tma"]\n', "kernel", "did you mean"),
    ],
)
def test_a_bad_op_is_refused_naming_the_key(
    tmp_path: Path, op: str, key: str, message: str
) -> None:
    with pytest.raises(RecipeError, match=message) as info:
        load(_recipe(tmp_path, op))
    assert key in str(info.value) and "example.toml" in str(info.value)


def test_inspect_shows_each_route(bundle: Path) -> None:
    from aot.inspect import inspect

    text = inspect(bundle)
    assert "op gemm: matmul, matmul_tma" in text
    assert "  sm_90 [T=fp16]: matmul ×14 (buckets in order)" in text
