"""recipes/decode.toml on an H100/H200 (issue 20): the paged-attention decode kernel from
a bundle against a float64 reference, fp16 and bf16, at buckets and between them, with
ragged contexts (1 to the table's width) over shuffled cache blocks whose unowned slots
hold NaN; the MoE gate/up GEMM; and the whole decode step (pipeline decode_step) against
recipes/decode/step.py's float64 reference, contexts of 1 to 32k tokens over random
blocks, with the KV cache written at the tokens' slots and nowhere else.
AOTC_TEST_DECODE_BUNDLE names a bundle tuned on this GPU; without it one is built here
with the heuristic's picks."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from tests.modules import load_module

pytestmark = pytest.mark.gpu

ROOT = Path(__file__).resolve().parents[2]
RECIPE = ROOT / "recipes" / "decode.toml"


@pytest.fixture(scope="module")
def decode(given_or_built: Callable[..., Path]) -> Any:
    import torch

    import loader

    path = given_or_built(RECIPE, "AOTC_TEST_DECODE_BUNDLE")
    torch.cuda.init()  # type: ignore[no-untyped-call]
    calls = load_module(ROOT / "recipes/decode/calls.py", "decode_calls")
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


@pytest.mark.parametrize("dtype", ["fp16", "bf16"])
@pytest.mark.parametrize(("seqs", "width"), [(1, 64), (1, 2048), (3, 256), (8, 2048), (13, 2048)])
def test_split_kv_pair_matches_float64(decode: Any, dtype: str, seqs: int, width: int) -> None:
    """paged_decode_split then paged_decode_reduce from the bundle, ragged contexts (1 to
    the table's width: some ranges neutral), against the float64 attention."""
    import torch

    bundle, calls = decode
    args = calls.paged_decode_inputs({"num_seqs": seqs, "max_blocks_per_seq": width},
                                     {"T": dtype}, ragged=True)  # fmt: skip
    q, k, v, table, ctx, out, scale = args[:7]
    expected = calls.paged_decode_reference(*args)["out_ptr"]
    rows = (seqs, calls.NUM_Q_HEADS, calls.NUM_SPLITS)
    scratch = [torch.full((*rows, calls.HEAD_DIM), float("nan"), device="cuda"),
               torch.full(rows, float("nan"), device="cuda"),
               torch.full(rows, float("nan"), device="cuda")]  # fmt: skip
    strides = [q.stride(0), q.stride(1), *k.stride()[:3], *v.stride()[:3], table.stride(0)]
    bundle["paged_decode_split"](q, k, v, table, ctx, *scratch, scale, seqs, width, *strides)
    out.fill_(float("nan"))
    bundle["paged_decode_reduce"](*scratch, out, seqs, out.stride(0), out.stride(1))
    torch.cuda.synchronize()
    assert torch.isfinite(out).all()
    err = float(torch.linalg.norm(out.double() - expected) / torch.linalg.norm(expected))
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


@pytest.fixture(scope="module")
def step(decode: Any) -> Any:
    """recipes/decode/step.py, its weights on the GPU, and the bundle's decode_step bound to
    them."""
    module = load_module(ROOT / "recipes/decode/step.py", "decode_step")
    weights = module.make_weights("cuda")
    return module, weights, decode[0].pipeline("decode_step", **weights)


# (tokens, longest context): one sequence at 1 and at 32k tokens, then buckets and sizes
# between them, as many tokens as the cache's 16384 blocks hold
STEP_CASES = [(1, 1), (1, 32768), (2, 32768), (3, 20000), (16, 16000), (100, 4000), (256, 1500),
              (512, 500)]  # fmt: skip


# speculative decoding's verification: (sequences, longest context), 4 tokens each
VERIFY_CASES = [(1, 100), (3, 5000), (32, 2000), (128, 500)]


@pytest.mark.parametrize(
    ("t", "longest", "verify"),
    [(t, n, 0) for t, n in STEP_CASES] + [(s, n, 4) for s, n in VERIFY_CASES],
)
def test_decode_step_matches_float64(step: Any, t: int, longest: int, verify: int) -> None:
    """The output against float64 at every token whose routing is clear at bf16 precision
    (router logits' 2nd and 3rd apart by 0.05 or more: at least 3 in 4 of them, since 16
    tokens of random data can hold two unclear ones; 90% or more at 100 tokens); the new keys
    and values at the tokens' slots, and no other cache entry touched. ``verify``: that
    many tokens per sequence (speculative decoding's check of the drafts), each row
    attending to its sequence's tokens up to itself, those written in the same step
    included."""
    import torch

    module, weights, pipeline = step
    if verify:
        lens = [max(verify, n) for n in module.ragged_lens(t, longest, seed=t)]
        inputs = module.make_verify_inputs(lens, verify, seed=t)
    else:
        inputs = module.make_inputs(module.ragged_lens(t, longest, seed=t), seed=t)
    before = weights["k_cache"].clone(), weights["v_cache"].clone()
    expected, logits, k_new, v_new = module.reference(inputs, weights)
    out = pipeline(*(inputs[k] for k in module.INPUTS))
    torch.cuda.synchronize()
    assert torch.isfinite(out).all()
    top3 = torch.topk(logits, 3, -1).values
    clear = top3[:, 1] - top3[:, 2] >= 0.05
    assert float(clear.double().mean()) >= (0.75 if t < 100 else 0.9), clear
    diff = out.double()[clear] - expected[clear]
    err = float(torch.linalg.norm(diff) / torch.linalg.norm(expected[clear]))
    assert err < 2e-2, err
    block = (inputs["slots"] // 16).long()
    within = (inputs["slots"] % 16).long()
    for cache, new, old in zip(("k_cache", "v_cache"), (k_new, v_new), before, strict=True):
        got = weights[cache][block, :, within].double()
        assert float((got - new).abs().max() / new.abs().max()) < 2e-2, cache
        changed = (weights[cache] != old).any(dim=3).any(dim=1)  # [blocks, 16]
        mine = torch.zeros_like(changed)
        mine[block, within] = True
        assert not bool((changed & ~mine).any()), f"{cache} written outside the slots"


def test_eager_step_the_benchmarks_compare_against_is_right(step: Any) -> None:
    import torch

    module, weights, _ = step
    lens = module.ragged_lens(8, 3000, seed=8)
    inputs = module.make_inputs(lens, seed=8)
    expected = module.reference(inputs, weights)[0]
    blocks = max(-(-n // 16) for n in lens)
    out = module.eager_step(*(inputs[k] for k in module.INPUTS), weights, blocks)
    err = float(torch.linalg.norm(out.double() - expected) / torch.linalg.norm(expected))
    assert err < 2e-2, err
