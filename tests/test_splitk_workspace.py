"""The split-K matmul's workspace is checked at every call (issue 21): the caller owns the
fp32 partials and the int32 locks, sized from the config the loader will launch, and a
buffer too small for the variant a call would run is refused before anything launches,
naming the values and what the bundle holds, never written past its end. The recipe
states it as call values (``shape(ws_ptr, 0)``) and constraints that read them, as
recipes/hopper.toml does; tests/gpu/test_hopper_gpu.py runs the same on an H200.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

import loader
from aot.build import build
from loader.errors import ArgumentError
from tests.conftest import env_for
from tests.fakecuda import FakeLib
from tests.test_descriptors import HOPPER, Tensor

# The hopper recipe's split-K kernel (recipes/hopper.toml) with one config: SPLIT_K = 4.
RECIPE = """
format = 1
[bundle]
name = "splitk"
version = "0.1.0"
targets = ["sm_90"]

[[kernel]]
name = "splitk"
source = "hopper/splitk_matmul.py:matmul_tma_splitk"
grid = "cdiv(M, BLOCK_M) * cdiv(N, BLOCK_N) * SPLIT_K"
dtypes = { T = ["fp16"] }
buckets = { M = [64, 4096] }
sizes = { N = 4096, K = 4096, ws_len = "cdiv(M, BLOCK_M) * cdiv(N, BLOCK_N) * SPLIT_K * BLOCK_M * BLOCK_N", n_locks = "cdiv(M, BLOCK_M) * cdiv(N, BLOCK_N)" }
call = { ws_len = "shape(ws_ptr, 0)", n_locks = "shape(locks_ptr, 0)" }
fixed = { GROUP_M = 8, BLOCK_M = 64, BLOCK_N = 128, BLOCK_K = 64, SPLIT_K = 4 }
signature = { a_desc = "*T", b_desc = "*T", c_desc = "*T", ws_ptr = "*fp32", locks_ptr = "*i32", M = "i32", N = "i32", K = "i32" }
descriptors = { a_desc = ["BLOCK_M", "BLOCK_K"], b_desc = ["BLOCK_K", "BLOCK_N"], c_desc = ["BLOCK_M", "BLOCK_N"] }
specializations = []
constraints = [
  "SPLIT_K == 1 or ws_len >= cdiv(M, BLOCK_M) * cdiv(N, BLOCK_N) * SPLIT_K * BLOCK_M * BLOCK_N",
  "SPLIT_K == 1 or n_locks >= cdiv(M, BLOCK_M) * cdiv(N, BLOCK_N)",
]
[kernel.space]
num_warps = [4]
num_stages = [3]
"""  # noqa: E501


@pytest.fixture(scope="module")
def bundle(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("splitk")
    shutil.copytree(HOPPER, root / "hopper")
    (root / "splitk.toml").write_text(RECIPE)
    out = root / "splitk.aotc"
    build(root / "splitk.toml", out, env_for(root / "cache"), root)
    return out


def _args(m: int, ws: int, locks: int) -> list[object]:
    a, b, c = (
        Tensor(0x100000, (m, 4096)),
        Tensor(0x200000, (4096, 4096)),
        Tensor(0x300000, (m, 4096)),
    )
    return [a, b, c, Tensor(0x400000, (ws,), dtype="torch.float32"),
            Tensor(0x500000, (locks,), dtype="torch.int32"), m, 4096, 4096]  # fmt: skip


def _needs(m: int) -> tuple[int, int]:
    """The workspace elements and locks a call at M = m needs (BLOCK 64 x 128, SPLIT_K 4)."""
    tiles = -(-m // 64) * (4096 // 128)
    return tiles * 4 * 64 * 128, tiles


def test_a_workspace_that_fits_launches(fake: FakeLib, bundle: Path) -> None:
    kernel = loader.open(bundle)["splitk"]
    assert kernel.launch_config(M=100)["SPLIT_K"] == 4
    kernel(*_args(100, *_needs(100)))
    kernel(*_args(100, _needs(100)[0] + 7, 999))  # larger is fine
    assert [launch.grid for launch in fake.launches] == [(2 * 32 * 4, 1, 1)] * 2


@pytest.mark.parametrize("fast", [False, True])
@pytest.mark.parametrize(("short", "named"), [("ws", "ws_len"), ("locks", "n_locks")])
def test_a_workspace_too_small_for_the_call_is_refused(
    fake: FakeLib, bundle: Path, fast: bool, short: str, named: str
) -> None:
    kernel = loader.open(bundle)["splitk"]
    if fast:  # a good call first: the fast path then knows the arguments' signature
        kernel(*_args(100, *_needs(100)))
    ws, locks = _needs(100)
    small = (ws - 1, locks) if short == "ws" else (ws, locks - 1)
    launched = len(fake.launches)
    with pytest.raises(ArgumentError) as err:
        kernel(*_args(100, *small))
    text = str(err.value)
    assert f"{named} >= cdiv(M, BLOCK_M)" in text and f"{named}={small[short == 'locks']}" in text
    assert "M=100" in text and "their BLOCK_M, BLOCK_N, SPLIT_K: (64, 128, 4)" in text
    arg = "ws_ptr" if short == "ws" else "locks_ptr"
    assert f"Pass values that meet it ({named} = shape({arg}, 0))" in text
    assert ("n_locks >=" in text) == (short == "locks")  # only the constraint it breaks
    assert len(fake.launches) == launched
    # A workspace sized for a smaller M is too small at a larger one in the same bucket.
    with pytest.raises(ArgumentError, match=named):
        kernel(*_args(200, *_needs(100)))
