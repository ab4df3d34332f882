"""recipes/decode/paged_attention_fused.py on an H100/H200 through Triton's JIT (it is not
in decode.toml yet): the one-launch split-KV decode against the float64 attention, fp16 and
bf16, ragged contexts (1 to the table's width: some ranges empty) over shuffled blocks whose
unowned slots hold NaN, three calls on one scratch and one set of locks, which every call
must leave zero. benchmarks/probe_split_kv.py times it against the two-launch pair."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

pytestmark = pytest.mark.gpu

DECODE = Path(__file__).resolve().parents[2] / "recipes" / "decode"


def _module(name: str) -> Any:
    from aot.source import load_module

    return load_module(DECODE / f"{name}.py")


@pytest.mark.parametrize("dtype", ["fp16", "bf16"])
@pytest.mark.parametrize(("seqs", "width"), [(1, 64), (1, 2048), (3, 256), (8, 2048), (16, 256)])
@pytest.mark.parametrize("min_split", [128, 512])
def test_fused_split_kv_matches_float64(dtype: str, seqs: int, width: int, min_split: int) -> None:
    import torch

    calls, pa, fused = (
        _module("calls"),
        _module("paged_attention"),
        _module("paged_attention_fused"),
    )
    args = calls.paged_decode_inputs({"num_seqs": seqs, "max_blocks_per_seq": width},
                                     {"T": dtype}, ragged=True)  # fmt: skip
    q, k, v, table, ctx, out, scale = args[:7]
    expected = calls.paged_decode_reference(*args)["out_ptr"]
    scratch = [torch.full_like(t, float("nan")) for t in pa.split_scratch(
        seqs, calls.NUM_Q_HEADS, calls.NUM_SPLITS, calls.HEAD_DIM, q)]  # fmt: skip
    locks = fused.fused_locks(seqs, k.shape[1], q)
    for _ in range(3):
        out.fill_(float("nan"))
        fused.paged_attention_fused(q, k, v, table, ctx, out, scale, scratch, locks,
                                    num_splits=calls.NUM_SPLITS, min_split=min_split)  # fmt: skip
        torch.cuda.synchronize()
        assert torch.isfinite(out).all()
        err = float(torch.linalg.norm(out.double() - expected) / torch.linalg.norm(expected))
        assert err < 1e-2, err
        assert not locks.any()
