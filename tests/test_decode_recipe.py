"""recipes/decode.toml on the CPU (issue 20): the paged-attention decode kernel builds for
sm_90 without a GPU, and the loader launches it over the grid (sequences, KV heads), the KV
heads read off the cache's shape, picking the bucket by the number of sequences and the
block table's width. tests/gpu/test_decode_gpu.py checks its results on an H200."""

from __future__ import annotations

from pathlib import Path

import pytest

import loader
from aot.build import build
from tests.conftest import env_for
from tests.fakecuda import FakeLib

RECIPE = Path(__file__).resolve().parents[1] / "recipes" / "decode.toml"


class _Tensor:
    def __init__(self, addr: int, shape: tuple[int, ...], dtype: str = "torch.float16"):
        self.addr, self.shape, self.dtype, self.is_cuda = addr, shape, dtype, True

    def data_ptr(self) -> int:
        return self.addr


@pytest.fixture(scope="module")
def bundle(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("decode")
    build(RECIPE, root / "decode.aotc", env_for(root / "cache"), root)
    return root / "decode.aotc"


@pytest.mark.parametrize(("seqs", "width"), [(1, 64), (3, 100), (300, 2048)])
def test_paged_decode_launches_over_sequences_and_kv_heads(
    fake: FakeLib, bundle: Path, seqs: int, width: int
) -> None:
    kernel = loader.open(bundle)["paged_decode"]
    blocks = 4096
    q = _Tensor(0x100000, (seqs, 32, 128))
    k = _Tensor(0x200000, (blocks, 8, 16, 128))
    v = _Tensor(0x300000, (blocks, 8, 16, 128))
    table = _Tensor(0x400000, (seqs, width), "torch.int32")
    lens = _Tensor(0x500000, (seqs,), "torch.int32")
    out = _Tensor(0x600000, (seqs, 32, 128))
    kc = (8 * 16 * 128, 16 * 128, 128)
    args = [q, k, v, table, lens, out, 128**-0.5, seqs, width, 32 * 128, 128, *kc, *kc, width,
            32 * 128, 128]  # fmt: skip
    kernel(*args)
    assert fake.launches[-1].grid == (seqs, 8, 1)
    wrong = "'block_table_ptr' has element type fp16, expected i32"
    with pytest.raises(loader.ArgumentError, match=wrong):
        kernel(*[*args[:3], _Tensor(0x400000, (seqs, width)), *args[4:]])


@pytest.mark.parametrize("pairs", [2, 37, 1024])
def test_moe_up_launches_for_the_block_size_the_service_aligned_with(
    fake: FakeLib, bundle: Path, pairs: int
) -> None:
    kernel = loader.open(bundle)["moe_up"]
    cfg = kernel.launch_config(dtypes={"T": "bf16"}, num_pairs=pairs)  # the service asks first
    block_m = cfg["BLOCK_M"]
    capacity = pairs + 8 * (block_m - 1)
    blocks = capacity // block_m
    bf16 = "torch.bfloat16"
    a, w = (
        _Tensor(0x100000, (pairs // 2 or 1, 4096), bf16),
        _Tensor(0x200000, (8, 4096, 28672), bf16),
    )
    c = _Tensor(0x300000, (pairs, 14336), bf16)
    i32 = "torch.int32"
    ids = [_Tensor(0x400000, (capacity,), i32), _Tensor(0x500000, (blocks,), i32),
           _Tensor(0x600000, (1,), i32)]  # fmt: skip
    weights = _Tensor(0x700000, (pairs,), "torch.float32")
    strides = [4096, 4096 * 28672, 28672, 1, 14336]
    kernel(a, w, c, weights, *ids, pairs, 14336, 4096, *strides, BLOCK_M=block_m)
    assert fake.launches[-1].grid == (blocks, -(-14336 // cfg["BLOCK_N"]), 1)
    with pytest.raises(loader.ArgumentError, match="BLOCK_M"):
        kernel(a, w, c, weights, *ids, pairs, 14336, 4096, *strides, BLOCK_M=block_m * 8)
