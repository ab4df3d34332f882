"""recipes/decode/paged_attention_fused.py on the CPU: the one-launch split-KV decode.

Compiled for sm_90 it takes the runtime parameters a launcher passes (plus Triton's two
scratch pointers) and puts its dots on tensor cores. Run by Triton's interpreter (every
range program in turn, so the last to count in is the last range), it must match the
float64 reference at ragged context lengths (empty, 1, block edges, longer than the
ranges cover), with cache slots no sequence owns set to NaN, over two calls on the same
scratch and locks, and leave every lock zero. The GPU has not run it yet.
"""

from __future__ import annotations

import importlib.util
import math
import sys
from functools import partial
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

from tests.interpreted import child as interpreted_child
from tests.interpreted import run as interpreted_run

triton = pytest.importorskip("triton", reason="the decode kernels need triton")

ROOT = Path(__file__).resolve().parents[1]
DECODE = ROOT / "recipes" / "decode"
PTXAS = Path(triton.__file__).parent / "backends" / "nvidia" / "bin" / "ptxas"
MARK = "DECODE-FUSED "


def _load(name: str) -> ModuleType:
    """recipes/decode/NAME.py, with its folder importable (the fused kernel imports
    paged_attention's helpers)."""
    if str(DECODE) not in sys.path:
        sys.path.insert(0, str(DECODE))
    spec = importlib.util.spec_from_file_location(f"decode_fused_{name}", DECODE / f"{name}.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.mark.skipif(not PTXAS.exists(), reason="Triton's ptxas is not installed")
@pytest.mark.parametrize("dt", ["fp16", "bf16"])
def test_compiles_for_sm90(dt: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource

    monkeypatch.setenv("TRITON_CACHE_DIR", str(tmp_path))
    fn = _load("paged_attention_fused").paged_decode_split_fused
    consts = {"HEAD_DIM": 128, "BLOCK_SIZE": 16, "QUERIES_PER_KV": 4, "BLOCK_N": 64,
              "NUM_SPLITS": 32, "MIN_SPLIT": 256}  # fmt: skip
    types = {"block_table_ptr": "*i32", "context_lens_ptr": "*i32", "locks_ptr": "*i32",
             "part_out_ptr": "*fp32", "part_max_ptr": "*fp32", "part_sum_ptr": "*fp32"}  # fmt: skip
    sig = {n: "constexpr" if n in consts else types.get(n, f"*{dt}") if n.endswith("_ptr")
           else "fp32" if n == "sm_scale" else "i32" for n in fn.arg_names}  # fmt: skip
    c = triton.compile(ASTSource(fn=fn, signature=sig, constexprs=consts),
                       target=GPUTarget("cuda", 90, 32), options={"num_warps": 4})  # fmt: skip
    assert c.metadata.num_warps == 4 and c.metadata.global_scratch_size == 0
    ptx = c.asm["ptx"]
    runtime = [n for n in fn.arg_names if n not in consts]
    assert ptx.count(".param .") == len(runtime) + 2
    assert "mma.sync" in ptx or "wgmma" in ptx
    assert "atom.global.gpu.acq_rel.add" in ptx  # the count-in, ordered with the partials
    assert "ld.global.cg" in ptx  # the last range reads the partials past L1


def _case(mods: dict[str, ModuleType], lens: tuple[int, ...], hq: int, hkv: int, d: int,
          bs: int, bn: int, splits: int, dtype: str, min_split: int = 0) -> float:  # fmt: skip
    """Two calls on one scratch and one set of locks: the worst relative error of either
    against float64 (NaN if any output element is left unwritten or reads a NaN slot)."""
    import torch

    fused, pa, ref = mods["fused"], mods["pa"], mods["ref"]
    q, kc, vc, table, cl = ref.paged_inputs(lens, hq, hkv, d, bs, dtype, device="cpu")
    scale = 1.0 / math.sqrt(d)
    scratch = pa.split_scratch(len(lens), hq, splits, d, q)
    for t in scratch:
        t.fill_(float("nan"))
    locks = fused.fused_locks(len(lens), hkv, q)
    expected = ref.paged_reference(q, kc, vc, table, cl, scale)
    worst = 0.0
    for _ in range(2):
        out = torch.full_like(q, float("nan"))
        fused.paged_attention_fused(q, kc, vc, table, cl, out, scale, scratch, locks,
                                    block_n=bn, num_splits=splits, min_split=min_split)  # fmt: skip
        if not bool(torch.isfinite(out).all()):
            return math.nan
        worst = max(worst, float((out.double() - expected).abs().max() / expected.abs().max()))
    assert not bool(locks.any()), locks
    return worst


CASES = {
    f"G{hq // hkv}-splits{splits}-{dtype}": partial(
        _case, lens=(1, 0, 15, 16, 17, 47, 100), hq=hq, hkv=hkv, d=32, bs=16, bn=16,
        splits=splits, dtype=dtype,
    )
    for dtype in ("fp16", "bf16")
    for hq, hkv in ((4, 4), (8, 2))
    for splits in (1, 4)
}  # fmt: skip
# ranges of at least 32 tokens: 100 tokens use 4 of the 8 ranges, 1 and 17 one each
CASES["G4-splits8-min32-fp16"] = partial(
    _case, lens=(100, 1, 17, 0), hq=8, hkv=2, d=32, bs=16, bn=16, splits=8, dtype="fp16",
    min_split=32,
)  # fmt: skip


def _modules() -> dict[str, Any]:
    return {"fused": _load("paged_attention_fused"), "pa": _load("paged_attention"),
            "ref": _load("reference")}  # fmt: skip


@pytest.fixture(scope="module")
def interpreted() -> dict[str, float | str]:
    pytest.importorskip("torch", reason="the interpreted checks need torch")
    results: dict[str, float | str] = interpreted_run(__file__, MARK, ROOT)
    return results


@pytest.mark.parametrize("case_id", list(CASES))
def test_interpreted_matches_reference(interpreted: dict[str, float | str], case_id: str) -> None:
    result = interpreted[case_id]
    if isinstance(result, str):
        pytest.fail(f"{case_id} under TRITON_INTERPRET=1:\n{result}", pytrace=False)
    assert result < (2e-2 if case_id.endswith("bf16") else 3e-3), (case_id, result)


if __name__ == "__main__":
    interpreted_child(CASES, _modules, MARK)
