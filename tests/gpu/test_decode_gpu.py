"""recipes/decode.toml on an H100/H200 (issue 20): the paged-attention decode kernel from
a bundle against a float64 reference, fp16 and bf16, at buckets and between them, with
ragged contexts (1 to the table's width) over shuffled cache blocks whose unowned slots
hold NaN. AOTC_TEST_DECODE_BUNDLE names a bundle tuned on this GPU; without it one is
built here with the heuristic's picks."""

from __future__ import annotations

import importlib.util
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

pytestmark = pytest.mark.gpu

ROOT = Path(__file__).resolve().parents[2]
RECIPE = ROOT / "recipes" / "decode.toml"


@pytest.fixture(scope="module")
def decode(given_or_built: Callable[..., Path]) -> Any:
    import torch

    import loader

    path = given_or_built(RECIPE, "AOTC_TEST_DECODE_BUNDLE")
    torch.cuda.init()  # type: ignore[no-untyped-call]
    spec = importlib.util.spec_from_file_location("decode_calls", ROOT / "recipes/decode/calls.py")
    assert spec is not None and spec.loader is not None
    calls = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(calls)
    return loader.open(path), calls


@pytest.mark.parametrize("dtype", ["fp16", "bf16"])
@pytest.mark.parametrize(("seqs", "width"), [(1, 64), (3, 64), (16, 256), (33, 200), (128, 2048)])
def test_paged_decode_matches_float64(decode: Any, dtype: str, seqs: int, width: int) -> None:
    import torch

    bundle, calls = decode
    args = calls.paged_decode_inputs({"num_seqs": seqs, "max_blocks_per_seq": width},
                                     {"T": dtype}, ragged=True)  # fmt: skip
    expected = calls.paged_decode_reference(*args)["out_ptr"]
    args[5].fill_(float("nan"))
    bundle["paged_decode"](*args)
    torch.cuda.synchronize()
    out = args[5].double()
    assert torch.isfinite(out).all()
    err = float(torch.linalg.norm(out - expected) / torch.linalg.norm(expected))
    assert err < 1e-2, err


@pytest.mark.parametrize("dtype", ["bf16", "fp16"])
@pytest.mark.parametrize("pairs", [2, 16, 100, 1024])
def test_moe_up_matches_float64(decode: Any, dtype: str, pairs: int) -> None:
    """The grouped gate/up GEMM over pairs aligned with the block size the bundle launches
    (launch_config), padded rows included: every routed pair's row is right."""
    import torch

    bundle, calls = decode
    kernel = bundle["moe_up"]
    cfg = kernel.launch_config(dtypes={"T": dtype}, num_pairs=pairs)
    args = calls.moe_up_inputs({"num_pairs": pairs}, {"T": dtype}, config=cfg)
    expected = calls.moe_up_reference(*args)["c_ptr"]
    args[2].fill_(float("nan"))
    kernel(*args, BLOCK_M=cfg["BLOCK_M"])
    torch.cuda.synchronize()
    out = args[2].double()
    assert torch.isfinite(out).all()
    err = float(torch.linalg.norm(out - expected) / torch.linalg.norm(expected))
    assert err < 1e-2, err
