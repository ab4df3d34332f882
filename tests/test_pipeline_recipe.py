"""Pipelines at build time: recipes/mlp.toml parses into the expected plan, and a table of
bad pipelines (each an edit of the good recipe) with the message each must produce."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from aot.errors import RecipeError
from aot.recipe import load
from loader import manifest as mf

from .conftest import expect_recipe

RECIPES = Path(__file__).resolve().parents[1] / "recipes"
GOOD = (RECIPES / "mlp.toml").read_text()
# rmsnorm's grid and sizes, and the same launched over a keyword call value ``rows``
RMS_GRID = GOOD[GOOD.index('grid = "M"') : GOOD.index("sizes = { N = 4096 }") + 20]
ROWS_GRID = RMS_GRID.replace('grid = "M"', 'grid = "rows"\ncall = { rows = "keyword" }').replace(
    "sizes = { N = 4096 }", "sizes = { N = 4096, rows = 4096 }"
)


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


def test_call_values_follow_the_arguments_and_shapes_may_have_any_size(tmp_path: Path) -> None:
    """A step gives a keyword call value as an expression (after the arguments, in the
    manifest), and a kernel's "*" dimension takes the tensor's size unchecked; a pad value
    is kept for its input."""
    text = GOOD.replace(RMS_GRID, ROWS_GRID, 1)
    text = text.replace(
        'shapes = { x_ptr = ["M", "N"], w_ptr = ["N"]',
        'shapes = { x_ptr = ["M", "N"], w_ptr = ["*"]',
        1,
    )
    text = text.replace(
        'w_norm = { role = "weight", dtype = "bf16", shape = [4096] }',
        'w_norm = { role = "weight", dtype = "bf16", shape = [8192] }',
        1,
    )
    text = text.replace(
        'x = { role = "input", dtype = "bf16", shape = ["M", 4096] }',
        'x = { role = "input", dtype = "bf16", shape = ["M", 4096], pad = 0.5 }',
        1,
    )
    text = text.replace(
        'out_ptr = "h", eps = 1e-5 }', 'out_ptr = "h", eps = 1e-5, rows = "2 * M" }', 1
    )
    (spec,) = load(write(tmp_path, text)).pipelines
    rmsnorm = next(s for s in spec.steps if s.kernel == "rmsnorm")
    assert rmsnorm.args == ("x", "w_norm", "h", "M", "4096", "4096", "4096", 1e-5, "2 * M")
    assert spec.tensor("x").pad == 0.5 and spec.tensor("h").pad is None
    assert mf.PipelineSpec.from_json(spec.to_json(), "p") == spec


def test_a_state_tensor_is_bound_like_a_weight_and_may_be_written(tmp_path: Path) -> None:
    # A state (a KV cache, say) is read before any step writes it, as a weight is.
    recipe = load(write(tmp_path, GOOD.replace('w_norm = { role = "weight"',
                                               'w_norm = { role = "state"', 1)))  # fmt: skip
    (pipeline,) = recipe.pipelines
    assert {t.name: t.role for t in pipeline.tensors}["w_norm"] == "state"


CASES = [
    (
        "a state of symbolic shape",
        'w_norm = { role = "weight", dtype = "bf16", shape = [4096] }',
        'w_norm = { role = "state", dtype = "bf16", shape = ["M"] }',
        ["mlp.tensors.w_norm.shape", "a state's shape must be fixed numbers"],
    ),
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
    (
        "float argument not finite",
        'out_ptr = "h", eps = 1e-5 }',
        'out_ptr = "h", eps = nan }',
        ["step[0] (rmsnorm).args.eps: nan: give eps (fp32) a finite number"],
    ),
    (
        "float argument past a double",
        'out_ptr = "h", eps = 1e-5 }',
        'out_ptr = "h", eps = 1' + "0" * 400 + " }",
        ["step[0] (rmsnorm).args.eps: ", "give eps (fp32) a finite number"],
    ),
    # Found by tests/test_fuzz_recipe.py: ZeroDivisionError tracebacks, a RecursionError.
    (
        "kernel stride divides by zero",
        'r_ptr = ["stride_cm", "stride_cn"]',
        'r_ptr = ["stride_cm // 0", "stride_cn"]',
        ["[[kernel]] down.strides.r_ptr: 'stride_cm // 0' divides by zero at M=1"],
    ),
    (
        "tensor shape divides by zero",
        'h = { role = "scratch", dtype = "bf16", shape = ["M", 4096] }',
        'h = { role = "scratch", dtype = "bf16", shape = ["M", "4096 // (M - 1)"] }',
        ["step[0] (rmsnorm).args.stride_out: '(4096 // (M - 1))' divides by zero at M=1"],
    ),
    (
        "constant shape divides by zero",
        'w_norm = { role = "weight", dtype = "bf16", shape = [4096] }',
        'w_norm = { role = "weight", dtype = "bf16", shape = [4096, "1 // 0"] }',
        ["[[pipeline]] mlp.tensors.w_norm.shape: [4096, '1 // 0'] divides by zero"],
    ),
    (
        "kernel shape nested too deep",
        'w_ptr = ["N"], out_ptr = ["M", "N"] }',
        'w_ptr = ["' + "-" * 900 + 'N"], out_ptr = ["M", "N"] }',
        ["[[kernel]] rmsnorm.shapes.w_ptr", "is nested more than 100 levels deep"],
    ),
    (
        "tensor of too many dimensions",
        'w_norm = { role = "weight", dtype = "bf16", shape = [4096] }',
        'w_norm = { role = "weight", dtype = "bf16", shape = [' + "1, " * 20 + "4096] }",
        ["[[pipeline]] mlp.tensors.w_norm.shape: has 21 dimensions; at most 16"],
    ),
    (
        "a condition no bucket meets",
        'kernel = "rmsnorm"\nargs = { x_ptr = "x"',
        'kernel = "rmsnorm"\nwhen = "M > 100000"\nargs = { x_ptr = "x"',
        ["mlp.step[0] (rmsnorm).when: 'M > 100000' holds at no bucket: the step would never run"],
    ),
    (
        "a condition reading no dimension",
        'kernel = "rmsnorm"\nargs = { x_ptr = "x"',
        'kernel = "rmsnorm"\nwhen = "N > 1"\nargs = { x_ptr = "x"',
        [
            "mlp.step[0] (rmsnorm).when: unknown name(s) N; a step's condition reads the "
            "pipeline's dimensions M"
        ],
    ),
    (
        "a scratch written at some buckets only",
        'kernel = "rmsnorm"\nargs = { x_ptr = "x"',
        'kernel = "rmsnorm"\nwhen = "M <= 16"\nargs = { x_ptr = "x"',
        ["mlp.step[1] (gate_up).args.a_ptr: reads 'h' (scratch) before any step writes it at M=32"],
    ),
    (
        "a padded weight",
        'w_norm = { role = "weight", dtype = "bf16", shape = [4096] }',
        'w_norm = { role = "weight", dtype = "bf16", shape = [4096], pad = 0 }',
        ["mlp.tensors.w_norm.pad: only an input is padded", "remove pad"],
    ),
    (
        "a pad the dtype cannot hold",
        'x = { role = "input", dtype = "bf16", shape = ["M", 4096] }',
        'x = { role = "input", dtype = "bf16", shape = ["M", 4096], pad = 1e39 }',
        ["mlp.tensors.x.pad: 1e+39 is not a bf16 value"],
    ),
    (
        "a pad that is no number",
        'x = { role = "input", dtype = "bf16", shape = ["M", 4096] }',
        'x = { role = "input", dtype = "bf16", shape = ["M", 4096], pad = "-1" }',
        ["mlp.tensors.x.pad: '-1': give a number of x's dtype (bf16)"],
    ),
    (
        "a stride of any size",
        'strides = { x_ptr = ["stride_x", 1], out_ptr = ["stride_out", 1] }',
        'strides = { x_ptr = ["*", 1], out_ptr = ["stride_out", 1] }',
        ['[[kernel]] rmsnorm.strides.x_ptr: "*" is for shapes (a dimension of any size)'],
    ),
    (
        "a keyword call value the step does not give",
        RMS_GRID,
        ROWS_GRID,
        [
            "mlp.step[0] (rmsnorm).args.rows: missing: rows is a call value of rmsnorm (passed "
            "by keyword); give rows = ... in args"
        ],
    ),
    (
        "a step using a kernel with host values",
        'grid = "M"\ndtypes = { T = ["bf16"] }\nsignature = { x_ptr',
        'grid = "M"\nhost = ["BLOCK_N"]\ndtypes = { T = ["bf16"] }\nsignature = { x_ptr',
        ["mlp.step[0] (rmsnorm).kernel: rmsnorm has host values (BLOCK_N)"],
    ),
]


@pytest.mark.parametrize("old, new, fragments", [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_bad_pipeline(tmp_path: Path, old: str, new: str, fragments: list[str]) -> None:
    assert old in GOOD, old
    path = write(tmp_path, GOOD.replace(old, new, 1))
    assert path == tmp_path / "mlp.toml" and fragments
    expect_recipe(path, fragments)


def test_pipelines_too_big_to_check_are_refused_before_checking(tmp_path: Path) -> None:
    # Each pipeline is within the 4,096 combinations a pipeline may have, but checking five
    # of them, 4,000 combinations × 4 steps each, would take minutes.
    head, pipeline = GOOD.split("[[pipeline]]\n", 1)
    many = "[1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024, 2048, 4096]"
    assert many in pipeline
    pipeline = pipeline.replace(many, str(list(range(1, 4001))))
    text = head + "".join(
        "[[pipeline]]\n" + pipeline.replace('name = "mlp"', f'name = "mlp{i}"') for i in range(5)
    )
    with pytest.raises(RecipeError, match=r"\[\[pipeline\]\]: 80,000 \(bucket combination, "
                       r"step\) pairs to check; at most 65,536 in all"):  # fmt: skip
        load(write(tmp_path, text))


class _Weight:
    """A bf16 weight the fake driver never reads: an address and a shape suffice."""

    def __init__(self, *shape: int):
        self.shape, self.dtype, self.is_cuda = shape, "torch.bfloat16", True

    def data_ptr(self) -> int:
        return 0x7F0000000000

    def is_contiguous(self) -> bool:
        return True


def test_mlp_bundle_builds_and_its_pipeline_resolves(tmp_path: Path, compile_cache: Path) -> None:
    """recipes/mlp.toml built on this CPU machine: `aotc inspect` shows the resolved steps,
    and on the fake driver the captured graph holds the four kernels with those values."""
    import ctypes
    import subprocess
    import sys

    import loader
    from loader import driver
    from tests.fakecuda import FakeLib

    env = {**os.environ, "AOTC_CACHE_DIR": str(compile_cache), "AOTC_NO_PROGRESS": "1"}
    out = tmp_path / "mlp.aotc"
    cmd = [sys.executable, "-m", "aot.cli"]
    r = subprocess.run([*cmd, "build", str(RECIPES / "mlp.toml"), "-o", str(out)], env=env,
                       capture_output=True, text=True)  # fmt: skip
    assert r.returncode == 0, r.stderr
    r = subprocess.run([*cmd, "inspect", str(out)], env=env, capture_output=True, text=True)
    assert "pipeline mlp(x[M, 4096] bf16) -> out[M, 4096] bf16" in r.stdout
    assert "1. gate_up(h, w_gate_up, gu, M, 28672, 4096, 4096, 1, 28672, 1, 28672, 1)" in r.stdout

    fake = FakeLib()
    driver.install(driver.Driver(fake))
    try:
        with loader.open(out) as b:
            mlp = b.pipeline("mlp", w_norm=_Weight(4096), w_gate_up=_Weight(4096, 28672),
                             w_down=_Weight(14336, 4096))  # fmt: skip
            x, y = (
                ctypes.create_string_buffer(3 * 4096 * 2),
                ctypes.create_string_buffer(3 * 4096 * 2),
            )

            class T(_Weight):
                def __init__(self, buf: ctypes.Array[ctypes.c_char]):
                    super().__init__(3, 4096)
                    self.buf = buf

                def data_ptr(self) -> int:
                    return ctypes.addressof(self.buf)

            mlp(T(x), T(y))
            launches = [launch for launch in fake.launches if launch.replayed]
            names = [fake.functions[launch.function] for launch in launches]
            assert names == ["rmsnorm_kernel", "matmul_kernel", "silu_mul_kernel",
                             "matmul_residual_kernel"]  # fmt: skip
            gate_up = launches[1].params  # specialized: a, b, c, M, N, K, stride_am, ...
            assert gate_up[1] == 0x7F0000000000 and [w & 0xFFFFFFFF for w in gate_up[3:6]] == [
                4, 28672, 4096,
            ]  # fmt: skip
    finally:
        driver.install(None)
