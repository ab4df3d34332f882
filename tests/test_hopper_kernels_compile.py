"""The Hopper kernels (recipes/hopper/) on the CPU.

Compiled for sm_90 by Triton 3.6, they must show what a launcher needs to know: one TMA map
(``tensordesc_meta`` entry) per host descriptor, passed by value as a 128-byte, 64-aligned
parameter; global scratch for the kernel that builds its descriptors itself; and, where the
warp-specialising pass takes a loop, a kernel that runs more warps than asked for. Run by
Triton's interpreter in fp16 (its ``tl.dot`` mishandles bf16), they must match the float32
references, ragged edges and persistent loops included. The GPU check with both dtypes and
real sizes is benchmarks/hopper_jit_check.py.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Iterator
from functools import partial
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

from tests.interpreted import child as interpreted_child
from tests.interpreted import run as interpreted_run
from tests.modules import load_module

triton = pytest.importorskip("triton", reason="the Hopper kernels need triton")

ROOT = Path(__file__).resolve().parents[1]
HOPPER = ROOT / "recipes" / "hopper"
PTXAS = Path(triton.__file__).parent / "backends" / "nvidia" / "bin" / "ptxas"
needs_ptxas = pytest.mark.skipif(not PTXAS.exists(), reason="Triton's ptxas is not installed")


def _load(name: str, as_name: str) -> ModuleType:
    return load_module(HOPPER / f"{name}.py", as_name)


# -- compiled for sm_90 ------------------------------------------------------------------


def _compile(
    fn: Any,
    signature: dict[str, str],
    constexprs: dict[str, Any],
    warps: int,
    stages: int,
    extra: dict[str, Any] | None = None,
) -> Any:
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource

    sig = {**signature, **dict.fromkeys(constexprs, "constexpr")}
    src = ASTSource(fn=fn, signature=sig, constexprs=constexprs)
    options = {"num_warps": warps, "num_stages": stages}
    options.update(extra or {})
    return triton.compile(src, target=GPUTarget("cuda", 90, 32), options=options)


def _params(compiled: Any) -> list[str]:
    """The PTX entry's parameters, e.g. '.param .align 64 .b8 NAME_param_0[128]'."""
    return re.findall(r"^\s*(\.param [^,\n)]*)", compiled.asm["ptx"], flags=re.M)


def _warp_specialized(compiled: Any) -> bool:
    return "ttg.warp_specialize" in compiled.asm["ttgir"]


def _matmul_consts(bm: int, bn: int, bk: int, ws: bool, split: int = 1) -> dict[str, Any]:
    return {"BLOCK_M": bm, "BLOCK_N": bn, "BLOCK_K": bk, "GROUP_M": 8, "WARP_SPECIALIZE": ws,
            "EPILOGUE_SPLIT": split}  # fmt: skip


def _host_matmul_sig(dt: str, bm: int, bn: int, bk: int, split: int = 1) -> dict[str, str]:
    return {
        "a_desc": f"tensordesc<{dt}[{bm}, {bk}]>",
        "b_desc": f"tensordesc<{dt}[{bk}, {bn}]>",
        "c_desc": f"tensordesc<{dt}[{bm}, {bn // split}]>",
        "M": "i32",
        "N": "i32",
        "K": "i32",
    }


def _attention_sig(dt: str, bm: int, bn: int, d: int) -> dict[str, str]:
    blocks = {"q_desc": bm, "k_desc": bn, "v_desc": bn, "o_desc": bm}
    sig = {name: f"tensordesc<{dt}[{rows}, {d}]>" for name, rows in blocks.items()}
    return {**sig, "sm_scale": "fp32", "Z": "i32", "H": "i32", "N_CTX": "i32"}


@pytest.fixture(scope="module")
def compiled_mods(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, ModuleType]]:
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("TRITON_CACHE_DIR", str(tmp_path_factory.mktemp("triton-cache")))
        yield {
            "mm": _load("tma_matmul", "hopper_tma_matmul_compiled"),
            "attn": _load("attention", "hopper_attention_compiled"),
        }


def _assert_host_descriptors(compiled: Any, count: int) -> None:
    md = compiled.metadata
    assert len(md.tensordesc_meta) == count
    for meta in md.tensordesc_meta:
        assert meta is not None and meta["elem_size"] == 2 and len(meta["block_size"]) == 2
    assert md.global_scratch_size == 0
    # each descriptor: the CUtensorMap by value, then its shape (u32 each), strides (u64 each)
    maps = [p for p in _params(compiled) if p.startswith(".param .align 64 .b8") and "[128]" in p]
    assert len(maps) == count


@needs_ptxas
@pytest.mark.parametrize(
    ("dt", "bm", "bn", "bk", "warps", "stages", "ws"),
    [("fp16", 128, 128, 64, 8, 4, False), ("bf16", 64, 128, 64, 4, 4, True)],
)
def test_host_descriptor_matmul_has_one_tma_map_per_descriptor(
    compiled_mods: dict[str, ModuleType],
    dt: str,
    bm: int,
    bn: int,
    bk: int,
    warps: int,
    stages: int,
    ws: bool,
) -> None:
    fn = compiled_mods["mm"].matmul_tma_persistent
    c = _compile(
        fn, _host_matmul_sig(dt, bm, bn, bk), _matmul_consts(bm, bn, bk, ws), warps, stages
    )
    _assert_host_descriptors(c, 3)
    assert _warp_specialized(c) == ws
    # warp-specialised, the kernel runs a producer warp group besides two consumer ones
    assert c.metadata.num_warps == (12 if ws else warps)


@needs_ptxas
def test_split_epilogue_fits_four_stages_of_wide_tiles(
    compiled_mods: dict[str, ModuleType],
) -> None:
    # 128x256x64 tiles: four stages take 192 KB; a whole-tile epilogue (64 KB) would not fit
    # beside them in 227 KB, two halves of 32 KB do (each stored through C's [128, 128] map)
    fn = compiled_mods["mm"].matmul_tma_persistent
    sig = _host_matmul_sig("fp16", 128, 256, 64, split=2)
    c = _compile(fn, sig, _matmul_consts(128, 256, 64, False, split=2), 8, 4)
    _assert_host_descriptors(c, 3)
    assert c.metadata.shared <= 227 * 1024
    whole = _compile(
        fn, _host_matmul_sig("fp16", 128, 256, 64), _matmul_consts(128, 256, 64, False), 8, 3
    )
    # twice the TMA stores of the whole-tile epilogue (wherever the pipeliner copies them)
    stores = "cp.async.bulk.tensor.2d.global.shared"
    assert c.asm["ptx"].count(stores) == 2 * whole.asm["ptx"].count(stores) > 0


@needs_ptxas
def test_warp_specialize_on_128_row_host_tiles_is_a_no_op(
    compiled_mods: dict[str, ModuleType],
) -> None:
    # Triton 3.6 cannot split the C store of a 128-row tile between consumer warp groups
    # when C is a host descriptor (its pass fails); the kernel leaves the option unused.
    fn = compiled_mods["mm"].matmul_tma_persistent
    c = _compile(
        fn, _host_matmul_sig("fp16", 128, 128, 64), _matmul_consts(128, 128, 64, True), 4, 3
    )
    _assert_host_descriptors(c, 3)
    assert not _warp_specialized(c) and c.metadata.num_warps == 4


@needs_ptxas
@pytest.mark.parametrize(("bm", "warps", "ws"), [(128, 8, False), (128, 4, True)])
def test_device_descriptor_matmul_needs_global_scratch(
    compiled_mods: dict[str, ModuleType], bm: int, warps: int, ws: bool
) -> None:
    fn = compiled_mods["mm"].matmul_tma_device
    sig = {
        "a_ptr": "*fp16",
        "b_ptr": "*fp16",
        "c_ptr": "*fp16",
        "M": "i32",
        "N": "i32",
        "K": "i32",
        "stride_am": "i32",
        "stride_bk": "i32",
        "stride_cm": "i32",
    }
    c = _compile(fn, sig, _matmul_consts(bm, 128, 64, ws), warps, 3)
    md = c.metadata
    assert not md.tensordesc_meta
    # 128 bytes per descriptor the program builds (three, and one more per extra consumer)
    assert md.global_scratch_size > 0 and md.global_scratch_size % 128 == 0
    assert md.global_scratch_align >= 64
    assert _warp_specialized(c) == ws
    assert md.num_warps == (12 if ws else warps)
    # 9 kernel parameters, then the global and profile scratch pointers Triton appends
    assert len(_params(c)) == 9 + 2


@needs_ptxas
@pytest.mark.parametrize(("d", "causal"), [(64, True), (128, False)])
@pytest.mark.parametrize(
    ("bm", "bn", "warps", "stages", "ws"), [(128, 64, 8, 3, False), (64, 64, 4, 3, True)]
)
def test_attention_has_one_tma_map_per_descriptor(
    compiled_mods: dict[str, ModuleType],
    d: int,
    causal: bool,
    bm: int,
    bn: int,
    warps: int,
    stages: int,
    ws: bool,
) -> None:
    consts = {"HEAD_DIM": d, "BLOCK_M": bm, "BLOCK_N": bn, "CAUSAL": causal, "WARP_SPECIALIZE": ws}
    c = _compile(
        compiled_mods["attn"].attn_fwd, _attention_sig("fp16", bm, bn, d), consts, warps, stages
    )
    _assert_host_descriptors(c, 4)
    assert _warp_specialized(c) == ws
    assert c.metadata.num_warps == (12 if ws else warps)


@needs_ptxas
def test_register_cap_fits_two_attention_ctas_of_eight_warps(
    compiled_mods: dict[str, ModuleType],
) -> None:
    # recipes/hopper.toml's attention_d64 searches maxnreg = 128 at 8 warps: 128x128 tiles
    # at head dim 64 then take at most 128 registers a thread, so two CTAs of 256 threads
    # fit the SM's 65536, without spilling; uncapped they take more and one CTA fits.
    from aot.cubin import inspect

    consts = {"HEAD_DIM": 64, "BLOCK_M": 128, "BLOCK_N": 128, "CAUSAL": False,
              "WARP_SPECIALIZE": False}  # fmt: skip
    sig = _attention_sig("fp16", 128, 128, 64)
    fn = compiled_mods["attn"].attn_fwd
    capped = inspect(_compile(fn, sig, consts, 8, 3, {"maxnreg": 128}).asm["cubin"])
    free = inspect(_compile(fn, sig, consts, 8, 3).asm["cubin"])
    (regs,) = capped.regs.values()
    assert regs <= 128 and 2 * 256 * regs <= 65536
    assert set(capped.frames.values()) <= {0}
    assert 2 * 256 * max(free.regs.values()) > 65536


# -- run by the interpreter -------------------------------------------------------------
# In one subprocess: Triton reads TRITON_INTERPRET when @triton.jit decorates, and its own
# library (tl.cdiv, ...) is decorated when Triton is imported.

RESULTS_MARK = "HOPPER-INTERPRETED "
Case = Callable[[dict[str, ModuleType]], float]
CASES: dict[str, Case] = {}


def _matmul_case(
    mods: dict[str, ModuleType], kind: str, M: int, N: int, K: int, ws: bool, dtype: str
) -> float:
    import torch

    mm, ref = mods["mm"], mods["ref"]
    a, b = ref.matmul_inputs(M, N, K, dtype, device="cpu")
    c = torch.full((M, N), float("nan"), dtype=a.dtype)
    bm = bn = bk = 32
    # three programs for up to 28 tiles: each walks several, across groups of GROUP_M rows
    grid = ref.matmul_grid(M, N, bm, bn, 3)
    meta = {**_matmul_consts(bm, bn, bk, ws), "GROUP_M": 2}
    if kind == "host":
        mm.matmul_tma_persistent[grid](
            *ref.matmul_descriptors(a, b, c, bm, bn, bk), M, N, K, **meta
        )
    else:
        mm.matmul_tma_device[grid](a, b, c, M, N, K, a.stride(0), b.stride(0), c.stride(0), **meta)
    return _relative_error(c, ref.matmul_reference(a, b))


def _attention_case(
    mods: dict[str, ModuleType], causal: bool, bm: int, bn: int, ws: bool, dtype: str
) -> float:
    import torch

    attn, ref = mods["attn"], mods["ref"]
    Z, H, n, d = 2, 3, 64, 16
    q, k, v = ref.attention_inputs(Z, H, n, d, dtype, device="cpu")
    o = torch.full_like(q, float("nan"))
    sm_scale = 1.0 / math.sqrt(d)
    attn.attn_fwd[ref.attention_grid(Z, H, n, bm)](
        *ref.attention_descriptors(q, k, v, o, bm, bn),
        sm_scale,
        Z,
        H,
        n,
        HEAD_DIM=d,
        BLOCK_M=bm,
        BLOCK_N=bn,
        CAUSAL=causal,
        WARP_SPECIALIZE=ws,
    )
    return _relative_error(o, ref.attention_reference(q, k, v, causal, sm_scale))


def _relative_error(out: Any, expected: Any) -> float:
    """Largest error relative to the largest expected magnitude (NaN if any is left)."""
    return float((out.float() - expected).abs().max() / expected.abs().max())


for _dtype in ("fp16", "bf16"):
    for _ws in (False, True):
        for _kind in ("host", "device"):
            for _M, _N, _K in ((77, 200, 120), (1, 64, 32), (96, 32, 48)):
                CASES[f"matmul-{_kind}-{_M}x{_N}x{_K}-ws{int(_ws)}-{_dtype}"] = partial(
                    _matmul_case, kind=_kind, M=_M, N=_N, K=_K, ws=_ws, dtype=_dtype
                )
        for _causal in (False, True):
            for _bm, _bn in ((32, 16), (16, 16), (32, 32)):
                CASES[f"attention-{_bm}x{_bn}-causal{int(_causal)}-ws{int(_ws)}-{_dtype}"] = (
                    partial(_attention_case, causal=_causal, bm=_bm, bn=_bn, ws=_ws, dtype=_dtype)
                )


def _modules() -> dict[str, Any]:
    return {
        "mm": _load("tma_matmul", "hopper_tma_matmul"),
        "attn": _load("attention", "hopper_attention"),
        "ref": _load("reference", "hopper_reference"),
    }


def _child() -> None:
    """In the interpreted subprocess: run every case, print {id: relative error or text}."""
    interpreted_child(CASES, _modules, RESULTS_MARK)


@pytest.fixture(scope="module")
def interpreted() -> dict[str, float | str]:
    pytest.importorskip("torch", reason="the interpreted checks need torch")
    results: dict[str, float | str] = interpreted_run(__file__, RESULTS_MARK, ROOT)
    return results


@pytest.mark.parametrize("case_id", list(CASES))
def test_interpreted_matches_reference(interpreted: dict[str, float | str], case_id: str) -> None:
    result = interpreted[case_id]
    if isinstance(result, str):
        pytest.fail(f"{case_id} under TRITON_INTERPRET=1:\n{result}", pytrace=False)
    # a few roundings to the output dtype (bf16: 2**-8, fp16: 2**-11) of P and of the output
    assert result < (2e-2 if case_id.endswith("bf16") else 3e-3), (case_id, result)


if __name__ == "__main__":
    _child()
