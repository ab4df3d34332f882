"""recipes/decode.toml on the CPU (issue 20): the paged-attention decode kernel builds for
sm_90 without a GPU, and the loader launches it over the grid (sequences, KV heads), the KV
heads read off the cache's shape, picking the bucket by the number of sequences and the
block table's width. tests/gpu/test_decode_gpu.py checks its results on an H200."""

from __future__ import annotations

import ctypes
import shutil
import struct
from pathlib import Path
from typing import Any

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


# -- the decode-step pipeline ---------------------------------------------------------------


class _Rows:
    """An input in host memory (the fake driver's device memory), rows of ``width`` int32
    or bf16 words."""

    def __init__(self, rows: int, width: int, dtype: str, values: list[int]):
        self.shape = (rows, width) if width else (rows,)
        self.dtype, self.is_cuda = dtype, True
        n = rows * max(width, 1)
        self.buf = ctypes.create_string_buffer(struct.pack(f"<{n}i" if "int" in dtype else
                                                           f"<{n}H", *values) or b"\0")  # fmt: skip

    def data_ptr(self) -> int:
        return ctypes.addressof(self.buf)

    def is_contiguous(self) -> bool:
        return True


def _inputs(t: int) -> list[_Rows]:
    bf16, i32 = "torch.bfloat16", "torch.int32"
    return [
        _Rows(t, 4096, bf16, [0x3F80] * (t * 4096)),  # x: ones
        _Rows(t, 0, i32, list(range(7, 7 + t))),  # positions
        _Rows(t, 0, i32, [100 + i for i in range(t)]),  # cache slots
        _Rows(t, 2048, i32, [i % 50 for i in range(t * 2048)]),  # block tables
        _Rows(t, 0, i32, [10 + i for i in range(t)]),  # context lengths
    ]


def _words(launch: Any, name: str, kernel: Any) -> int:
    """A launch's value of ``name`` (a kernel parameter), as the fake driver recorded it."""
    return int(launch.params[[p.name for p in kernel.params].index(name)])


@pytest.mark.parametrize("t", [1, 3, 4, 5, 16, 17, 300])
def test_decode_step_pads_rows_so_that_padding_neither_writes_nor_reads_the_cache(
    fake: FakeLib, bundle: Path, t: int
) -> None:
    """A call of t tokens runs the bucket above: the step's kernels launch over the
    bucket's rows, whose slots past t are -1 (no cache write) and context lengths 0
    (nothing read); attention is split-KV up to 16 tokens (32 ranges per KV head, then the
    reduce over the 32 query heads), one program per sequence and KV head above; the KV
    heads come from the cache's shape, the MoE GEMMs' M-blocks from the pairs aligned to
    64 rows and the BLOCK_M each was built with."""
    b = loader.open(bundle)
    names = ("w_norm", "w_qkv", "w_o", "w_norm2", "w_router", "w_up", "w_down", "k_cache",
             "v_cache")  # fmt: skip
    step = b.pipeline("decode_step", **{n: 0x1000 * (i + 1) for i, n in enumerate(names)})
    ins = _inputs(t)
    out = _Rows(t, 4096, "torch.bfloat16", [0] * (t * 4096))
    step(*ins, out)
    bucket = next(x for x in (1, 2, 4, 8, 16, 32, 64, 128, 256, 512) if x >= t)
    launched = [fake.functions.get(launch.function, "") for launch in fake.launches]
    split = bucket <= 16
    attend = ["paged_decode_split", "paged_decode_reduce"] if split else ["paged_decode"]
    attention = ["rmsnorm", "matmul", "rotary_cache", *attend, "matmul_residual"]
    moe = ["rmsnorm", "matmul", "topk_softmax", "moe_align", "moe_gemm", "moe_gemm", "moe_combine"]
    assert [n.split("_kernel")[0] for n in launched] == attention + moe
    rotary, paged = fake.launches[2], fake.launches[3]
    assert rotary.grid == (bucket, 48, 1)
    assert paged.grid == ((bucket, 8, 32) if split else (bucket, 8, 1))
    if split:
        assert fake.launches[4].grid == (bucket, 32, 1)
    tail = fake.launches[len(attention) :]
    for name, launch in zip(("moe_up_step", "moe_down_step"), tail[4:6], strict=True):
        cfg = b[name].launch_config(num_pairs=2 * bucket)
        n = 14336 if name == "moe_up_step" else 4096
        assert launch.grid == ((2 * bucket + 504) // cfg["BLOCK_M"], -(-n // cfg["BLOCK_N"]), 1)
    assert tail[6].grid[0] == bucket and tail[3].grid == (1, 1, 1)
    # The graph's own buffers (exact calls are bound to the caller's tensors instead).
    slots_at = _words(rotary, "slots_ptr", b["rotary_cache"]) & 0xFFFFFFFFFFFFFFFF
    kernel = b["paged_decode_split" if split else "paged_decode"]
    lens_at = _words(paged, "context_lens_ptr", kernel) & 0xFFFFFFFFFFFFFFFF
    if t == bucket:
        assert (slots_at, lens_at) == (ins[2].data_ptr(), ins[4].data_ptr())
        return
    slots = struct.unpack(f"<{bucket}i", ctypes.string_at(slots_at, 4 * bucket))
    lens = struct.unpack(f"<{bucket}i", ctypes.string_at(lens_at, 4 * bucket))
    assert list(slots) == [100 + i for i in range(t)] + [-1] * (bucket - t)
    assert list(lens) == [10 + i for i in range(t)] + [0] * (bucket - t)
    # A smaller call into the same bucket: its rows replace the larger call's, pads again.
    fewer = bucket // 2 + 1
    if fewer < t:
        step(*_inputs(fewer), _Rows(fewer, 4096, "torch.bfloat16", [0] * (fewer * 4096)))
        slots = struct.unpack(f"<{bucket}i", ctypes.string_at(slots_at, 4 * bucket))
        assert list(slots) == [100 + i for i in range(fewer)] + [-1] * (bucket - fewer)


def test_inspect_shows_the_steps_conditions_and_the_inputs_pad_values(bundle: Path) -> None:
    from aot.inspect import inspect

    text = inspect(bundle)
    assert "slots[T] i32 pad -1" in text and "context_lens[T] i32 pad 0" in text
    lines = [line for line in text.splitlines() if "when T" in line]
    assert [line.split("(")[0].strip() for line in lines] == [
        "3. paged_decode_split", "4. paged_decode_reduce", "5. paged_decode",
    ]  # fmt: skip


def test_plan_notes_a_stride_no_variant_assumes_divisible_by_16(tmp_path: Path) -> None:
    """The decode recipe once left its cache's token strides out of the %16 specialization,
    and its paged decode ran 2.5-4x slower on the H200 than through Triton's JIT (unaligned
    rows: no vectorised loads). `aotc plan` now names such strides; the recipe has none."""
    from click.testing import CliRunner

    from aot.cli.commands import cli

    def plan(recipe: Path) -> str:
        env = {"AOTC_CACHE_DIR": str(tmp_path / "c"), "AOTC_NO_PROGRESS": "1"}
        r = CliRunner().invoke(cli, ["plan", str(recipe)], env=env, prog_name="aotc")
        assert r.exit_code == 0, r.output
        return r.stdout

    assert "note: no variant assumes" not in plan(RECIPE)
    text = RECIPE.read_text()
    old = 'specializations = [{ "*" = 16, num_seqs = 0, max_blocks_per_seq = 0 }]'
    assert text.count(old) == 2
    for folder in ("decode", "kernels"):  # the recipe's sources, beside the copy
        shutil.copytree(RECIPE.parent / folder, tmp_path / folder)
    unaligned = tmp_path / "decode.toml"
    unaligned.write_text(text.replace(old, old[:-3] + ", stride_kc_tok = 0, stride_vc_tok = 0 }]"))
    notes = [line for line in plan(unaligned).splitlines() if "note: no variant" in line]
    assert len(notes) == 2  # paged_decode and paged_decode_split
    assert all("stride_kc_tok, stride_vc_tok divisible by 16" in n for n in notes)
