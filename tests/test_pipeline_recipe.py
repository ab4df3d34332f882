"""Pipelines at build time: recipes/mlp.toml parses into the expected plan, and a table of
bad pipelines (each an edit of the good recipe) with the message each must produce."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from aot.errors import RecipeError
from aot.recipe import load
from loader import manifest as mf

RECIPES = Path(__file__).resolve().parents[1] / "recipes"
GOOD = (RECIPES / "mlp.toml").read_text()


def write(tmp_path: Path, text: str) -> Path:
    """The recipe in a folder of its own that sees the real kernels."""
    kernels = tmp_path / "kernels"
    if not kernels.exists():
        os.symlink(RECIPES / "kernels", kernels)
    path = tmp_path / "mlp.toml"
    path.write_text(text)
    return path


def test_mlp_recipe_infers_every_integer_argument(tmp_path: Path) -> None:
    (spec,) = load(write(tmp_path, GOOD)).pipelines
    assert spec.dims == ("M",) and spec.buckets[0][-1] == 4096
    assert [t.role for t in spec.tensors] == [
        "input", "weight", "weight", "weight", "scratch", "scratch", "scratch", "output",
    ]  # fmt: skip
    steps = {s.kernel: s.args for s in spec.steps}
    assert steps["rmsnorm"] == ("x", "w_norm", "h", "M", "4096", "4096", "4096", 1e-5)
    assert steps["gate_up"] == (
        "h", "w_gate_up", "gu", "M", "28672", "4096", "4096", "1", "28672", "1", "28672", "1",
    )  # fmt: skip
    assert steps["silu_mul"] == ("gu", "act", "M", "14336", "28672", "14336")
    assert steps["down"][:4] == ("act", "w_down", "x", "out")
    # The manifest form round-trips.
    assert mf.PipelineSpec.from_json(spec.to_json(), "p") == spec


def test_a_symbolic_scratch_gets_symbolic_strides(tmp_path: Path) -> None:
    text = GOOD.replace(
        'gu = { role = "scratch", dtype = "bf16", shape = ["M", 28672] }',
        'gu = { role = "scratch", dtype = "bf16", shape = ["M", 28672] }\n'
        'big = { role = "scratch", dtype = "bf16", shape = ["M", "M"] }',
    ) + (
        '\n[[pipeline.step]]\nkernel = "rmsnorm"\n'
        'args = { x_ptr = "big", w_ptr = "w_norm", out_ptr = "big", N = "M", eps = 1e-5 }\n'
    )
    # rmsnorm's w_ptr is [N] = [M] but w_norm is [4096]: found at M=1.
    with pytest.raises(RecipeError, match=r"'w_norm' has shape \[4096\] at M=1"):
        load(write(tmp_path, text))


CASES = [
    (
        "unknown kernel",
        'kernel = "silu_mul"',
        'kernel = "silu_mull"',
        ["mlp.step[2].kernel", "no kernel named 'silu_mull'", "did you mean 'silu_mul'"],
    ),
    (
        "unknown tensor",
        'gu_ptr = "gu"',
        'gu_ptr = "gux"',
        ["step[2] (silu_mul).args.gu_ptr", "'gux' is not a tensor", "did you mean 'gu'?"],
    ),
    (
        "shape disagrees",
        "shape = [14336, 4096] }",
        "shape = [14336, 4000] }",
        ["step[3] (down).args.r_ptr", "'x' has shape [1, 4096] at M=1", "[M, N] = [1, 4000]"],
    ),
    (
        "dtype the kernel lacks",
        'act = { role = "scratch", dtype = "bf16"',
        'act = { role = "scratch", dtype = "fp16"',
        ["step[2] (silu_mul).args.out_ptr", "'act' is fp16", "add fp16 to its dtypes"],
    ),
    (
        "read before write",
        'out_ptr = "h", eps',
        'out_ptr = "out", eps',
        ["step[1] (gate_up).args.a_ptr", "reads 'h' (scratch) before any step writes it"],
    ),
    (
        "writes an input",
        'r_ptr = "x", c_ptr = "out"',
        'r_ptr = "x", c_ptr = "x"',
        ["step[3] (down).args.c_ptr", "writes 'x', a pipeline input", "read-only"],
    ),
    (
        "float argument missing",
        'out_ptr = "h", eps = 1e-5 }',
        'out_ptr = "h" }',
        ["step[0] (rmsnorm).args.eps", "give eps (fp32) a number"],
    ),
    (
        "unknown argument",
        "eps = 1e-5 }",
        "epsilon = 1e-5 }",
        ["step[0] (rmsnorm).args.epsilon", "no argument 'epsilon'; did you mean 'eps'?"],
    ),
    (
        "explicit stride disagrees",
        'c_ptr = "gu" }',
        'c_ptr = "gu", stride_am = 4000 }',
        ["step[1] (gate_up).args.a_ptr", "strides [4096, 1] at M=1", "given strides [4000, 1]"],
    ),
    (
        "argument not inferable",
        'shapes = { x_ptr = ["M", "N"], w_ptr = ["N"], out_ptr = ["M", "N"] }',
        'shapes = { x_ptr = ["M", "N + 0"], w_ptr = ["N + 0"], out_ptr = ["M", "N + 0"] }',
        ["step[0] (rmsnorm).args", "N cannot be read off the tensors' shapes; give N = ..."],
    ),
    (
        "kernel without shapes",
        'shapes = { x_ptr = ["M", "N"], w_ptr = ["N"], out_ptr = ["M", "N"] }\n'
        'strides = { x_ptr = ["stride_x", 1], out_ptr = ["stride_out", 1] }\n',
        "",
        ["step[0] (rmsnorm).args.x_ptr", "[[kernel]] rmsnorm declares no shape for x_ptr"],
    ),
    (
        "bucket dimension not leading",
        'x = { role = "input", dtype = "bf16", shape = ["M", 4096] }',
        'x = { role = "input", dtype = "bf16", shape = [4096, "M"] }',
        ["[[pipeline]] mlp.tensors.x.shape", "only variable dimension is its first"],
    ),
    (
        "no input carries the dimension",
        'x = { role = "input", dtype = "bf16", shape = ["M", 4096] }',
        'x = { role = "input", dtype = "bf16", shape = [1, 4096] }',
        ["[[pipeline]] mlp.buckets.M", "no input tensor has M as its first dimension"],
    ),
    (
        "unused tensor",
        'h = { role = "scratch"',
        'spare = { role = "scratch", dtype = "bf16", shape = ["M"] }\nh = { role = "scratch"',
        ["[[pipeline]] mlp.tensors.spare: no step uses it; remove it"],
    ),
    (
        "weight with a bucket dimension",
        'w_norm = { role = "weight", dtype = "bf16", shape = [4096] }',
        'w_norm = { role = "weight", dtype = "bf16", shape = ["M"] }',
        ["tensors.w_norm.shape", "a weight's shape must be fixed numbers"],
    ),
    (
        "unknown role",
        'x = { role = "input"',
        'x = { role = "inupt"',
        ["tensors.x.role", "'inupt': use one of input, output, weight, scratch"],
    ),
    (
        "unknown name in a shape",
        'out = { role = "output", dtype = "bf16", shape = ["M", 4096] }',
        'out = { role = "output", dtype = "bf16", shape = ["B", 4096] }',
        ["tensors.out.shape", "unknown name(s) B", "dimensions are M"],
    ),
    (
        "writes names a non-pointer",
        'writes = ["out_ptr"]\nspace = { BLOCK_N',
        'writes = ["M"]\nspace = { BLOCK_N',
        ["[[kernel]] rmsnorm.writes", "'M' is not a pointer argument"],
    ),
    (
        "kernel shape reads an unknown name",
        'w_ptr = ["N"], out_ptr = ["M", "N"] }',
        'w_ptr = ["Q"], out_ptr = ["M", "N"] }',
        ["[[kernel]] rmsnorm.shapes.w_ptr", "unknown name(s) Q"],
    ),
    (
        "no steps",
        "[[pipeline.step]]",
        "[[pipeline.stop]]",
        ["[[pipeline]] mlp.stop: unknown key; did you mean 'step'?"],
    ),
    (
        "bucket bounds not increasing",
        '[[pipeline]]\nname = "mlp"\nbuckets = { M = [1, 2,',
        '[[pipeline]]\nname = "mlp"\nbuckets = { M = [2, 1,',
        ["[[pipeline]] mlp.buckets.M", "must be strictly increasing"],
    ),
]


@pytest.mark.parametrize("old, new, fragments", [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_bad_pipeline(tmp_path: Path, old: str, new: str, fragments: list[str]) -> None:
    assert old in GOOD, old
    with pytest.raises(RecipeError) as e:
        load(write(tmp_path, GOOD.replace(old, new, 1)))
    message = str(e.value)
    assert str(tmp_path / "mlp.toml") in message
    for fragment in fragments:
        assert fragment in message, (fragment, message)
