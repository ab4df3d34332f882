"""The gallery kernels (recipes/gallery/), each built from its file unchanged into a bundle
and called through the loader, against the same kernel through Triton's JIT.

For every recipe kernel, at every bucket bound, inside the buckets and past the last one
(and at every listed size), in every dtype: outputs are poisoned with NaN (or zeroed,
where the kernel accumulates), the bundle's kernel and the author's own host wrapper (its
@triton.autotune, heuristics or launcher table) each run, and both must match the float64
reference. The calling convention (keyword call values, zeroed outputs, the MoE's host
alignment for the launched config) comes from recipes/gallery/reference.py.

Also: sizes the recipes give only as performance hints (N, K, a vocabulary, an MLP width)
must run correctly at other values; a row width whose BLOCK_SIZE the RMSNorm bundle was not
built for must be refused with ``loader.ArgumentError``, never run.

Bundles are built here (tuned on this GPU) unless ``AOTC_GALLERY_BUNDLES`` names a folder
holding ``<recipe>.aotc`` for each recipe (e.g. the one benchmarks/gallery_bench.py fills).
"""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.modules import load_module

pytestmark = pytest.mark.gpu

ROOT = Path(__file__).resolve().parents[2]
GALLERY = ROOT / "recipes" / "gallery"


def _load_reference() -> Any:
    if str(GALLERY) not in sys.path:
        sys.path.insert(0, str(GALLERY))
    name = "gallery_reference_gpu"
    return sys.modules.get(name) or load_module(GALLERY / "reference.py", name)


def _kernel_names() -> list[str]:
    import tomllib

    return sorted(
        t["name"] for p in GALLERY.glob("*.toml") for t in tomllib.loads(p.read_text())["kernel"]
    )


@pytest.fixture(scope="module")
def ref() -> Any:
    pytest.importorskip("torch")
    reference = _load_reference()
    _quick_autotune(reference)
    return reference


def _quick_autotune(reference: Any) -> None:
    """The JIT's own @triton.autotune times each config briefly here: this test compares
    results, not speed (benchmarks/gallery_bench.py times both sides properly), and the
    JIT retunes at every new size."""
    import triton.testing
    from triton.runtime.autotuner import Autotuner

    def brief(fn: Any, quantiles: Any = None) -> Any:
        return triton.testing.do_bench(fn, warmup=1, rep=2, quantiles=quantiles)

    for name in _kernel_names():
        node = reference.kernel_object(name)
        while node is not None and not hasattr(node, "params"):
            if isinstance(node, Autotuner):
                node.do_bench = brief  # an instance attribute: Autotuner's is cached_property
            node = getattr(node, "fn", None)


@pytest.fixture(scope="module")
def bundles(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    """bundles(recipe_path) -> the opened bundle, built (and tuned) once per recipe."""
    import torch

    import loader

    torch.cuda.init()
    given = os.environ.get("AOTC_GALLERY_BUNDLES")
    opened: dict[Path, Any] = {}

    def get(recipe: Path) -> Any:
        if recipe not in opened:
            if given:
                path = Path(given) / f"{recipe.stem}.aotc"
            else:
                from aot.build import build
                from aot.env import Environment

                path = tmp_path_factory.mktemp(recipe.stem) / f"{recipe.stem}.aotc"
                cache = tmp_path_factory.mktemp("cache")
                env = Environment(cache_dir=cache, jobs=os.cpu_count() or 1, progress=False)
                build(recipe, path, env, ROOT)
            opened[recipe] = loader.open(path)
        return opened[recipe]

    yield get
    for b in opened.values():
        b.close()


def _tol(t: Any) -> float:
    import torch

    return 1e-4 if t.dtype == torch.float32 else 1e-2


def _rel_error(out: Any, want: Any) -> float:
    import torch

    have = out.reshape(want.shape).double()
    assert torch.isfinite(have).all(), "NaN/inf in the output (unwritten or broken elements)"
    return float(torch.linalg.norm(have - want) / torch.linalg.norm(want))


def _compare(
    ref: Any,
    bundle: Any,
    name: str,
    sizes: dict[str, int],
    dtype: str,
    args: list[Any] | None = None,
    **keywords: int,
) -> None:
    """Bundle and JIT on the same inputs, both against the float64 reference."""
    import torch

    conv = ref.CONVENTIONS[name]
    kernel = bundle[name]
    if args is None:
        args = ref.call_args(name, sizes, {"T": dtype}, kernel.launch_config)
    params = ref.kernel_params(name)
    expected = getattr(ref, f"{name}_reference")(*args)
    for out in expected:
        t = args[params.index(out)]
        if out in conv.zeroed:
            t.zero_()
        else:
            t.fill_(float("nan"))
    calls = ref.call_keywords(name, sizes, kernel) | keywords
    kernel(*args, **calls)
    jit = conv.jit(args)()
    torch.cuda.synchronize()
    where = f"{name} {dtype} {sizes}"
    for out, want in expected.items():
        got = args[params.index(out)]
        err = _rel_error(got, want)
        assert err < _tol(got), f"{where}: bundle {out} rel. error {err:.2e}"
        err = _rel_error(jit[out], want)
        assert err < _tol(got), f"{where}: Triton JIT {out} rel. error {err:.2e} (reference?)"


@pytest.mark.parametrize("name", _kernel_names())
def test_bundle_matches_jit_at_and_between_buckets(ref: Any, bundles: Any, name: str) -> None:
    table = ref.recipe_kernels()[name]
    bundle = bundles(table["recipe"])
    for dtype in table["dtypes"]["T"]:
        for sizes in ref.bucket_points(table, between=True):
            _compare(ref, bundle, name, sizes, dtype)


# Sizes the recipes give only as performance hints: other values must run, correctly.
OFF_HINT = {
    "matmul": [{"M": 33, "N": 1000, "K": 999}, {"M": 300, "N": 4095, "K": 257}],
    "linear": [{"M": 7, "N": 4096, "K": 4096}, {"M": 129, "N": 1000, "K": 520}],
    "splitk": [{"M": 5, "N": 4096, "K": 14000}, {"M": 64, "N": 1024, "K": 4099}],
    "softmax": [{"n_rows": 5, "n_cols": 50000}, {"n_rows": 17, "n_cols": 65536}],
    "act_mul_silu": [{"n_rows": 9, "n_cols": 11008}, {"n_rows": 100, "n_cols": 1000}],
    "act_mul_gelu": [{"n_rows": 9, "n_cols": 11008}],
    "act_mul_none": [{"n_rows": 9, "n_cols": 11008}],
    "moe": [
        {"num_tokens": 3, "N": 14336, "K": 4096, "num_experts": 8},
        {"num_tokens": 40, "N": 1000, "K": 520, "num_experts": 8},
    ],
    # row widths whose BLOCK_SIZE (next power of two) the bundle holds
    "rmsnorm": [{"n_rows": 3, "n_cols": 3000}, {"n_rows": 70, "n_cols": 5120}],
}


@pytest.mark.parametrize("name", sorted(OFF_HINT))
def test_sizes_given_as_hints_still_run_correctly(ref: Any, bundles: Any, name: str) -> None:
    table = ref.recipe_kernels()[name]
    bundle = bundles(table["recipe"])
    for sizes in OFF_HINT[name]:
        _compare(ref, bundle, name, sizes, table["dtypes"]["T"][-1])


def test_linear_with_and_without_bias(ref: Any, bundles: Any) -> None:
    """The same bundle serves bias=None (the author's call) and a real bias, per call."""
    table = ref.recipe_kernels()["linear"]
    bundle = bundles(table["recipe"])
    for m in (1, 16, 100, 4096):
        sizes = {"M": m, "N": 4608, "K": 3584}
        args = ref.call_args("linear", sizes, {"T": "bf16"})
        _compare(ref, bundle, "linear", sizes, "bf16", args=args)
        _compare(ref, bundle, "linear", sizes, "bf16", args=[*args[:2], None, *args[3:]])


def test_rmsnorm_refuses_a_row_width_it_was_not_built_for(ref: Any, bundles: Any) -> None:
    import loader

    bundle = bundles(ref.recipe_kernels()["rmsnorm"]["recipe"])
    kernel = bundle["rmsnorm"]
    for n_cols in (1000, 16000):  # BLOCK_SIZE 1024 and 16384: not in the bundle
        args = ref.rmsnorm_inputs({"n_rows": 4, "n_cols": n_cols}, {"T": "bf16"})
        with pytest.raises(loader.ArgumentError, match="n_cols"):
            kernel(*args)
        with pytest.raises(loader.ArgumentError, match="n_cols"):
            kernel.launch_config(n_rows=4, n_cols=n_cols)


def test_rmsnorm_rows_by_keyword_or_from_the_shape(ref: Any, bundles: Any) -> None:
    bundle = bundles(ref.recipe_kernels()["rmsnorm"]["recipe"])
    sizes = {"n_rows": 37, "n_cols": 4096}
    _compare(ref, bundle, "rmsnorm", sizes, "bf16")  # n_rows from X's shape
    _compare(ref, bundle, "rmsnorm", sizes, "bf16", n_rows=37)


def test_softmax_needs_its_rows_by_keyword(ref: Any, bundles: Any) -> None:
    import loader

    bundle = bundles(ref.recipe_kernels()["softmax"]["recipe"])
    args = ref.softmax_inputs({"n_rows": 8, "n_cols": 32000}, {"T": "fp32"})
    with pytest.raises(loader.ArgumentError, match="n_rows"):
        bundle["softmax"](*args)


def test_moe_launch_config_is_what_runs(ref: Any, bundles: Any) -> None:
    """The block size launch_config() answers is the one the bundle launches: ids aligned
    for it give the right result at every bucket, and it is one the recipe searched."""
    table = ref.recipe_kernels()["moe"]
    bundle = bundles(table["recipe"])
    for tokens in table["buckets"]["num_tokens"]:
        config = bundle["moe"].launch_config(num_tokens=tokens)
        assert config["BLOCK_SIZE_M"] in table["space"]["BLOCK_SIZE_M"], config
        assert config["top_k"] == 2 and config["MUL_ROUTED_WEIGHT"] is False, config


def test_splitk_accumulates_into_the_callers_zeros(ref: Any, bundles: Any) -> None:
    """The bundle adds into C, as the JIT kernel does: called twice without zeroing in
    between, C holds twice the product (the loader must not zero it behind the caller)."""
    import torch

    bundle = bundles(ref.recipe_kernels()["splitk"]["recipe"])
    args = ref.splitk_inputs({"M": 8, "N": 4096, "K": 14336}, {"T": "bf16"})
    want = ref.splitk_reference(*args)["c_ptr"]
    args[2].zero_()
    bundle["splitk"](*args)
    bundle["splitk"](*args)
    torch.cuda.synchronize()
    assert _rel_error(args[2], 2 * want) < 1e-4
