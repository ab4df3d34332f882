"""The cost model's training kernels (benchmarks/training/) on the CPU.

Run by Triton's interpreter at small, ragged sizes (rows wider than one block, sizes that
are no multiple of the tiles, causal and not), each must match the float64 reference of
benchmarks/training/reference.py, fed by the same ``inputs`` function the tuner uses.
Every recipe must plan as a dense search (the ``grid`` strategy with no early stop, every
config timed at every bucket) sized for one GPU call, and
benchmarks/costmodel_eval.py must take the training databases when they exist.
"""

from __future__ import annotations

import inspect
import json
import math
import sys
from collections.abc import Callable
from functools import partial
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

from tests.interpreted import child as interpreted_child
from tests.interpreted import run as interpreted_run
from tests.modules import load_module as _load

ROOT = Path(__file__).resolve().parents[1]
TRAINING = ROOT / "benchmarks" / "training"
RECIPES = sorted(TRAINING.glob("*.toml"))
RESULTS_MARK = "TRAINING-INTERPRETED "
TOL = {"fp16": 3e-3, "bf16": 2e-2, "fp32": 1e-5}


# -- run by the interpreter -------------------------------------------------------------

Case = Callable[[dict[str, ModuleType]], float]
CASES: dict[str, Case] = {}


def _relative_error(out: Any, expected: Any) -> float:
    """Largest error relative to the largest expected magnitude (NaN if any is left)."""
    import torch

    if not bool(torch.isfinite(out).all()):
        return math.nan
    return float((out.double() - expected).abs().max() / expected.abs().max())


def _params(fn: Any) -> list[str]:
    """A kernel's runtime (non-constexpr) parameters, as its launch takes them."""
    while not inspect.isfunction(fn):
        fn = fn.fn
    sig = inspect.signature(fn).parameters.values()
    return [p.name for p in sig if "constexpr" not in str(p.annotation)]


def _launch(
    mods: dict[str, ModuleType],
    stem: str,
    name: str,
    kernel: str,
    sizes: dict[str, int],
    dtype: str,
    grid: tuple[int, ...],
    meta: dict[str, Any],
    prepare: Callable[[list[Any]], None] | None = None,
    poison: bool = True,
) -> dict[str, tuple[Any, Any]]:
    """``NAME_inputs`` on the CPU, outputs poisoned (NaN, or -1 for integers, so that an
    element left unwritten shows; with ``poison=False`` left as ``inputs`` made them, for
    a kernel that adds into its output), one launch: {output: (what the kernel wrote, the
    float64 reference)}. An ``@triton.autotune`` kernel is launched through its function,
    with ``meta`` as its config."""
    import torch

    ref = mods["ref"]
    torch.manual_seed(sum(sizes.values()))
    args = getattr(ref, f"{name}_inputs")(sizes, {"T": dtype}, device="cpu")
    if prepare is not None:
        prepare(args)
    fn = _jitted(getattr(mods[stem], kernel))
    params = _params(fn)
    assert len(params) == len(args), (params, len(args))
    expected = getattr(ref, f"{name}_reference")(*args)
    for out in expected if poison else ():
        t = args[params.index(out)]
        t.fill_(float("nan") if t.is_floating_point() else -1)
    fn[grid](*args, **meta)
    return {o: (args[params.index(o)], e) for o, e in expected.items()}


def _jitted(fn: Any) -> Any:
    """The jit function under an ``@triton.autotune`` (launched with a config of our own)."""
    from triton.runtime.autotuner import Autotuner

    return fn.fn if isinstance(fn, Autotuner) else fn


def _error(outs: dict[str, tuple[Any, Any]]) -> float:
    return max(_relative_error(got, want) for got, want in outs.values())


def _cdiv(a: int, b: int) -> int:
    return -(-a // b)


def _layernorm(mods: dict[str, ModuleType], rows: int, cols: int, dtype: str, bn: int) -> float:
    return _error(
        _launch(
            mods,
            "layernorm",
            "layernorm",
            "layernorm_fwd",
            {"n_rows": rows, "n_cols": cols},
            dtype,
            (rows,),
            {"BLOCK_N": bn, "num_warps": 4},
        )
    )


def _row_stats(mods: dict[str, ModuleType], M: int, N: int, dtype: str, bm: int, bn: int) -> float:
    """Row r's maximum planted twice, at columns r + 3 and, in another tile, N - 2 - r:
    the argmax must be the first, exactly."""
    seen: list[Any] = []

    def plant(args: list[Any]) -> None:
        x, argmax = args[0], args[3]
        for r in range(M):
            x[r, r + 3] = x[r, N - 2 - r] = 50.0
        argmax.fill_(-1)  # poisoned: a row left unwritten shows
        seen.extend(args)

    meta = {"BLOCK_M": bm, "BLOCK_N": bn, "num_warps": 2}
    outs = _launch(mods, "row_stats", "row_stats", "row_stats", {"M": M, "N": N}, dtype,
                   (_cdiv(M, bm),), meta, plant)  # fmt: skip
    x, argmax = seen[0], seen[3]
    want = mods["ref"].row_stats_argmax(x)
    assert want.tolist() == [r + 3 for r in range(M)]
    assert argmax.tolist() == want.tolist(), (argmax, want)
    return _error(outs)


def _cross_entropy(mods: dict[str, ModuleType], rows: int, V: int, dtype: str, bv: int) -> float:
    return _error(
        _launch(
            mods,
            "cross_entropy",
            "cross_entropy",
            "cross_entropy_fwd",
            {"n_rows": rows, "V": V},
            dtype,
            (rows,),
            {"BLOCK_V": bv, "num_warps": 4},
        )
    )


def _bias_gelu(mods: dict[str, ModuleType], M: int, N: int, dtype: str, block: int) -> float:
    return _error(
        _launch(
            mods,
            "bias_gelu",
            "bias_gelu",
            "bias_gelu",
            {"M": M, "N": N},
            dtype,
            (_cdiv(M * N, block),),
            {"BLOCK": block, "num_warps": 4},
        )
    )


def _qk_norm(mods: dict[str, ModuleType], name: str, rows: int, dtype: str, br: int) -> float:
    return _error(
        _launch(
            mods,
            "qk_norm",
            name,
            "qk_norm",
            {"n_rows": rows},
            dtype,
            (_cdiv(rows, br),),
            {"HEAD_DIM": 128 if name.endswith("d128") else 64, "BLOCK_R": br, "num_warps": 2},
        )
    )


def _transpose(mods: dict[str, ModuleType], M: int, N: int, dtype: str, bm: int, bn: int) -> float:
    return _error(
        _launch(
            mods,
            "transpose",
            "transpose",
            "transpose",
            {"M": M, "N": N},
            dtype,
            (_cdiv(M, bm), _cdiv(N, bn)),
            {"BLOCK_M": bm, "BLOCK_N": bn, "num_warps": 4},
        )
    )


def _attention(
    mods: dict[str, ModuleType], name: str, bh: int, n: int, dtype: str, bm: int, bn: int
) -> float:
    causal = "causal" in name
    d = 64 if name.endswith("d64") else 128
    meta = {"HEAD_DIM": d, "CAUSAL": causal, "BLOCK_M": bm, "BLOCK_N": bn, "num_warps": 4}
    return _error(
        _launch(
            mods,
            "attention",
            name,
            "attention_fwd",
            {"BH": bh, "N_CTX": n},
            dtype,
            (_cdiv(n, bm), bh),
            meta,
        )
    )


def _bmm(
    mods: dict[str, ModuleType],
    B: int,
    M: int,
    N: int,
    K: int,
    dtype: str,
    blocks: tuple[int, int, int],
) -> float:
    bm, bn, bk = blocks
    return _error(
        _launch(
            mods,
            "bmm",
            "bmm",
            "bmm_bias",
            {"BATCH": B, "M": M, "N": N, "K": K},
            dtype,
            (_cdiv(N, bn), _cdiv(M, bm), B),
            {"BLOCK_M": bm, "BLOCK_N": bn, "BLOCK_K": bk, "num_warps": 4},
        )
    )


def _grouped_gemm(
    mods: dict[str, ModuleType], M: int, G: int, dtype: str, blocks: tuple[int, int, int]
) -> float:
    bm, bn, bk = blocks
    N, K = 48, 40
    meta = {"BLOCK_M": bm, "BLOCK_N": bn, "BLOCK_K": bk, "MAX_GROUPS": 8, "num_warps": 4}
    sizes = {"M": M, "N": N, "K": K, "G": G}
    grid = (_cdiv(N, bn), _cdiv(M, bm) + G)
    return _error(
        _launch(mods, "grouped_gemm", "grouped_gemm", "grouped_gemm", sizes, dtype, grid, meta)
    )


def _causal_conv1d(
    mods: dict[str, ModuleType], B: int, D: int, L: int, dtype: str, bd: int, bl: int
) -> float:
    meta = {"WIDTH": 4, "BLOCK_D": bd, "BLOCK_L": bl, "num_warps": 2}
    sizes = {"BATCH": B, "D": D, "L": L}
    grid = (_cdiv(L, bl), _cdiv(D, bd), B)
    return _error(
        _launch(mods, "causal_conv1d", "causal_conv1d", "causal_conv1d", sizes, dtype, grid, meta)
    )


def _split_combine(
    mods: dict[str, ModuleType], splits: int, M: int, N: int, dtype: str, bn: int, warps: int
) -> float:
    meta = {"SPLITS": splits, "BLOCK_N": bn, "num_warps": warps}
    name, sizes, grid = f"split_combine_{splits}", {"M": M, "N": N}, (M, _cdiv(N, bn))
    return _error(_launch(mods, "split_combine", name, "split_combine", sizes, dtype, grid, meta))


def _w8_linear(
    mods: dict[str, ModuleType], M: int, N: int, K: int, dtype: str, blocks: tuple[int, int, int]
) -> float:
    bm, bn, bk = blocks
    meta = {"BLOCK_M": bm, "BLOCK_N": bn, "BLOCK_K": bk, "num_warps": 4}
    sizes, grid = {"M": M, "N": N, "K": K}, (_cdiv(M, bm), _cdiv(N, bn))
    return _error(_launch(mods, "w8_linear", "w8_linear", "w8_linear", sizes, dtype, grid, meta))


def _linear_splitk(
    mods: dict[str, ModuleType],
    M: int,
    N: int,
    K: int,
    dtype: str,
    blocks: tuple[int, int, int],
    split: int,
) -> float:
    bm, bn, bk = blocks
    meta = {"BLOCK_M": bm, "BLOCK_N": bn, "BLOCK_K": bk, "SPLIT_K": split, "num_warps": 4}
    return _error(
        _launch(
            mods,
            "linear_splitk",
            "linear_splitk",
            "linear_splitk",
            {"M": M, "N": N, "K": K},
            dtype,
            (_cdiv(N, bn), _cdiv(M, bm), split),
            meta,
            # split programs add into the zeroed output; one program stores (poisoned first)
            poison=split == 1,
        )
    )


for _dt in ("fp16", "bf16"):
    # a row of 300: two and a half tiles of 128, or one tile of 512 with a masked tail
    CASES[f"layernorm-tiled-{_dt}"] = partial(_layernorm, rows=3, cols=300, dtype=_dt, bn=128)
    CASES[f"layernorm-one-tile-{_dt}"] = partial(_layernorm, rows=2, cols=300, dtype=_dt, bn=512)
    CASES[f"cross-entropy-{_dt}"] = partial(_cross_entropy, rows=9, V=1000, dtype=_dt, bv=256)
    CASES[f"bias-gelu-{_dt}"] = partial(_bias_gelu, M=7, N=100, dtype=_dt, block=256)
    CASES[f"transpose-{_dt}"] = partial(_transpose, M=50, N=70, dtype=_dt, bm=16, bn=32)
    for _name in ("attention_d128", "attention_causal_d128", "attention_causal_d64"):
        # 70 keys: a ragged last tile of both queries and keys
        CASES[f"{_name}-{_dt}"] = partial(
            _attention, name=_name, bh=2, n=70, dtype=_dt, bm=32, bn=16
        )
    # 13 rows: a ragged last block of rows
    CASES[f"qk-norm-d128-{_dt}"] = partial(_qk_norm, name="qk_norm_d128", rows=13, dtype=_dt, br=4)
    CASES[f"qk-norm-d64-{_dt}"] = partial(_qk_norm, name="qk_norm_d64", rows=13, dtype=_dt, br=8)
    CASES[f"bmm-{_dt}"] = partial(_bmm, B=2, M=20, N=48, K=40, dtype=_dt, blocks=(16, 32, 16))
    # 37 rows over 5 uneven groups (0, 5, 7, 16, 9 rows; tiles of 8): empty, ragged, exact
    CASES[f"grouped-gemm-{_dt}"] = partial(_grouped_gemm, M=37, G=5, dtype=_dt, blocks=(8, 32, 16))
    # 37 channels, 70 steps: ragged tiles both ways, each tile's halo reaching the previous
    CASES[f"causal-conv1d-{_dt}"] = partial(
        _causal_conv1d, B=2, D=37, L=70, dtype=_dt, bd=16, bl=32
    )
    # 70 columns: two tiles of 32 and a ragged third; 16 splits of 3 rows
    CASES[f"split-combine-16-{_dt}"] = partial(
        _split_combine, splits=16, M=3, N=70, dtype=_dt, bn=32, warps=2
    )
    # 20 rows, 50 columns, K = 72: ragged tiles all three ways (the last K tile 8 of 32)
    CASES[f"w8-linear-{_dt}"] = partial(
        _w8_linear, M=20, N=50, K=72, dtype=_dt, blocks=(16, 32, 32)
    )
    # K = 200 in 3 slices of 80 (5 tiles of 16): the last slice holds 40, its last tile ragged
    CASES[f"linear-splitk-3-{_dt}"] = partial(
        _linear_splitk, M=5, N=40, K=200, dtype=_dt, blocks=(16, 32, 16), split=3
    )
    CASES[f"linear-splitk-1-{_dt}"] = partial(
        _linear_splitk, M=18, N=40, K=72, dtype=_dt, blocks=(16, 32, 32), split=1
    )
# 4 slices of 32 over K = 70: the third holds 6, the fourth starts past K (adds zeros)
CASES["linear-splitk-empty-slice-fp16"] = partial(
    _linear_splitk, M=3, N=16, K=70, dtype="fp16", blocks=(16, 16, 32), split=4
)
# 3 rows over 7 groups: empty groups, and programs past the last tile
CASES["grouped-gemm-empty-groups-bf16"] = partial(
    _grouped_gemm, M=3, G=7, dtype="bf16", blocks=(16, 16, 32)
)
# a sequence shorter than the filter: every output reads the zeros before it
CASES["causal-conv1d-short-bf16"] = partial(
    _causal_conv1d, B=1, D=5, L=3, dtype="bf16", bd=4, bl=64
)
# one tile wider than the row (40 of 64 columns), 4 splits, one warp
CASES["split-combine-4-bf16"] = partial(
    _split_combine, splits=4, M=5, N=40, dtype="bf16", bn=64, warps=1
)
CASES["row-stats-ties-fp16"] = partial(_row_stats, M=5, N=1000, dtype="fp16", bm=2, bn=256)
CASES["row-stats-one-row-per-program-bf16"] = partial(
    _row_stats, M=3, N=300, dtype="bf16", bm=1, bn=128
)
CASES["transpose-fp32"] = partial(_transpose, M=33, N=64, dtype="fp32", bm=32, bn=16)
CASES["attention-causal-square-tiles-fp16"] = partial(
    _attention, name="attention_causal_d64", bh=1, n=96, dtype="fp16", bm=32, bn=32
)
# key tiles wider than query tiles: the causal sweep's last tile reaches past the diagonal
CASES["attention-causal-wide-key-tiles-bf16"] = partial(
    _attention, name="attention_causal_d64", bh=2, n=70, dtype="bf16", bm=16, bn=64
)


def _modules() -> dict[str, Any]:
    stems = (
        "layernorm",
        "row_stats",
        "cross_entropy",
        "bias_gelu",
        "transpose",
        "attention",
        "bmm",
        "qk_norm",
        "linear_splitk",
        "grouped_gemm",
        "causal_conv1d",
        "split_combine",
        "w8_linear",
    )
    mods = {s: _load(TRAINING / f"{s}.py", f"training_{s}") for s in stems}
    return {**mods, "ref": _load(TRAINING / "reference.py", "training_reference")}


@pytest.fixture(scope="module")
def interpreted() -> dict[str, float | str]:
    pytest.importorskip("torch", reason="the interpreted checks need torch")
    pytest.importorskip("triton", reason="the training kernels need triton")
    results: dict[str, float | str] = interpreted_run(__file__, RESULTS_MARK, ROOT)
    return results


@pytest.mark.parametrize("case_id", list(CASES))
def test_interpreted_matches_reference(interpreted: dict[str, float | str], case_id: str) -> None:
    result = interpreted[case_id]
    if isinstance(result, str):
        pytest.fail(f"{case_id} under TRITON_INTERPRET=1:\n{result}", pytrace=False)
    dtype = case_id.rsplit("-", 1)[1]
    # NaN (an output element never written) fails this comparison too
    assert result < TOL[dtype], (case_id, result)


if __name__ == "__main__":
    interpreted_child(CASES, _modules, RESULTS_MARK)


# -- compiled for sm_90 (the interpreter does not check what only the compiler refuses) ---

# (file, kernel, the recipe's inputs, sizes, dtype, constexprs, num_warps, num_stages)
COMPILES = {
    "layernorm": (
        "layernorm",
        "layernorm_fwd",
        "layernorm",
        {"n_rows": 4, "n_cols": 4096},
        "bf16",
        {"BLOCK_N": 1024},
        4,
        1,
    ),
    "row_stats": (
        "row_stats",
        "row_stats",
        "row_stats",
        {"M": 4, "N": 32000},
        "fp16",
        {"BLOCK_M": 4, "BLOCK_N": 1024},
        4,
        1,
    ),
    "cross_entropy": (
        "cross_entropy",
        "cross_entropy_fwd",
        "cross_entropy",
        {"n_rows": 4, "V": 32000},
        "bf16",
        {"BLOCK_V": 4096},
        8,
        2,
    ),
    "bias_gelu": (
        "bias_gelu",
        "bias_gelu",
        "bias_gelu",
        {"M": 4, "N": 4096},
        "fp16",
        {"BLOCK": 1024},
        4,
        1,
    ),
    "transpose": (
        "transpose",
        "transpose",
        "transpose",
        {"M": 128, "N": 4096},
        "fp32",
        {"BLOCK_M": 64, "BLOCK_N": 32},
        4,
        1,
    ),
    "attention_causal_d128": (
        "attention",
        "attention_fwd",
        "attention_causal_d128",
        {"BH": 2, "N_CTX": 512},
        "bf16",
        {"HEAD_DIM": 128, "CAUSAL": True, "BLOCK_M": 64, "BLOCK_N": 64},
        4,
        2,
    ),
    "bmm": (
        "bmm",
        "bmm_bias",
        "bmm",
        {"BATCH": 2, "M": 16, "N": 1024, "K": 1024},
        "fp16",
        {"BLOCK_M": 32, "BLOCK_N": 64, "BLOCK_K": 64},
        4,
        3,
    ),
    "qk_norm": (
        "qk_norm",
        "qk_norm",
        "qk_norm_d128",
        {"n_rows": 64},
        "bf16",
        {"HEAD_DIM": 128, "BLOCK_R": 8},
        1,
        1,
    ),
    "grouped_gemm": (
        "grouped_gemm",
        "grouped_gemm",
        "grouped_gemm",
        {"M": 64, "N": 1536, "K": 2048, "G": 32},
        "bf16",
        {"BLOCK_M": 16, "BLOCK_N": 128, "BLOCK_K": 64, "MAX_GROUPS": 32},
        4,
        3,
    ),
    "causal_conv1d": (
        "causal_conv1d",
        "causal_conv1d",
        "causal_conv1d",
        {"BATCH": 2, "D": 5376, "L": 256},
        "bf16",
        {"WIDTH": 4, "BLOCK_D": 16, "BLOCK_L": 256},
        4,
        1,
    ),
    "split_combine": (
        "split_combine",
        "split_combine",
        "split_combine_16",
        {"M": 4, "N": 4096},
        "fp16",
        {"SPLITS": 16, "BLOCK_N": 256},
        1,
        1,
    ),
    "w8_linear": (
        "w8_linear",
        "w8_linear",
        "w8_linear",
        {"M": 16, "N": 4096, "K": 4096},
        "bf16",
        {"BLOCK_M": 16, "BLOCK_N": 128, "BLOCK_K": 128},
        4,
        3,
    ),
    "linear_splitk": (
        "linear_splitk",
        "linear_splitk",
        "linear_splitk",
        {"M": 16, "N": 4096, "K": 14336},
        "bf16",
        {"BLOCK_M": 16, "BLOCK_N": 64, "BLOCK_K": 128, "SPLIT_K": 4},
        4,
        4,
    ),
}
_TYPES = {
    "torch.float16": "*fp16",
    "torch.bfloat16": "*bf16",
    "torch.float32": "*fp32",
    "torch.int8": "*i8",
    "torch.int32": "*i32",
    "torch.int64": "*i64",
}


def _triton_type(value: Any) -> str:
    if isinstance(value, float):
        return "fp32"
    if isinstance(value, int):
        return "i32"
    return _TYPES[str(value.dtype)]


@pytest.mark.parametrize("case", list(COMPILES))
def test_compiles_for_sm90(case: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    pytest.importorskip("torch", reason="the inputs need torch")
    triton = pytest.importorskip("triton", reason="the training kernels need triton")
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource

    monkeypatch.setenv("TRITON_CACHE_DIR", str(tmp_path))
    stem, kernel, name, sizes, dtype, consts, warps, stages = COMPILES[case]
    ref = _load(TRAINING / "reference.py", "training_reference_meta")
    args = getattr(ref, f"{name}_inputs")(sizes, {"T": dtype}, device="meta")
    fn = _jitted(getattr(_load(TRAINING / f"{stem}.py", f"training_{stem}_compiled"), kernel))
    params = _params(fn)
    sig = {p: _triton_type(a) for p, a in zip(params, args, strict=True)}
    src = ASTSource(
        fn=fn, signature={**sig, **dict.fromkeys(consts, "constexpr")}, constexprs=consts
    )
    options = {"num_warps": warps, "num_stages": stages}
    compiled = triton.compile(src, target=GPUTarget("cuda", 90, 32), options=options)
    assert compiled.metadata.num_warps == warps


# -- the recipes: dense, verified, sized for one GPU call ---------------------------------

BENCH_MS = 45.0  # a benchmark's cost on the H200, from the exhaustive pass (README.md)
ONE_CALL_S = 330  # what the GPU script may spend tuning, of its 8 minutes (README.md)


def _estimate() -> ModuleType:
    return _load(TRAINING / "estimate.py", "training_estimate")


@pytest.fixture(scope="module")
def plans() -> dict[str, Any]:
    pytest.importorskip("torch", reason="planning the training recipes needs torch")
    pytest.importorskip("triton", reason="planning the training recipes needs triton")
    from aot.plan import make_plan
    from aot.recipe import load

    return {p.stem: make_plan(load(p)) for p in RECIPES}


@pytest.mark.parametrize("recipe", [p.stem for p in RECIPES])
def test_every_config_is_timed_at_every_bucket_and_verified(
    plans: dict[str, Any], recipe: str
) -> None:
    for inst in plans[recipe].instances:
        k = inst.kernel
        assert inst.target.arch == "sm_90", inst.label
        assert k.inputs and k.reference, f"{k.name}: timed configs must be verifiable"
        assert k.tune.flops is not None and k.tune.bytes is not None, k.name
        assert k.tune.strategy == "grid", k.name
        for bucket in inst.buckets:
            n = len(inst.candidates(bucket))
            # dense: tens of configs, none left out by the budget or an early stop, in the
            # first bucket or in those warm-started from a neighbour (the first H200 run
            # set patience alone, and every bucket after the first stopped at 16 configs)
            stop = min(k.tune.budget, k.tune.patience, k.tune.warm_patience)
            assert 20 <= n <= stop, (k.name, bucket, n)


def test_each_training_recipe_fits_one_gpu_call_and_the_set_two(plans: dict[str, Any]) -> None:
    """The GPU script resumes from the databases of an earlier call (SEED), so the set
    may be gathered over two calls; no recipe may need more than one."""
    est = _estimate()
    costs = [est.plan_cost(plan, name) for name, plan in plans.items()]
    assert sum(c.benchmarks for c in costs) >= 2000  # dense enough to be worth the call
    assert max(c.seconds(BENCH_MS, 0.3, 16) for c in costs) < ONE_CALL_S / 2
    assert sum(c.seconds(BENCH_MS, 0.3, 16) for c in costs) < 2 * ONE_CALL_S


def test_each_training_kernel_is_its_own_family(plans: dict[str, Any]) -> None:
    """Leave-one-kernel-out holds out a source hash: one file per kernel keeps them apart
    (the attention recipe's three kernels share one source, and are held out together)."""
    sources: dict[str, set[str]] = {}
    for name, plan in plans.items():
        for kernel, src in plan.sources.items():
            sources.setdefault(src.cache_key, set()).add(f"{name}:{kernel}")
    assert len(sources) == len(RECIPES), sources


def test_costmodel_eval_takes_the_training_databases_only_when_they_exist(
    tmp_path: Path,
) -> None:
    ev = _load(ROOT / "benchmarks" / "costmodel_eval.py", "training_costmodel_eval")
    (tmp_path / "h200-gallery").mkdir()
    (tmp_path / "h200-gallery" / "softmax.tunedb.jsonl.gz").touch()
    before = ev.databases(tmp_path)
    assert ev.TRAINING not in ev.recipes(before)
    (tmp_path / "h200-training").mkdir()
    (tmp_path / "h200-training" / "layernorm.tunedb.jsonl.gz").touch()
    (tmp_path / "h200-training" / "layernorm.report.md").touch()
    after = ev.databases(tmp_path)
    assert after == [*before, tmp_path / "h200-training" / "layernorm.tunedb.jsonl.gz"]
    assert ev.recipes(after) == [*ev.recipes(before), ev.TRAINING]
    # a candidate training kernel's database joins only through --add, with the recipes
    (tmp_path / "h200-training-candidates").mkdir()
    candidate = tmp_path / "h200-training-candidates" / "linear_splitk.tunedb.jsonl.gz"
    candidate.touch()
    assert ev.databases(tmp_path) == after
    assert ev.recipes([*before, candidate]) == ev.recipes(after)


def test_costmodel_eval_refuses_an_unreadable_added_database(tmp_path: Path) -> None:
    """``--add`` naming a missing file, or one that is no tuning database: one line naming
    the file and why, exit 1, no traceback."""
    import subprocess

    pytest.importorskip("torch", reason="planning the recipes needs torch")
    pytest.importorskip("triton", reason="planning the recipes needs triton")
    bad = tmp_path / "bad.tunedb.jsonl.gz"
    bad.write_bytes(b"not gzip")
    for db, why in ((tmp_path / "missing.tunedb.jsonl.gz", "No such file"), (bad, "gzip")):
        proc = subprocess.run(
            [sys.executable, str(ROOT / "benchmarks" / "costmodel_eval.py"), "--add", str(db)],
            capture_output=True, text=True, timeout=300,
        )  # fmt: skip
        assert proc.returncode == 1, proc.stderr
        assert "Traceback" not in proc.stderr
        assert f"costmodel_eval: {db}: cannot read the tuning database" in proc.stderr
        assert why in proc.stderr


# the candidates' databases: (recipe, buckets, configs timed per bucket)
CANDIDATES = {
    "linear_splitk": ("linear_splitk", 10, {248}),
    "grouped_gemm": ("grouped_gemm", 5, {188}),
    "causal_conv1d": ("causal_conv1d", 4, {72}),
    "split_combine": ("split_combine", 10, {24, 28}),
    "w8_linear": ("w8_linear", 5, {204}),
    "bmm_sizes": ("bmm", 10, {176}),
}
CANDIDATE_DBS = ROOT / "benchmarks" / "data" / "h200-training-candidates"


def test_the_candidates_folder_holds_the_listed_databases_only() -> None:
    found = sorted(p.name.split(".")[0] for p in CANDIDATE_DBS.glob("*.tunedb.jsonl.gz"))
    assert found == sorted(CANDIDATES)


@pytest.mark.parametrize("stem", list(CANDIDATES))
def test_each_candidate_database_resolves_to_its_recipe(stem: str) -> None:
    """The committed measurements of the candidate training kernels (measured, left out of
    the training set: benchmarks/data/h200-training-candidates/README.md) are of the
    recipes' sources as they stand: every bucket resolves, with every config of its space
    timed."""
    pytest.importorskip("torch", reason="planning the training recipes needs torch")
    pytest.importorskip("triton", reason="planning the training recipes needs triton")
    from aot.costmodel.data import Catalog, groups, read_records

    recipe, buckets, per_bucket = CANDIDATES[stem]
    db = CANDIDATE_DBS / f"{stem}.tunedb.jsonl.gz"
    found = groups(read_records(db), db.name)
    assert len(found) == buckets
    catalog = Catalog([TRAINING / f"{recipe}.toml"])
    for group in found:
        resolved = catalog.resolve(group)
        assert resolved is not None, group.problem
        assert len(resolved.configs) in per_bucket, (group.kernel, group.problem)


def test_a_training_database_resolves_to_its_recipe(plans: dict[str, Any]) -> None:
    """Records as the tuner writes them on the H200 (a bucket read off a call value, a
    listed size) resolve to the recipe's instance, bucket and configs: the cost model's
    data set can featurise them."""
    from aot.costmodel.data import Catalog, groups
    from aot.tune.db import Record
    from aot.tune.decide import problem

    plan = plans["layernorm"]
    inst = plan.instances[0]
    bucket = inst.buckets[3]
    configs = inst.candidates(bucket)[:5]
    records = [
        Record(kernel=inst.kernel.name, source=plan.sources[inst.kernel.name].cache_key,
               triton="3.6.0", device="NVIDIA H200", arch="sm_90", dtypes=dict(inst.dtypes),
               problem=problem(inst, bucket), config=c.id, kind="bench", ok=True,
               ms=1.0 + i)
        for i, c in enumerate(configs)
    ]  # fmt: skip
    (group,) = groups(records, "layernorm.tunedb.jsonl.gz")
    resolved = Catalog([TRAINING / "layernorm.toml"]).resolve(group)
    assert resolved is not None
    assert resolved.bucket == bucket and resolved.gpu.name == "H200"
    assert {c.id for c in configs} <= resolved.configs.keys()


def test_the_gpu_script_sends_back_each_database_and_tabulates_it(tmp_path: Path) -> None:
    """benchmarks/run_training_on_gpu.sh without a GPU and with no recipe to build: what a
    stage left in its work folder comes back gzipped, and the last table counts it."""
    import gzip
    import os
    import shutil
    import subprocess

    work, out = tmp_path / "w", tmp_path / "out"
    (work / "logs").mkdir(parents=True)
    lines = [
        {"kernel": "k", "source": "s", "dtypes": {"T": "fp16"}, "problem": {"M": m},
         "config": c, "kind": kind, "ok": ok}
        for m in (1, 16) for c in ("a", "b", "c") for kind, ok in (("bench", c != "c"),)
    ]  # fmt: skip
    lines.append({**lines[0], "kind": "verify", "ok": True})
    text = "\n".join(json.dumps(x) for x in lines) + "\n"
    (work / "bmm.tunedb.jsonl").write_text(text)
    path = os.pathsep.join([str(Path(sys.executable).parent), os.environ["PATH"]])
    env = {**os.environ, "PATH": path, "W": str(work), "OUT": str(out), "KERNELS": "none"}
    assert shutil.which("bash")
    proc = subprocess.run(["bash", "benchmarks/run_training_on_gpu.sh"], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=300)  # fmt: skip
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert gzip.decompress((out / "training" / "bmm.tunedb.jsonl.gz").read_bytes()) == text.encode()
    assert "none: no benchmarks/training/none.toml" in proc.stdout
    row = next(x for x in proc.stdout.splitlines() if x.startswith("bmm.tunedb.jsonl"))
    assert row.split()[1:] == ["2", "4", "2-2", "2", "0", "1/1"], row


# the H100's databases (benchmarks/data/h100-training/README.md): the buckets of each
H100 = {"attention": 12, "bias_gelu": 10, "bmm": 15, "causal_conv1d": 4, "cross_entropy": 8,
        "grouped_gemm": 5, "layernorm": 10, "qk_norm": 10, "row_stats": 8, "split_combine": 10,
        "transpose": 4, "w8_linear": 5}  # fmt: skip
H100_DBS = ROOT / "benchmarks" / "data" / "h100-training"


def test_the_h100_folder_holds_every_training_recipes_database() -> None:
    found = sorted(p.name.split(".")[0] for p in H100_DBS.glob("*.tunedb.jsonl.gz"))
    assert found == sorted(H100)
    assert set(H100) == {p.stem for p in TRAINING.glob("*.toml")} - {"linear_splitk"}


@pytest.mark.parametrize("stem", list(H100))
def test_each_h100_database_times_every_config_of_its_recipe(stem: str) -> None:
    """The H100's measurements of the training recipes are of their sources as they stand,
    on an H100, with every candidate config timed at every bucket."""
    pytest.importorskip("torch", reason="planning the training recipes needs torch")
    pytest.importorskip("triton", reason="planning the training recipes needs triton")
    from aot.costmodel.data import Catalog, groups, read_records

    db = H100_DBS / f"{stem}.tunedb.jsonl.gz"
    found = groups(read_records(db), db.name)
    assert len(found) == H100[stem]
    catalog = Catalog([TRAINING / f"{stem}.toml"])
    for group in found:
        assert group.device == "NVIDIA H100 80GB HBM3"
        resolved = catalog.resolve(group)
        assert resolved is not None, group.problem
        assert set(group.times) == set(resolved.configs), (group.kernel, group.problem)


def test_the_candidates_script_names_a_folder_without_databases(tmp_path: Path) -> None:
    """benchmarks/costmodel_candidates.py --data on a folder holding no tuning database says
    so (exit 2, no traceback), rather than scoring nothing."""
    import subprocess

    proc = subprocess.run(
        [sys.executable, str(ROOT / "benchmarks" / "costmodel_candidates.py"), "--data",
         str(tmp_path)], capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert proc.returncode == 2, proc.stderr
    assert "Traceback" not in proc.stderr
    assert f"--data {tmp_path}: no *.tunedb.jsonl.gz there" in proc.stderr
