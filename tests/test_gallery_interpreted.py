"""The gallery kernels (recipes/gallery/), run on the CPU by Triton's interpreter.

Each kernel goes through its author's own host wrapper (as a service would call it with
Triton's JIT), once per config its @triton.autotune (or launcher table) can pick, at tiny
sizes chosen to leave ragged edges, and is compared with the float64 reference from
recipes/gallery/reference.py. Triton 3.6 reads TRITON_INTERPRET when ``@triton.jit``
decorates a function, so it is set while the kernel files are imported (here: for this
module's tests only; the interpreted modules get their own names). Also checked without
running a kernel: the recipes name real files, functions and references; every
``inputs`` gives as many arguments as its kernel has runtime parameters, on the meta
device too; autotune's pruning and the MoE alignment keep their promises.
"""

from __future__ import annotations

import contextlib
import json
import sys
import tomllib
import traceback
from collections.abc import Callable, Iterator
from functools import partial
from pathlib import Path
from typing import Any

import pytest

from tests.interpreted import run as interpreted_run
from tests.modules import load_module

torch = pytest.importorskip("torch", reason="the gallery's interpreted checks need torch")
pytest.importorskip("triton", reason="the gallery's interpreted checks need triton")

GALLERY = Path(__file__).resolve().parents[1] / "recipes" / "gallery"
RECIPES = sorted(GALLERY.glob("*.toml"))
RESULTS_MARK = "GALLERY-RESULTS "
TOL = {torch.float16: 1e-2, torch.bfloat16: 1e-2, torch.float32: 1e-4}


def _kernels() -> dict[str, dict[str, Any]]:
    found: dict[str, dict[str, Any]] = {}
    for path in RECIPES:
        for table in tomllib.loads(path.read_text())["kernel"]:
            found[table["name"]] = {**table, "recipe": path.name}
    return found


KERNELS = _kernels()


def _load_reference(name: str) -> Any:
    """recipes/gallery/reference.py, under its own module name (its folder importable)."""
    if str(GALLERY) not in sys.path:
        sys.path.insert(0, str(GALLERY))
    return load_module(GALLERY / "reference.py", name)


@pytest.fixture(scope="module")
def ref() -> Iterator[Any]:
    """reference.py in this process, for the checks that run no kernel."""
    with pytest.MonkeyPatch.context() as mp:
        mp.syspath_prepend(str(GALLERY))
        yield _load_reference("gallery_reference_for_tests")
        sys.modules.pop("gallery_reference_for_tests", None)


def _kernel_object(ref: Any, name: str) -> Any:
    file, _, function = KERNELS[name]["source"].rpartition(":")
    return getattr(ref.kernel_module(Path(file).stem), function)


@contextlib.contextmanager
def _only(autotuned: Any, config: Any) -> Iterator[None]:
    """Autotune over one config: Triton then launches it without benchmarking (which the
    interpreter cannot do) and without pruning."""
    saved = autotuned.configs
    autotuned.configs = [config]
    try:
        yield
    finally:
        autotuned.configs = saved


def _check(ref: Any, name: str, sizes: dict[str, int], dtype: str, config: Any = None) -> None:
    args = getattr(ref, f"{name}_inputs")(sizes, {"T": dtype}, device="cpu", config=config)
    expected = getattr(ref, f"{name}_reference")(*args)
    got = ref.CONVENTIONS[name].jit(args)()
    assert set(got) == set(expected), (name, sorted(got), sorted(expected))
    for out, want in expected.items():
        have = got[out].reshape(want.shape)
        assert torch.isfinite(have).all(), f"{name} {sizes} {dtype}: {out} has NaN/inf"
        err = float(torch.linalg.norm(have.double() - want) / torch.linalg.norm(want))
        assert err < TOL[have.dtype], f"{name} {sizes} {dtype} {config}: {out} rel. error {err:.2e}"


def _each_config(ref: Any, name: str, sizes: dict[str, int], dtypes: tuple[str, ...]) -> None:
    """Every config of the kernel's autotune, the first in every dtype, the rest in one."""
    kernel = _kernel_object(ref, name)
    for i, config in enumerate(kernel.configs):
        with _only(kernel, config):
            for dtype in dtypes if i == 0 else dtypes[:1]:
                _check(ref, name, sizes, dtype)


# -- the interpreted checks: registered here, run in one subprocess -----------------------------

Check = Callable[[Any], None]
CHECKS: dict[str, Check] = {}


def _register(check_id: str, fn: Check) -> None:
    assert check_id not in CHECKS, check_id
    CHECKS[check_id] = fn


for _sizes in ({"M": 37, "N": 130, "K": 72}, {"M": 1, "N": 64, "K": 256}):
    _register(
        f"matmul-M{_sizes['M']}",
        partial(_each_config, name="matmul", sizes=_sizes, dtypes=("bf16", "fp16")),
    )
# ragged K, and K a multiple of most BLOCK_K * SPLIT_K (EVEN_K both ways)
for _k in (200, 512):
    _register(
        f"splitk-K{_k}",
        partial(
            _each_config, name="splitk", sizes={"M": 19, "N": 130, "K": _k}, dtypes=("bf16", "fp16")
        ),
    )
# ragged rows, and rows a whole number of most blocks (EVEN_N both ways)
for _n in (2500, 4096):
    _register(
        f"softmax-N{_n}",
        partial(
            _each_config, name="softmax", sizes={"n_rows": 3, "n_cols": _n}, dtypes=("fp32", "bf16")
        ),
    )
for _name in ("act_mul_silu", "act_mul_gelu", "act_mul_none"):
    _register(
        _name,
        partial(
            _each_config, name=_name, sizes={"n_rows": 3, "n_cols": 600}, dtypes=("bf16", "fp16")
        ),
    )


def _linear(ref: Any, bias: bool) -> None:
    kernel = _kernel_object(ref, "linear")
    real_inputs = ref.linear_inputs

    def inputs(*a: Any, **kw: Any) -> list[Any]:
        args: list[Any] = real_inputs(*a, **kw)
        if not bias:
            args[2] = None  # as the author's wrapper passes it: linear(x, w, None)
        return args

    ref.linear_inputs = inputs
    try:
        for config in kernel.configs:
            with _only(kernel, config):
                _check(ref, "linear", {"M": 21, "N": 70, "K": 48}, "bf16")
    finally:
        ref.linear_inputs = real_inputs


_register("linear-bias", partial(_linear, bias=True))
_register("linear-no-bias", partial(_linear, bias=False))


def _rmsnorm(ref: Any, n_cols: int) -> None:
    for dtype in ("bf16", "fp16"):
        _check(ref, "rmsnorm", {"n_rows": 5, "n_cols": n_cols}, dtype)


for _n in (40, 1000, 4096):
    _register(f"rmsnorm-N{_n}", partial(_rmsnorm, n_cols=_n))


def _moe(ref: Any) -> None:
    mod = ref.kernel_module("moe")
    table = mod.MOE_CONFIGS
    distinct = {tuple(sorted(c.items())): c for c in table.values()}.values()
    try:
        for config in distinct:
            mod.MOE_CONFIGS = {1: config}  # the launcher's table, down to this entry
            for tokens in (1, 7):
                # The inputs are aligned for another block size than the launcher's: the
                # launcher realigns them, as it would from the router's output.
                sizes = {"num_tokens": tokens, "N": 48, "K": 40, "num_experts": 4}
                _check(ref, "moe", sizes, "bf16", config={"BLOCK_SIZE_M": 32})
    finally:
        mod.MOE_CONFIGS = table


_register("moe", _moe)


def _patch_interpreter() -> None:
    """Two defects of Triton 3.6's interpreter, worked around here only:

    - it holds a scalar as a one-element 1-D array and makes it a Python int (for a
      ``range(0, K, ...)`` loop in a kernel) with ``int(array)``, which NumPy 2.4 refuses
      for arrays with a dimension: read the element instead;
    - its ``tl.dot`` multiplies bf16 operands as their raw uint16 storage: widen them to
      fp32 first (exact), as the GPU's tensor cores do;
    - it casts an integer to bf16 by storing the integer as the bf16's raw uint16 bits (an
      int8 weight dequantized to bf16 reads as a NaN or a denormal): go through fp32, as
      its own fp32 to bf16 cast rounds.
    """
    import numpy as np
    import triton.language as tl
    from triton.runtime import interpreter

    try:
        int(np.array([1]))
    except TypeError:
        original_patch = interpreter._patch_lang_tensor

        def patch(tensor: Any, scope: Any) -> None:
            original_patch(tensor, scope)
            scope.set_attr(tensor, "__index__", lambda self: int(self.handle.data.reshape(-1)[0]))

        interpreter._patch_lang_tensor = patch

    builder = interpreter.InterpreterBuilder
    original_dot = builder.create_dot

    def widen(h: Any) -> Any:
        if h.dtype.scalar != tl.bfloat16:
            return h
        wide = (h.data.astype(np.uint32) << 16).view(np.float32)
        return interpreter.TensorHandle(wide, tl.float32)

    def create_dot(self: Any, a: Any, b: Any, *rest: Any) -> Any:
        return original_dot(self, widen(a), widen(b), *rest)

    builder.create_dot = create_dot

    def int_to_fp(self: Any, src: Any, dst_type: Any) -> Any:
        if dst_type.scalar != tl.bfloat16:
            return self.cast_impl(src, dst_type)
        wide = interpreter.TensorHandle(src.data.astype(np.float32), tl.float32)
        return self.cast_impl(wide, dst_type)

    builder.create_si_to_fp = builder.create_ui_to_fp = int_to_fp


def _child() -> None:
    """In the interpreted subprocess: run every check, print {id: error text or null}."""
    _patch_interpreter()
    ref = _load_reference("gallery_reference_interpreted")
    results: dict[str, str | None] = {}
    for check_id, fn in CHECKS.items():
        try:
            fn(ref)
            results[check_id] = None
        except Exception:  # reported per check by the parent
            results[check_id] = traceback.format_exc(limit=-3)
    print(RESULTS_MARK + json.dumps(results))


@pytest.fixture(scope="module")
def interpreted() -> dict[str, str | None]:
    # Set before Triton is imported: its own library (tl.cdiv, tl.sigmoid, ...) is
    # decorated at import, and only interpreted versions run under the interpreter.
    results: dict[str, str | None] = interpreted_run(__file__, RESULTS_MARK, GALLERY.parents[1])
    return results


@pytest.mark.parametrize("check_id", list(CHECKS))
def test_interpreted_matches_reference(interpreted: dict[str, str | None], check_id: str) -> None:
    error = interpreted[check_id]
    if error is not None:
        pytest.fail(f"{check_id} under TRITON_INTERPRET=1:\n{error}", pytrace=False)


def test_splitk_even_k_heuristic_reads_the_config(ref: Any) -> None:
    rule = _kernel_object(ref, "splitk").fn.values["EVEN_K"]
    assert rule({"K": 512, "BLOCK_K": 128, "SPLIT_K": 4}) is True
    assert rule({"K": 512, "BLOCK_K": 128, "SPLIT_K": 8}) is False


def test_moe_inputs_refuse_without_a_block_size(ref: Any) -> None:
    with pytest.raises(ValueError, match="BLOCK_SIZE_M"):
        ref.moe_inputs({"num_tokens": 3, "N": 8, "K": 8}, {"T": "bf16"}, device="cpu")


@pytest.mark.parametrize("block", [16, 64])
def test_moe_alignment(ref: Any, block: int) -> None:
    torch.manual_seed(0)
    experts, top_k, tokens = 8, 2, 37
    topk_ids = torch.stack([torch.randperm(experts)[:top_k] for _ in range(tokens)])
    ids, blocks, used = ref.moe_align_block_size(topk_ids, block, experts)
    pairs = tokens * top_k
    assert ids.shape[0] == pairs + experts * (block - 1)
    assert sorted(ids[ids < pairs].tolist()) == list(range(pairs))  # every pair exactly once
    n_used = int(used[0])
    assert n_used % block == 0 and (ids[n_used:] == pairs).all()
    flat = topk_ids.reshape(-1)
    for b in range(n_used // block):
        live = ids[b * block : (b + 1) * block]
        live = live[live < pairs].long()
        assert (flat[live] == blocks[b]).all(), f"block {b} mixes experts"
    routing, found_block = ref.moe_routing(
        ref._moe_args(
            torch.empty(tokens, 4),
            torch.empty(experts, 4, 4),
            torch.empty(pairs, 4),
            torch.empty(pairs),
            ids,
            blocks,
            used,
        )
    )
    assert found_block == block and torch.equal(routing, topk_ids)


def test_matmul_prune_keeps_tiles_that_fit_m(ref: Any) -> None:
    mod = ref.kernel_module("matmul")
    for m in KERNELS["matmul"]["buckets"]["M"]:
        kept = mod.prune_by_m(mod.MATMUL_CONFIGS, {"M": m})
        assert kept, f"M={m}: nothing left to tune"
        tallest = max(16, 1 << (m - 1).bit_length())
        assert all(c.kwargs["BLOCK_M"] <= tallest for c in kept), m


def test_rmsnorm_settings_cover_the_row(ref: Any) -> None:
    mod = ref.kernel_module("rmsnorm")
    for n in (1, 40, 4096, 5000, 8192):
        block, warps = mod.calculate_settings(n)
        assert block >= n and block & (block - 1) == 0 and warps in (4, 8, 16, 32)


@pytest.mark.parametrize("name", sorted(KERNELS))
def test_recipe_names_what_exists(ref: Any, name: str) -> None:
    table = KERNELS[name]
    assert "signature" not in table, f"{table['recipe']}: the signature must be inferred"
    assert name in ref.CONVENTIONS, f"reference.py has no convention for {name}"
    for key in ("inputs", "reference"):
        file, _, function = table[key].rpartition(":")
        assert file == "reference.py" and callable(getattr(ref, function, None)), table[key]
    kernel = _kernel_object(ref, name)
    assert hasattr(kernel, "run"), f"{table['source']} is not a Triton kernel object"
    bundle = tomllib.loads((GALLERY / table["recipe"]).read_text())["bundle"]
    assert bundle["targets"] == ["sm_80", "sm_90"]


@pytest.mark.parametrize("name", sorted(KERNELS))
def test_inputs_match_the_kernel_parameters(ref: Any, name: str) -> None:
    """What signature inference will see: one value per runtime parameter, also on "meta"
    (at the largest bucket, where the builder checks integer widths)."""
    table = KERNELS[name]
    params = ref.runtime_params(_kernel_object(ref, name))
    sizes = {k: v for k, v in table.get("sizes", {}).items() if not isinstance(v, str)}
    sizes = {k: v[-1] if isinstance(v, list) else v for k, v in sizes.items()}
    sizes.update({k: v[-1] for k, v in table["buckets"].items()})
    dtype = table["dtypes"]["T"][-1]
    args = getattr(ref, f"{name}_inputs")(sizes, {"T": dtype}, device="meta")
    assert len(args) == len(params), (name, params, len(args))
    for param, arg in zip(params, args, strict=True):
        if param.endswith("_ptr"):
            assert arg is None or arg.device.type == "meta", (name, param)
        else:
            assert isinstance(arg, int | float) and not isinstance(arg, bool), (name, param, arg)
    for optional in ref.CONVENTIONS[name].optional:
        assert optional in params and optional in table.get("optional", []), optional


if __name__ == "__main__":
    _child()
