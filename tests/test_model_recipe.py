"""The [model] table: a table of bad recipes and the message each must produce. Parsing
imports no torch, so these run everywhere."""

from __future__ import annotations

from pathlib import Path

import pytest

from aot.errors import RecipeError
from aot.recipe import load
from loader import manifest as mf

from .conftest import expect_recipe

DATA = Path(__file__).parent / "data" / "model"
BASE = (DATA / "tiny.toml").read_text()

CASES = [
    (
        "key typo",
        'dtype = "fp32"',
        'dtyp = "fp32"',
        ["[model].dtyp: unknown key; did you mean 'dtype'?"],
    ),
    ("dtype", 'dtype = "fp32"', 'dtype = "float32"', ["[model].dtype: 'float32': use one of fp16"]),
    ("no source", 'source = "tiny.py:make_layer"\n', "", ["[model].source: missing"]),
    ("source form", "tiny.py:make_layer", "tiny.py", ["'path/to/file.py:function_name'"]),
    ("source file", "tiny.py:make_layer", "nope.py:make_layer", ["nope.py does not exist"]),
    ("no inputs", 'inputs = { x = ["batch", "seq", 32] }\n', "", ["[model].inputs: missing"]),
    (
        "unknown dim",
        'x = ["batch", "seq", 32]',
        'x = ["batch", "tokens", 32]',
        ["[model].inputs.x: dimension 'tokens' has no buckets; declare it under [model].buckets"],
    ),
    (
        "bad size",
        'x = ["batch", "seq", 32]',
        'x = ["batch", "seq", 0]',
        ["0 is below the minimum 1"],
    ),
    (
        "unused dim",
        "seq = [8, 16] }",
        "seq = [8, 16], heads = [2] }",
        ["[model].buckets.heads: no input uses this dimension"],
    ),
    (
        "bucket order",
        "seq = [8, 16]",
        "seq = [16, 8]",
        ["[model].buckets.seq", "strictly increasing"],
    ),
    (
        "pad unknown",
        'pad = ["batch", "seq"]',
        'pad = ["batch", "tokens"]',
        ["[model].pad: 'tokens' is not a dimension"],
    ),
    (
        "pad twice",
        'pad = ["batch", "seq"]',
        'pad = ["batch", "batch"]',
        ["lists a dimension twice"],
    ),
    (
        "pad needs outputs",
        'outputs = [["batch", "seq", 32]]\n',
        "",
        ["[model].outputs: missing; with pad, give each output's shape"],
    ),
    ("no pad no outputs", 'pad = ["batch", "seq"]\noutputs = [["batch", "seq", 32]]\n', "", []),
    (
        "mode",
        'mode = "default"',
        'mode = "fast"',
        ["[model].mode: 'fast': use one of default, max-autotune, or a list of them"],
    ),
    (
        "mode list, one unknown",
        'mode = "default"',
        'mode = ["default", "fast"]',
        ["[model].mode[1]: 'fast': use one of default, max-autotune, or a list of them"],
    ),
    ("mode twice", 'mode = "default"', 'mode = ["default", "default"]', ["list each mode once"]),
    ("mode list, empty", 'mode = "default"', "mode = []", ["list each mode once, at least one"]),
    (
        "backend",
        'backend = "inductor"',
        'backend = "tensorrt"',
        ["[model].backend: 'tensorrt': use one of inductor, aoti"],
    ),
    (
        "select",
        'select = "compiled"',
        'select = "eager"',
        ["[model].select: 'eager': use one of fastest, compiled"],
    ),
    (
        "inductor backend at max-autotune",
        'mode = "default"',
        'mode = "max-autotune"',
        ['[model].backend: "inductor" with mode "max-autotune"', 'backend = "aoti"'],
    ),
    (
        "tolerance",
        'mode = "default"',
        "tolerance = 2",
        ["[model].tolerance: 2 must be a number between 0 and 1"],
    ),
    (
        "int input",
        'x = ["batch", "seq", 32]',
        'x = { shape = ["batch", "seq"], dtype = "i64" }',
        ["[model].inputs.x.dtype: 'i64'", "integer inputs are not supported yet"],
    ),
    (
        "input table",
        'x = ["batch", "seq", 32]',
        'x = { shape = ["batch", "seq", 32], dtype = "fp16" }',
        [],
    ),
    (
        "kwargs table",
        "kwargs = { d_model = 32, heads = 2, ffn = 64 }",
        "kwargs = 3",
        ["[model].kwargs: must be a table"],
    ),
]


@pytest.mark.parametrize(
    ("old", "new", "fragments"), [c[1:] for c in CASES], ids=[c[0] for c in CASES]
)
def test_bad_model_recipe(tmp_path: Path, old: str, new: str, fragments: list[str]) -> None:
    assert old in BASE, old
    (tmp_path / "tiny.py").write_text((DATA / "tiny.py").read_text())
    path = tmp_path / "recipe.toml"
    path.write_text(BASE.replace(old, new, 1))
    expect_recipe(path, fragments)


def test_model_recipe_parses_without_kernels() -> None:
    r = load(DATA / "tiny.toml")
    assert r.kernels == () and r.model is not None
    m = r.model
    assert m.dims == ("batch", "seq") and m.buckets == ((1, 2), (8, 16))
    assert m.inputs == (mf.ModelInput("x", "fp32", ("batch", "seq", 32)),)
    assert m.bucket_grid == [(1, 8), (1, 16), (2, 8), (2, 16)]
    assert m.kwargs == {"d_model": 32, "heads": 2, "ffn": 64} and m.tolerance == 1e-3


def test_kernels_still_required_without_a_model(tmp_path: Path) -> None:
    path = tmp_path / "r.toml"
    path.write_text('[bundle]\nname = "x"\nversion = "1"\ntargets = ["sm_90"]\n')
    with pytest.raises(RecipeError, match=r"\[\[kernel\]\]: the recipe lists no kernels"):
        load(path)


def test_model_manifest_round_trips() -> None:
    buckets = (
        mf.ModelBucket((1,), "model/H200/batch=1", {"rel_err": 1e-4}),
        mf.ModelBucket(
            (2,),
            "",
            {"timed_us": {"compiled graph": 9.0, "eager direct": 8.0}},
            "eager",
            graph=False,
        ),
    )
    arts = mf.ModelArtifacts(
        "H200", "cuda", "NVIDIA H200", (9, 0), "2.11.0", "max-autotune", buckets
    )
    spec = mf.ModelSpec(
        name="layer",
        source="tiny.py:make_layer",
        dtype="fp16",
        inputs=(mf.ModelInput("x", "fp16", ("batch", 4)),),
        outputs=(("batch", 4),),
        single_output=True,
        dims=("batch",),
        buckets=((1, 2),),
        pad=("batch",),
        weights=(mf.ModelWeight("w", "parameter", "fp16", (4, 4), (4, 1)),),
        artifacts=(arts,),
    )
    assert mf.ModelSpec.from_json(spec.to_json()) == spec
    bad = spec.to_json()
    bad["artifacts"][0]["buckets"].pop()
    with pytest.raises(mf.ManifestError, match="one artifact per bucket"):
        mf.ModelSpec.from_json(bad)
    bad = spec.to_json()
    bad["pad"] = ["seq"]
    with pytest.raises(mf.ManifestError, match="pad names a dimension not in dims"):
        mf.ModelSpec.from_json(bad)
    # bundles written before eager buckets existed: every bucket compiled
    old = spec.to_json()
    del old["artifacts"][0]["buckets"][0]["impl"]
    del old["artifacts"][0]["buckets"][0]["graph"]
    first = mf.ModelSpec.from_json(old).artifacts[0].buckets[0]
    assert first.impl == "compiled" and first.graph is True
    for i, impl, entry, message in [
        (1, "eager", "model/H200/batch=2", "an eager bucket must have no entry"),
        (0, "compiled", "", "a compiled bucket must name its entry"),
        (0, "triton", "model/H200/batch=1", "impl 'triton' is not one of"),
    ]:
        bad = spec.to_json()
        bad["artifacts"][0]["buckets"][i].update(impl=impl, entry=entry)
        with pytest.raises(mf.ManifestError, match=message):
            mf.ModelSpec.from_json(bad)
    bad = spec.to_json()
    bad["artifacts"][0]["buckets"][1]["graph"] = "no"
    with pytest.raises(mf.ManifestError, match=r"buckets\[1\].graph must be true or false"):
        mf.ModelSpec.from_json(bad)
    # several modes: a compiled bucket names the mode that compiled its artifact
    moded = spec.to_json()
    moded["artifacts"][0]["buckets"][0]["mode"] = "default"
    got = mf.ModelSpec.from_json(moded)
    assert got.artifacts[0].buckets[0].mode == "default"
    assert mf.ModelSpec.from_json(got.to_json()) == got
    assert "mode" not in spec.to_json()["artifacts"][0]["buckets"][0]  # one mode: not written
    for i, mode in [(1, "default"), (0, 3)]:
        bad = spec.to_json()
        bad["artifacts"][0]["buckets"][i]["mode"] = mode
        with pytest.raises(mf.ManifestError, match="only a compiled bucket has one"):
            mf.ModelSpec.from_json(bad)


def test_example_layer_recipe_parses() -> None:
    r = load(Path(__file__).resolve().parents[1] / "recipes" / "layer.toml")
    assert r.model is not None and r.model.modes == ("max-autotune", "default")
    assert r.model.backend == "aoti"  # the default: the only backend that serves tuned
    assert r.model.select == "fastest"  # the default
    assert len(r.model.bucket_grid) == 12 and r.model.pad == ("batch", "seq")


def test_several_modes_are_timed_so_select_must_be_fastest(tmp_path: Path) -> None:
    (tmp_path / "tiny.py").write_text((DATA / "tiny.py").read_text())
    text = BASE.replace('backend = "inductor"', 'backend = "aoti"').replace(
        'mode = "default"', 'mode = ["max-autotune", "default"]'
    )
    path = tmp_path / "recipe.toml"
    path.write_text(text)
    expect_recipe(path, ['[model].select: "compiled" with 2 modes', 'select = "fastest"'])
    path.write_text(text.replace('select = "compiled"', 'select = "fastest"'))
    m = load(path).model
    assert m is not None and m.modes == ("max-autotune", "default")
    assert m.mode == "max-autotune+default" and m.label("default") == "default"
    one = load(DATA / "tiny.toml").model
    assert one is not None and one.modes == ("default",) and one.label("default") == ""
