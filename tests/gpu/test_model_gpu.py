"""Model mode on a GPU (issue 5): build the tiny causal layer in fp16 on this GPU, then in a
fresh process with empty Inductor/Triton caches load it, capture a CUDA graph per bucket and
serve every bucket and padded sizes between them: zero Triton compilations and zero
Inductor code generation, outputs equal to eager within fp16 tolerance.

With AOTC_TEST_LAYER_BUNDLE set to a bundle of recipes/layer.toml (benchmarks/
run_model_on_gpu.sh builds one), the same fresh-process check runs on the issue's
transformer layer: every bucket and sizes between them.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

pytestmark = pytest.mark.gpu

ROOT = Path(__file__).resolve().parents[2]
DATA = ROOT / "tests" / "data" / "model"
SIZES = [(1, 8), (2, 16), (1, 16), (2, 8), (1, 3), (2, 11), (1, 9), (2, 1)]

START = r"""
import json, sys, time
t0 = time.perf_counter()
import torch
counts = {}
"""

# Counts Inductor code generation, Triton compilations and run-time autotuning. It imports
# Inductor itself, so a child that must show Inductor is never imported runs without it.
COUNTING = r"""
counts.update(inductor_codegen=0, triton_compile=0)
import torch._inductor.graph as ig
real_codegen = ig.GraphLowering.codegen
def codegen(self, *a, **k):
    counts["inductor_codegen"] += 1
    return real_codegen(self, *a, **k)
ig.GraphLowering.codegen = codegen
import triton.compiler.compiler as tc
real_compile = tc.compile
def compile(*a, **k):
    counts["triton_compile"] += 1
    return real_compile(*a, **k)
tc.compile = compile
# Autotuning at run time: a kernel with several configs benchmarks them at its first call
from torch._inductor.runtime import triton_heuristics as th
counts["runtime_autotune"] = 0
for name in ("autotune_to_one_config", "coordinate_descent_tuning"):
    real = getattr(th.CachingAutotuner, name, None)
    if real is None:
        continue
    def counted(self, *a, _real=real, **k):
        counts["runtime_autotune"] += 1
        return _real(self, *a, **k)
    setattr(th.CachingAutotuner, name, counted)
"""

SERVE = r"""
sys.path.insert(0, sys.argv[2])
import importlib, loader
kw = json.loads(sys.argv[5])
torch.manual_seed(7)
m = importlib.import_module(sys.argv[4]).make_layer(**kw).cuda().half().eval()
t1 = time.perf_counter()
runner = loader.load_model(sys.argv[1], m, warmup=True)
torch.cuda.synchronize()
t2 = time.perf_counter()
errs = []
for b, t in json.loads(sys.argv[3]):
    x = torch.randn(b, t, kw["d_model"], device="cuda", dtype=torch.half)
    with torch.no_grad():
        ref = m(x)
    y = runner(x)
    assert y.shape == ref.shape, (y.shape, ref.shape)
    errs.append(float((y.float() - ref.float()).abs().max() / ref.float().abs().max()))
heavy = sorted(k for k in sys.modules if k.split(".")[0] == "triton"
               or k.startswith(("torch._inductor", "torch._dynamo")))
replayed = sum(b.graph is not None for b in runner._buckets)  # buckets captured
print(json.dumps({**counts, "max_rel_err": max(errs), "graphs": runner.use_graphs,
                  "replayed": replayed,
                  "import_s": t1 - t0, "ready_s": t2 - t1, "heavy": heavy[:10]}))
"""


def _recipe(
    tmp: Path, mode: str = "default", buckets: str = "batch = [1, 2]", backend: str = "inductor",
    select: str = "compiled",
) -> Path:  # fmt: skip
    import torch

    major, minor = torch.cuda.get_device_capability()
    text = (DATA / "tiny.toml").read_text()
    text = text.replace('targets = ["sm_90"]', f'targets = ["sm_{major}{minor}"]')
    text = text.replace('dtype = "fp32"', 'dtype = "fp16"')
    text = text.replace('mode = "default"', f'mode = "{mode}"')
    text = text.replace("batch = [1, 2]", buckets)
    text = text.replace('backend = "inductor"', f'backend = "{backend}"')
    text = text.replace('select = "compiled"', f'select = "{select}"')
    (tmp / "tiny.py").write_text((DATA / "tiny.py").read_text())
    (tmp / "tiny.toml").write_text(text)
    return tmp / "tiny.toml"


def _build(tmp: Path, recipe: Path) -> Path:
    from aot.build import build
    from aot.env import Environment
    from aot.model import ModelOptions

    out = tmp / "tiny.aotc"
    env = Environment(cache_dir=tmp / "cache", jobs=2, progress=False)
    build(recipe, out, env, tmp, model=ModelOptions(device="cuda"))
    return out


@pytest.fixture(scope="module")
def gpu_bundle(tmp_path_factory: pytest.TempPathFactory) -> Path:
    tmp = tmp_path_factory.mktemp("model-gpu")
    return _build(tmp, _recipe(tmp))


TINY = ("tiny", {"d_model": 32, "heads": 2, "ffn": 64})


def _fresh(
    bundle: Path, tmp: Path, sizes: list[tuple[int, int]] = SIZES,
    model: tuple[str, dict[str, int]] = TINY, where: Path = DATA, counting: bool = True,
) -> dict[str, Any]:  # fmt: skip
    """Serve ``sizes`` from ``bundle`` in a fresh process with empty Inductor and Triton
    caches, counting Inductor code generation and Triton compilations (unless
    ``counting`` is false), and listing the compiler modules it imported."""
    env = {**os.environ, "TORCHINDUCTOR_CACHE_DIR": str(tmp / "inductor"),
           "TRITON_CACHE_DIR": str(tmp / "triton")}  # fmt: skip
    argv = [str(bundle), str(where), json.dumps(sizes), model[0], json.dumps(model[1])]
    proc = subprocess.run(
        [sys.executable, "-c", START + (COUNTING if counting else "") + SERVE, *argv],
        capture_output=True, text=True, env=env, timeout=600, cwd=ROOT,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-3000:]
    result: dict[str, Any] = json.loads(proc.stdout.strip().splitlines()[-1])
    return result


def test_manifest_records_the_gpu(gpu_bundle: Path) -> None:
    import torch

    from loader.format import BundleFile
    from loader.manifest import Manifest

    with BundleFile(gpu_bundle) as f:
        (arts,) = Manifest.from_json(f.manifest).model.artifacts  # type: ignore[union-attr]
    assert arts.device == "cuda" and arts.cc == torch.cuda.get_device_capability()
    assert arts.device_name == torch.cuda.get_device_name()


def test_fresh_process_serves_every_bucket_without_compiling(
    gpu_bundle: Path, tmp_path: Path
) -> None:
    r = _fresh(gpu_bundle, tmp_path)
    assert r["graphs"] is True
    assert r["triton_compile"] == 0 and r["inductor_codegen"] == 0, r
    assert r["runtime_autotune"] == 0, r
    assert r["max_rel_err"] < 1e-2, r
    print(json.dumps(r))


@pytest.fixture(scope="module")
def aoti_bundle(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The default backend at the default mode: an AOTInductor package, max-autotune, one
    bucket (each package is a C++ build, about 100 s on the H200)."""
    tmp = tmp_path_factory.mktemp("aoti-gpu")
    return _build(tmp, _recipe(tmp, mode="max-autotune", buckets="batch = [2]", backend="aoti"))


AOTI_SIZES = [(2, 16), (2, 8), (1, 16), (1, 3), (2, 11)]


def test_aoti_serves_without_compiling_or_tuning(aoti_bundle: Path, tmp_path: Path) -> None:
    """max-autotune's choices (Triton templates, extern mm, pointwise configurations) are in
    the package: a fresh process with empty caches compiles nothing and tunes nothing (the
    inductor backend's max-autotune artifacts tuned 22 times here, so the recipe refuses
    that pair)."""
    r = _fresh(aoti_bundle, tmp_path, AOTI_SIZES)
    print(json.dumps(r))
    assert r["graphs"] is True
    assert r["triton_compile"] == 0 and r["inductor_codegen"] == 0, r
    assert r["runtime_autotune"] == 0, r
    assert r["max_rel_err"] < 1e-2, r


def test_aoti_serves_without_importing_a_compiler(aoti_bundle: Path, tmp_path: Path) -> None:
    """Loaded by torch's C++ runtime: a fresh process serves every bucket and padded sizes
    through CUDA graphs without importing Inductor, Dynamo or Triton."""
    r = _fresh(aoti_bundle, tmp_path, AOTI_SIZES, counting=False)
    print(json.dumps(r))
    assert r["graphs"] is True and r["heavy"] == [] and r["max_rel_err"] < 1e-2, r


@pytest.mark.parametrize("graph", [True, False], ids=["eager-graph", "eager-direct"])
def test_fastest_times_every_serving_and_eager_buckets_serve_the_module(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, graph: bool
) -> None:
    """select = "fastest" times each bucket's artifact and the module's forward, each as a
    CUDA graph and called directly, on this GPU, copies in and out included (here
    the choice is then forced to one eager serving): the bundle ships no artifact, and a
    fresh process serves every bucket and padded sizes from the module itself, replaying
    graphs of it or calling it, with no compiler imported."""
    import aot.model.select as ms
    from loader.format import BundleFile
    from loader.manifest import Manifest

    monkeypatch.setattr(ms, "choose", lambda times: ms.Serving("eager", graph))
    bundle = _build(tmp_path, _recipe(tmp_path, select="fastest"))
    with BundleFile(bundle) as f:
        (arts,) = Manifest.from_json(f.manifest).model.artifacts  # type: ignore[union-attr]
        assert not any(n.startswith("model/") for n in f.entries)
    for b in arts.buckets:
        assert b.impl == "eager" and b.graph is graph and b.entry == ""
        timed = b.metrics["timed_us"]
        assert sorted(timed) == ["compiled direct", "compiled graph", "eager direct",
                                 "eager graph"], b.metrics  # fmt: skip
        assert min(timed.values()) > 0, b.metrics
    r = _fresh(bundle, tmp_path, counting=False)
    print(json.dumps({"graph": graph, **r}))
    assert r["heavy"] == [] and r["max_rel_err"] < 1e-2, r
    assert r["replayed"] == (len(arts.buckets) if graph else 0), r


def test_several_modes_and_a_compiled_bucket_called_directly(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """mode = ["max-autotune", "default"] through AOTInductor: the bucket is compiled in
    both modes and all six servings are timed on this GPU; the choice, forced here to the
    default mode's package called directly, ships that package alone, and a fresh process
    serves it without a graph and without importing a compiler."""
    import aot.model.select as ms
    from loader.format import BundleFile
    from loader.manifest import Manifest

    monkeypatch.setattr(ms, "choose", lambda times: ms.Serving("compiled", False, "default"))
    recipe = _recipe(tmp_path, buckets="batch = [2]", backend="aoti", select="fastest")
    text = recipe.read_text().replace("seq = [8, 16]", "seq = [16]")
    recipe.write_text(text.replace('mode = "default"', 'mode = ["max-autotune", "default"]'))
    bundle = _build(tmp_path, recipe)
    with BundleFile(bundle) as f:
        (arts,) = Manifest.from_json(f.manifest).model.artifacts  # type: ignore[union-attr]
        entries = [n for n in f.entries if n.startswith("model/")]
    (b,) = arts.buckets
    assert (b.impl, b.graph, b.mode) == ("compiled", False, "default") and entries == [b.entry]
    assert sorted(b.metrics["timed_us"]) == sorted(
        f"{impl} {graph}" for impl in ("compiled max-autotune", "compiled default", "eager")
        for graph in ("graph", "direct")
    ), b.metrics  # fmt: skip
    r = _fresh(bundle, tmp_path, counting=False)
    print(json.dumps({"modes": b.metrics["modes"], **r}))
    assert r["heavy"] == [] and r["max_rel_err"] < 1e-2 and r["replayed"] == 0, r


def test_graphs_in_process_and_from_threads(gpu_bundle: Path, in_threads: Any) -> None:
    import torch

    import loader

    sys.path.insert(0, str(DATA))
    import tiny

    torch.manual_seed(3)
    m = tiny.make_layer(d_model=32, heads=2, ffn=64).cuda().half().eval()
    runner = loader.load_model(gpu_bundle, m)
    xs = [torch.randn(b, t, 32, device="cuda", dtype=torch.half) for b, t in SIZES]
    with torch.no_grad():
        refs = [m(x) for x in xs]
    errors: list[str] = []

    def work(k: int) -> None:
        stream = torch.cuda.Stream()
        with torch.cuda.stream(stream):
            for _ in range(20):
                for x, ref in zip(xs, refs, strict=True):
                    y = runner(x)
                    stream.synchronize()
                    if not torch.allclose(y, ref, rtol=1e-2, atol=1e-2):
                        errors.append(f"thread {k}: {tuple(x.shape)}")

    in_threads(4, work)
    assert not errors, errors[:5]


def serve_while_another_thread_allocates(bundle: Path, rounds: int = 5) -> list[str]:
    """A service thread keeps allocating new GPU memory (a cudaMalloc each time: every block
    is larger than any cached one) and running the module, while this thread loads the
    bundle ``rounds`` times without warm-up and serves every size, so each round captures
    every bucket at first use. Returns what went wrong, in either thread."""
    import threading

    import torch

    import loader

    sys.path.insert(0, str(DATA))
    import tiny

    torch.manual_seed(3)
    m = tiny.make_layer(d_model=32, heads=2, ffn=64).cuda().half().eval()
    xs = [torch.randn(b, t, 32, device="cuda", dtype=torch.half) for b, t in SIZES]
    with torch.no_grad():
        refs = [m(x) for x in xs]
    errors: list[str] = []
    stop = threading.Event()

    def busy() -> None:
        n = 0
        try:
            with torch.no_grad():
                while not stop.is_set():
                    n += 1
                    block = torch.ones((32 + n % 64) << 20, dtype=torch.uint8, device="cuda")
                    m(xs[n % len(xs)])
                    del block
                    if n % 64 == 0:
                        torch.cuda.empty_cache()  # so the next sizes are new again
        except Exception as exc:
            errors.append(f"service thread, step {n}: {exc!r}"[:400])

    thread = threading.Thread(target=busy)
    thread.start()
    try:
        for r in range(rounds):
            runner = loader.load_model(bundle, m)  # no warm-up: captures at first use
            for x, ref in zip(xs, refs, strict=True):
                try:
                    y = runner(x)
                except Exception as exc:
                    errors.append(f"round {r}, {tuple(x.shape)}: {exc!r}"[:400])
                    continue
                if not torch.allclose(y, ref, rtol=1e-2, atol=1e-2):
                    errors.append(f"round {r}, {tuple(x.shape)}: wrong output")
    finally:
        stop.set()
        thread.join()
    torch.cuda.synchronize()
    return errors


def test_lazy_captures_while_another_thread_allocates(gpu_bundle: Path) -> None:
    errors = serve_while_another_thread_allocates(gpu_bundle)
    assert not errors, errors[:5]


def test_outputs_are_copies_unless_asked_otherwise(gpu_bundle: Path) -> None:
    """Default: every call returns its own tensor. copy_outputs=False: the bucket's graph
    output itself (overwritten by the next call of that bucket, like torch.compile's CUDA
    graphs), and a view of it after padding."""
    import torch

    import loader

    sys.path.insert(0, str(DATA))
    import tiny

    torch.manual_seed(5)
    m = tiny.make_layer(d_model=32, heads=2, ffn=64).cuda().half().eval()
    x1, x2 = (torch.randn(2, 16, 32, device="cuda", dtype=torch.half) for _ in range(2))
    with torch.no_grad():
        r1, r2 = m(x1), m(x2)
    copied = loader.load_model(gpu_bundle, m)
    y1, y2 = copied(x1), copied(x2)
    assert y1.data_ptr() != y2.data_ptr()
    assert torch.allclose(y1, r1, rtol=1e-2, atol=1e-2)
    static = loader.load_model(gpu_bundle, m, copy_outputs=False)
    s1 = static(x1)
    assert torch.allclose(s1, r1, rtol=1e-2, atol=1e-2)
    s2 = static(x2)
    assert s2.data_ptr() == s1.data_ptr() and torch.allclose(s1, r2, rtol=1e-2, atol=1e-2)
    small = static(x1[:, :9])  # padded up to (2, 16): a view into the same output
    assert small.shape == (2, 9, 32) and small.data_ptr() == s1.data_ptr()
    assert torch.allclose(small, m(x1[:, :9]), rtol=1e-2, atol=1e-2)


def test_wrong_gpu_kind_is_refused(gpu_bundle: Path, tmp_path: Path) -> None:
    import loader
    from loader.format import BundleFile, encode

    with BundleFile(gpu_bundle) as f:
        manifest = {k: v for k, v in f.manifest.items() if k not in ("entries", "payload_size")}
        payloads = {n: f.read_entry(n) for n in f.entries}
    manifest["model"]["artifacts"][0]["cc"] = [7, 5]
    other = tmp_path / "other.aotc"
    other.write_bytes(encode(manifest, payloads))
    sys.path.insert(0, str(DATA))
    import tiny

    m = tiny.make_layer(d_model=32, heads=2, ffn=64).cuda().half().eval()
    with pytest.raises(loader.NoTargetError, match="no model artifacts for"):
        loader.load_model(other, m)


LAYER_BUNDLE = os.environ.get("AOTC_TEST_LAYER_BUNDLE")
LAYER_RECIPE = Path(os.environ.get("AOTC_TEST_LAYER_RECIPE", ROOT / "recipes" / "layer.toml"))


@pytest.mark.skipif(not LAYER_BUNDLE, reason="AOTC_TEST_LAYER_BUNDLE (a recipes/layer.toml "
                    "bundle) not set")  # fmt: skip
def test_layer_bundle_every_bucket_and_between(tmp_path: Path) -> None:
    from aot.recipe import load

    mr = load(LAYER_RECIPE).model
    assert mr is not None
    grid = [(b, t) for b, t in mr.bucket_grid]
    (bs, ts) = mr.buckets
    # one past the bucket below, in each dimension: the most padding a bucket sees
    between = [(1, 1)] + [
        (bs[i - 1] + 1 if i else 1, ts[j - 1] + 1 if j else max(1, ts[0] - 5))
        for i in range(len(bs)) for j in range(len(ts))
    ]  # fmt: skip
    r = _fresh(Path(str(LAYER_BUNDLE)), tmp_path, grid + between,
               ("layer", dict(mr.kwargs)), LAYER_RECIPE.parent / "models")  # fmt: skip
    print(json.dumps(r))
    assert r["graphs"] is True
    assert r["triton_compile"] == 0 and r["inductor_codegen"] == 0, r
    assert r["runtime_autotune"] == 0, r
    assert r["max_rel_err"] < 1e-2, r
