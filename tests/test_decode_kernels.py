"""The decode kernels (recipes/decode/) on the CPU.

Compiled for sm_90 by Triton 3.6, each kernel must take the runtime parameters a launcher
passes (plus the two scratch pointers Triton appends), run the warps asked for, need no
global scratch, and put its dots on tensor cores. Run by Triton's interpreter, they must
match the float64 references of recipes/decode/reference.py:
- paged decode, plain and split-KV: GQA groups of 1, 4 and 8, ragged context lengths
  (0, 1, block-size edges, non-multiples of BLOCK_N) over shuffled blocks, with every cache
  slot no sequence owns set to NaN, so that a token read past a context length shows; the
  split partials (those past a short sequence's end the neutral (0, NEUTRAL_MAX, 0)) must
  match reference.split_reference;
- MoE: routing (ids exactly, weights), the alignment (exactly, with several chunks per
  loop), the grouped GEMMs (fused SiLU-and-mul, routing weights) into buffers with NaN guard
  rows that padded rows must leave alone, the combine, and the whole layer.
The GPU check at real sizes, with the timing against PyTorch, is
benchmarks/decode_jit_check.py.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable
from functools import partial
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

from tests.interpreted import child as interpreted_child
from tests.interpreted import run as interpreted_run
from tests.modules import load_module

triton = pytest.importorskip("triton", reason="the decode kernels need triton")

ROOT = Path(__file__).resolve().parents[1]
DECODE = ROOT / "recipes" / "decode"
PTXAS = Path(triton.__file__).parent / "backends" / "nvidia" / "bin" / "ptxas"
needs_ptxas = pytest.mark.skipif(not PTXAS.exists(), reason="Triton's ptxas is not installed")


def _load(name: str, as_name: str) -> ModuleType:
    return load_module(DECODE / f"{name}.py", as_name)


# -- compiled for sm_90 ------------------------------------------------------------------

# pointer parameters that are not of the activations' dtype
POINTERS = {
    "block_table_ptr": "*i32",
    "context_lens_ptr": "*i32",
    "locks_ptr": "*i32",
    "part_out_ptr": "*fp32",
    "part_max_ptr": "*fp32",
    "part_sum_ptr": "*fp32",
    "topk_weights_ptr": "*fp32",
    "weights_ptr": "*fp32",
    "sorted_ids_ptr": "*i32",
    "expert_ids_ptr": "*i32",
    "num_post_padded_ptr": "*i32",
    "ids_ptr": "*i32",
    "topk_ids_ptr": "*i32",
    "positions_ptr": "*i32",
    "slots_ptr": "*i32",
}


def _signature(fn: Any, dt: str, constexprs: dict[str, Any]) -> dict[str, str]:
    """Pointers by name, ``sm_scale`` fp32, every other runtime parameter i32."""
    sig = {}
    for name in fn.arg_names:
        if name in constexprs:
            sig[name] = "constexpr"
        elif name.endswith("_ptr"):
            sig[name] = POINTERS.get(name, f"*{dt}")
        else:
            sig[name] = "fp32" if name in ("sm_scale", "rope_theta") else "i32"
    return sig


def _compile(fn: Any, dt: str, constexprs: dict[str, Any], warps: int, stages: int) -> Any:
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource

    src = ASTSource(fn=fn, signature=_signature(fn, dt, constexprs), constexprs=constexprs)
    options = {"num_warps": warps, "num_stages": stages}
    return triton.compile(src, target=GPUTarget("cuda", 90, 32), options=options)


def _params(compiled: Any) -> list[str]:
    return re.findall(r"^\s*(\.param [^,\n)]*)", compiled.asm["ptx"], flags=re.M)


def _paged(G: int, bn: int, splits: int = 0) -> dict[str, Any]:
    consts = {"HEAD_DIM": 128, "BLOCK_SIZE": 16, "QUERIES_PER_KV": G, "BLOCK_N": bn}
    return {**consts, "NUM_SPLITS": splits, "MIN_SPLIT": 512} if splits else consts


def _gemm(silu: bool, bm: int, bn: int, bk: int, align: int = 0) -> dict[str, Any]:
    return {"TOP_K": 2, "A_PER_PAIR": not silu, "MUL_ROUTING_WEIGHT": not silu,
            "FUSE_SILU_MUL": silu, "ALIGN": align, "BLOCK_M": bm, "BLOCK_N": bn,
            "BLOCK_K": bk}  # fmt: skip


def _combine(weighted: bool, residual: bool) -> dict[str, Any]:
    return {"TOP_K": 2, "MUL_ROUTING_WEIGHT": weighted, "ADD_RESIDUAL": residual, "BLOCK_H": 1024}


_ROTARY = {"NUM_Q_HEADS": 32, "NUM_KV_HEADS": 8, "HEAD_DIM": 128, "BLOCK_SIZE": 16}

# (module, kernel, constexprs, num_warps, num_stages, dots on tensor cores)
COMPILES = {
    "paged-G8-bn64": ("pa", "paged_decode", _paged(8, 64), 4, 2, True),
    "paged-G1-bn128": ("pa", "paged_decode", _paged(1, 128), 8, 3, True),
    "split-G4-bn64-s8": ("pa", "paged_decode_split", _paged(4, 64, 8), 4, 2, True),
    "split-G8-bn32-s16": ("pa", "paged_decode_split", _paged(8, 32, 16), 4, 3, True),
    "split-G4-bn128-s32-ahead": ("pa", "paged_decode_split",
                                 {**_paged(4, 128, 32), "LOOKAHEAD": True}, 4, 3, True),
    "reduce-s8": ("pa", "paged_decode_reduce", {"HEAD_DIM": 128, "NUM_SPLITS": 8}, 4, 1, False),
    "reduce-s32": ("pa", "paged_decode_reduce", {"HEAD_DIM": 64, "NUM_SPLITS": 32}, 2, 1, False),
    "reduce-s32-all": ("pa", "paged_decode_reduce",
                       {"HEAD_DIM": 128, "NUM_SPLITS": 32, "READ_ALL": True}, 1, 1, False),
    "topk-E8": ("moe", "topk_softmax",
                {"NUM_EXPERTS": 8, "TOP_K": 2, "RENORMALIZE": True, "BLOCK_T": 16}, 4, 1, False),
    "topk-E60": ("moe", "topk_softmax",
                 {"NUM_EXPERTS": 60, "TOP_K": 4, "RENORMALIZE": False, "BLOCK_T": 4}, 2, 1, False),
    "align-E8": ("moe", "moe_align",
                 {"NUM_EXPERTS": 8, "BLOCK_M": 16, "BLOCK_P": 512}, 4, 1, False),
    "align-E64": ("moe", "moe_align",
                  {"NUM_EXPERTS": 64, "BLOCK_M": 64, "BLOCK_P": 64}, 8, 1, False),
    "gemm-up-16x64x128": ("moe", "moe_gemm", _gemm(True, 16, 64, 128), 4, 4, True),
    "gemm-down-64x128x64": ("moe", "moe_gemm", _gemm(False, 64, 128, 64), 4, 3, True),
    "rotary-q32-kv8": ("rot", "rotary_cache", _ROTARY, 4, 1, False),
    "gemm-up-16x64x128-align64": ("moe", "moe_gemm", _gemm(True, 16, 64, 128, 64), 4, 4, True),
    "combine": ("moe", "moe_combine", _combine(True, False), 4, 1, False),
    "combine-residual": ("moe", "moe_combine", _combine(False, True), 4, 1, False),
}  # fmt: skip


@pytest.fixture(scope="module")
def compiled_mods(tmp_path_factory: pytest.TempPathFactory) -> Any:
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("TRITON_CACHE_DIR", str(tmp_path_factory.mktemp("triton-cache")))
        yield {
            "pa": _load("paged_attention", "decode_paged_attention_compiled"),
            "moe": _load("moe", "decode_moe_compiled"),
            "rot": _load("rotary", "decode_rotary_compiled"),
        }


@needs_ptxas
@pytest.mark.parametrize("dt", ["fp16", "bf16"])
@pytest.mark.parametrize("case", list(COMPILES))
def test_compiles_for_sm90(compiled_mods: dict[str, ModuleType], case: str, dt: str) -> None:
    module, name, consts, warps, stages, dots = COMPILES[case]
    fn = getattr(compiled_mods[module], name)
    c = _compile(fn, dt, consts, warps, stages)
    md = c.metadata
    assert md.num_warps == warps
    assert md.global_scratch_size == 0 and not md.tensordesc_meta
    # every runtime parameter, then the global and profile scratch pointers Triton appends
    runtime = [n for n in fn.arg_names if n not in consts]
    assert len(_params(c)) == len(runtime) + 2
    ptx = c.asm["ptx"]
    assert (("mma.sync" in ptx) or ("wgmma" in ptx)) == dots


# -- run by the interpreter -------------------------------------------------------------
# In one subprocess: Triton reads TRITON_INTERPRET when @triton.jit decorates, and its own
# library (tl.cdiv, ...) is decorated when Triton is imported.

RESULTS_MARK = "DECODE-INTERPRETED "
Case = Callable[[dict[str, ModuleType]], float]
CASES: dict[str, Case] = {}
TOL = {"fp16": 3e-3, "bf16": 2e-2}


def _relative_error(out: Any, expected: Any) -> float:
    """Largest error relative to the largest expected magnitude (NaN if any is left)."""
    import torch

    if not bool(torch.isfinite(out).all()):
        return math.nan
    return float((out.double() - expected).abs().max() / expected.abs().max())


def _paged_case(mods: dict[str, ModuleType], lens: tuple[int, ...], hq: int, hkv: int, d: int,
                bs: int, bn: int, splits: int, dtype: str,
                min_split: int = 0, read_all: bool = False,
                lookahead: bool = False) -> float:  # fmt: skip
    import torch

    pa, ref = mods["pa"], mods["ref"]
    q, kc, vc, table, cl = ref.paged_inputs(lens, hq, hkv, d, bs, dtype, device="cpu")
    out = torch.full_like(q, float("nan"))
    scale = 1.0 / math.sqrt(d)
    scratch = pa.split_scratch(len(lens), hq, splits, d, q)
    for t in scratch:
        t.fill_(float("nan"))
    pa.paged_attention(q, kc, vc, table, cl, out, scale, block_n=bn, num_splits=splits,
                       scratch=scratch, min_split=min_split, read_all=read_all,
                       lookahead=lookahead)  # fmt: skip
    error = _relative_error(out, ref.paged_reference(q, kc, vc, table, cl, scale))
    if splits > 1:  # the partials; past a short context's end the neutral maximum and sum,
        import torch  # and the output row left as it was (never written, never read)

        part_out, part_max, part_sum = scratch
        want_out, want_max, want_sum = ref.split_reference(q, kc, vc, table, cl, scale, splits,
                                                           min_split)  # fmt: skip
        neutral = want_max == ref.NEUTRAL_MAX
        fp32_neutral = torch.tensor(ref.NEUTRAL_MAX, dtype=torch.float32)
        assert bool((part_max[neutral] == fp32_neutral).all()), part_max[neutral]
        errors = [
            _relative_error(part_max[~neutral], want_max[~neutral]),
            _relative_error(part_sum, want_sum),
            _relative_error(part_out[~neutral], want_out[~neutral]),
        ]
        assert bool(part_out[neutral].isnan().all())
        error = max(error, *errors)
    return error


# lengths: empty, 1, block edges, non-multiples of BLOCK_N, several BLOCK_N
RAGGED = (1, 0, 15, 16, 17, 47, 100)
for _dtype in ("fp16", "bf16"):
    for _hq, _hkv in ((4, 4), (8, 2), (16, 2)):
        for _splits in (1, 4):
            _bn = 32 if _splits == 1 else 16
            CASES[f"paged-G{_hq // _hkv}-splits{_splits}-{_dtype}"] = partial(
                _paged_case, lens=RAGGED, hq=_hq, hkv=_hkv, d=32, bs=16, bn=_bn,
                splits=_splits, dtype=_dtype,
            )  # fmt: skip
# block size 8 with BLOCK_N 32 (four blocks per step), head dim 64; split past every end
CASES["paged-G4-bs8-d64-fp16"] = partial(
    _paged_case, lens=(3, 70, 9), hq=8, hkv=2, d=64, bs=8, bn=32, splits=1, dtype="fp16"
)
# ranges of at least 32 tokens: 100 tokens use 4 of the 8 splits, 1 and 17 one each
CASES["paged-G4-splits8-min32-fp16"] = partial(
    _paged_case, lens=(100, 1, 17, 0), hq=8, hkv=2, d=32, bs=16, bn=16, splits=8,
    dtype="fp16", min_split=32,
)  # fmt: skip
# the reduce reading every range's row: the empty ranges' rows are NaN (never written)
CASES["paged-G4-splits8-min32-readall-bf16"] = partial(
    _paged_case, lens=(100, 1, 17, 0), hq=8, hkv=2, d=32, bs=16, bn=16, splits=8,
    dtype="bf16", min_split=32, read_all=True,
)  # fmt: skip
# the table read one tile ahead: ranges past short contexts' ends, tiles of one block and
# of two, a last tile cut short, stale (NaN) tokens behind every context's end
for _bn, _min, _dtype in ((16, 32, "fp16"), (32, 64, "bf16")):
    CASES[f"paged-G4-splits8-min{_min}-ahead-bn{_bn}-{_dtype}"] = partial(
        _paged_case, lens=(100, 1, 17, 0, 203), hq=8, hkv=2, d=32, bs=16, bn=_bn, splits=8,
        dtype=_dtype, min_split=_min, read_all=True, lookahead=True,
    )  # fmt: skip
CASES["paged-G8-splits8-short-fp16"] = partial(
    _paged_case, lens=(1, 2, 130), hq=8, hkv=1, d=32, bs=16, bn=16, splits=8, dtype="fp16"
)


def _contiguous_case(mods: dict[str, ModuleType]) -> float:
    """The benchmark's layout: contiguous K/V moved into shuffled blocks, all one length."""
    import torch

    pa, ref = mods["pa"], mods["ref"]
    g = torch.Generator().manual_seed(0)
    q = torch.randn(3, 8, 32, generator=g).half()
    k, v = (torch.randn(3, 2, 48, 32, generator=g).half() for _ in range(2))
    kc, vc, table = ref.paged_from_contiguous(k, v, 16)
    lens = torch.full((3,), 48, dtype=torch.int32)
    out = torch.full_like(q, float("nan"))
    pa.paged_attention(q, kc, vc, table, lens, out, 0.2, block_n=32)
    return _relative_error(out, ref.contiguous_reference(q, k, v, 0.2))


CASES["paged-from-contiguous-fp16"] = _contiguous_case


def _route_case(mods: dict[str, ModuleType], T: int, E: int, k: int, renorm: bool,
                dtype: str) -> float:  # fmt: skip
    moe, ref = mods["moe"], mods["ref"]
    _, logits, _, _ = ref.moe_inputs(T, E, 16, 16, dtype, device="cpu", seed=T)
    weights, ids = moe.route(logits, k, renorm, block_t=8)
    want_w, want_ids = ref.topk_reference(logits, k, renorm)
    assert ids.tolist() == want_ids.tolist(), (ids, want_ids)
    return _relative_error(weights, want_w)


def _align_case(mods: dict[str, ModuleType], T: int, E: int, k: int, bm: int,
                skewed: bool) -> float:  # fmt: skip
    import torch

    moe, ref = mods["moe"], mods["ref"]
    g = torch.Generator().manual_seed(T * E)
    ids = torch.stack([torch.randperm(E, generator=g)[:k] for _ in range(T)]).to(torch.int32)
    if skewed:  # every token to experts 1 and E - 1: other experts empty, long runs
        ids[:, 0], ids[:, -1] = 1, E - 1
    sorted_ids, expert_ids, total = moe.align(ids, E, bm, block_p=16)
    want = ref.align_reference(ids, E, bm)
    assert sorted_ids.tolist() == want[0].tolist(), (sorted_ids, want[0])
    assert expert_ids.tolist() == want[1].tolist(), (expert_ids, want[1])
    assert int(total) == want[2], (int(total), want[2])
    return 0.0


def _guarded(rows: int, cols: int, like: Any) -> tuple[Any, Any]:
    """(a view of rows x cols, the whole buffer): NaN everywhere, BLOCK_M guard rows after."""
    import torch

    whole = torch.full((rows + 64, cols), float("nan"), dtype=like.dtype)
    return whole[:rows], whole


def _moe_case(mods: dict[str, ModuleType], T: int, E: int, k: int, bm: int, dtype: str,
              align: int = 0) -> float:  # fmt: skip
    """The layer kernel by kernel; ``align``: the pairs aligned to that block size (as a
    CUDA graph does, for any BLOCK_M it may launch) rather than to BLOCK_M."""
    import torch

    moe, ref = mods["moe"], mods["ref"]
    hidden, ffn = 80, 48  # ragged K and N for 32-wide blocks
    x, logits, w1, w2 = ref.moe_inputs(T, E, hidden, ffn, dtype, device="cpu", seed=T)
    cfg = {"BLOCK_M": bm, "BLOCK_N": 32, "BLOCK_K": 32, "num_warps": 4, "num_stages": 2}
    weights, ids = moe.route(logits, k)
    aligned = moe.align(ids, E, align or bm)
    act, act_all = _guarded(T * k, ffn, x)
    moe.grouped_gemm(x, w1, act, weights, aligned, k, per_pair=False, mul_weight=False,
                     silu_mul=True, config=cfg, align=align)  # fmt: skip
    down, down_all = _guarded(T * k, hidden, x)
    moe.grouped_gemm(act, w2, down, weights, aligned, k, per_pair=True, mul_weight=True,
                     silu_mul=False, config=cfg, align=align)  # fmt: skip
    # padded rows (sentinel ids) must store nothing: the guard rows stay NaN
    assert bool(act_all[T * k :].isnan().all()) and bool(down_all[T * k :].isnan().all())
    flat = ids.reshape(-1).long()
    want_act = torch.stack([ref.expert_up(x[p // k][None], w1, int(e))[0]
                            for p, e in enumerate(flat)])  # fmt: skip
    errors = [_relative_error(act, want_act)]
    want = ref.moe_reference(x, w1, w2, weights, ids.long())
    errors.append(_relative_error(moe.combine(down, weights, k, block_h=64), want))
    with_residual = moe.combine(down, weights, k, residual=x, block_h=64)
    errors.append(_relative_error(with_residual, want + x.double()))
    errors.append(_relative_error(moe.fused_moe(x, w1, w2, logits, k, cfg, block_h=32), want))
    return max(errors)


for _T, _E, _k in ((1, 4, 2), (5, 8, 2), (37, 8, 2), (40, 4, 2)):
    for _renorm in (True, False):
        CASES[f"route-T{_T}-E{_E}-k{_k}-renorm{int(_renorm)}-fp16"] = partial(
            _route_case, T=_T, E=_E, k=_k, renorm=_renorm, dtype="fp16"
        )
    for _bm, _skewed in ((16, False), (32, True)):
        CASES[f"align-T{_T}-E{_E}-bm{_bm}-skewed{int(_skewed)}"] = partial(
            _align_case, T=_T, E=_E, k=_k, bm=_bm, skewed=_skewed
        )
    CASES[f"moe-T{_T}-E{_E}-k{_k}-fp16"] = partial(_moe_case, T=_T, E=_E, k=_k, bm=16, dtype="fp16")
CASES["route-T9-E60-k4-renorm1-bf16"] = partial(_route_case, T=9, E=60, k=4, renorm=True,
                                                dtype="bf16")  # fmt: skip
CASES["moe-T19-E8-k2-bm32-bf16"] = partial(_moe_case, T=19, E=8, k=2, bm=32, dtype="bf16")
for _T in (1, 37):  # aligned to 64 rows, launched with BLOCK_M 16 and 32
    for _bm in (16, 32):
        CASES[f"moe-T{_T}-E8-k2-bm{_bm}-align64-fp16"] = partial(
            _moe_case, T=_T, E=8, k=2, bm=_bm, dtype="fp16", align=64
        )


def _rotary_case(mods: dict[str, ModuleType], slots: tuple[int, ...], dtype: str) -> float:
    """Queries rotated, keys rotated and values copied into the cache at each token's slot;
    a slot of -1 or past the cache writes nothing (the cache is NaN elsewhere, so a stray
    write shows as a finite value where NaN was expected, and a missed one as NaN)."""
    import torch

    rot = mods["rot"]
    hq, hkv, d, bs, blocks, theta = 4, 2, 32, 4, 3, 10000.0
    g = torch.Generator().manual_seed(len(slots))
    t = len(slots)
    torch_dtype = getattr(torch, {"fp16": "float16", "bf16": "bfloat16"}[dtype])
    qkv = torch.randn(t, (hq + 2 * hkv) * d, generator=g).to(torch_dtype)
    positions = torch.tensor([0, 1, 7, 4095, 32767, 100][:t], dtype=torch.int32)
    slots_t = torch.tensor(slots, dtype=torch.int32)
    kc = torch.full((blocks, hkv, bs, d), float("nan"), dtype=torch_dtype)
    vc = torch.full_like(kc, float("nan"))
    q_out = torch.full((t, hq * d), float("nan"), dtype=torch_dtype)
    want_q, want_k, want_v = rot.rotary_reference(qkv, positions, slots_t, kc, vc, hq, hkv, d,
                                                   theta)  # fmt: skip
    rot.rotary_cache[(t, hq + 2 * hkv)](
        qkv, positions, slots_t, q_out, kc, vc, t, blocks * bs, theta, qkv.stride(0),
        q_out.stride(0), *kc.stride()[:3], *vc.stride()[:3],
        NUM_Q_HEADS=hq, NUM_KV_HEADS=hkv, HEAD_DIM=d, BLOCK_SIZE=bs,
    )  # fmt: skip
    written = ~want_k.isnan()
    assert bool((kc.isnan() == ~written).all()) and bool((vc.isnan() == ~written).all())
    return max(_relative_error(q_out, want_q),
               _relative_error(kc[written], want_k[written]),
               _relative_error(vc[written], want_v[written]))  # fmt: skip


# slots: in order, shuffled over blocks, a padded row (-1) and one past the cache (12)
for _dtype in ("fp16", "bf16"):
    CASES[f"rotary-slots-{_dtype}"] = partial(_rotary_case, slots=(0, 5, 11, 2, -1, 12),
                                              dtype=_dtype)  # fmt: skip


def _modules() -> dict[str, Any]:
    return {
        "pa": _load("paged_attention", "decode_paged_attention"),
        "moe": _load("moe", "decode_moe"),
        "rot": _load("rotary", "decode_rotary"),
        "ref": _load("reference", "decode_reference"),
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
    # NaN (a poisoned cache slot or a guard row read) fails this comparison too
    assert result < TOL["bf16" if case_id.endswith("bf16") else "fp16"], (case_id, result)


if __name__ == "__main__":
    _child()
