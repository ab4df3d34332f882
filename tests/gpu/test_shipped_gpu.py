"""tests/data/shipped on the GPU: the optional scalar (issue 18). ``scaled_kernel`` takes
``scale: float | None`` with a ``HAS_SCALE: args["scale"] is not None`` rule, as
flash-linear-attention's kernels do; the bundle holds both forms. Through the loader and
through Triton's JIT, at None, 0.0 and other scales, the outputs must be the same and
right: a call's 0.0 scales by zero, it is not None.

AOTC_TEST_SHIPPED_BUNDLE names a bundle of tests/data/shipped/shipped.toml built
elsewhere; without it one is built here with the heuristic's picks.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

pytestmark = pytest.mark.gpu

ROOT = Path(__file__).resolve().parents[2]
SHIPPED = ROOT / "tests" / "data" / "shipped"


@pytest.fixture(scope="module")
def shipped(given_or_built: Callable[..., Path]) -> Any:
    import torch

    import loader
    from aot.build import TuneOptions

    path = given_or_built(SHIPPED / "shipped.toml", "AOTC_TEST_SHIPPED_BUNDLE",
                          tune=TuneOptions(enabled=False))  # fmt: skip
    torch.cuda.init()  # type: ignore[no-untyped-call]
    return loader.open(path)


def _kernels() -> Any:
    """tests/data/shipped/kernels.py, imported as aotc imports a recipe's files."""
    from aot.source import load_module

    return load_module(SHIPPED / "kernels.py")


@pytest.mark.parametrize("n", [1, 1000, 4096, 70000])
@pytest.mark.parametrize("scale", [None, 0.0, 2.5, -1.0])
def test_an_optional_scalar_runs_as_the_jit_runs_it(shipped: Any, n: int, scale: Any) -> None:
    import torch
    import triton

    x = torch.randn(n, device="cuda", dtype=torch.float32)
    want = x.clone() if scale is None else x * scale
    ours = torch.full_like(x, float("nan"))
    jit = torch.full_like(x, float("nan"))
    variant = shipped["scaled"].variant_for(x, ours, scale, n)
    assert variant.meta["HAS_SCALE"] is (scale is not None)
    shipped["scaled"](x, ours, scale, n)
    _kernels().scaled_kernel[(triton.cdiv(n, 1024),)](x, jit, scale, n, BLOCK=1024)
    torch.cuda.synchronize()
    assert torch.equal(ours, want) and torch.equal(jit, want)
