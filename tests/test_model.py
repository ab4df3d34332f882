"""Model mode end to end on the CPU: build a tiny causal layer per bucket, load it with the
module's own weights, compare with eager at every bucket and between buckets (padding),
and count compilations while loading and calling: Inductor code generation and Triton
compilation must not happen. Skipped where torch is not installed."""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import shutil
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any

import pytest

torch = pytest.importorskip("torch")

from aot.build import build  # noqa: E402
from aot.errors import BuildError  # noqa: E402
from aot.model import ModelOptions  # noqa: E402
from loader import ArgumentError, BundleError, NoTargetError, load_model  # noqa: E402
from loader.format import BundleFile, encode  # noqa: E402

from .conftest import env_for  # noqa: E402

DATA = Path(__file__).parent / "data" / "model"
ROOT = Path(__file__).resolve().parents[1]
# Sizes to call at: every bucket's bounds, and sizes between them (padded up).
SIZES = [(1, 8), (2, 16), (1, 16), (2, 8), (1, 3), (2, 11), (1, 9), (2, 1)]

# Counts Inductor code generation, Triton compilations and C++ builds. It imports Inductor
# itself: a child that must show Inductor is never imported runs SERVE alone.
COUNTING = r"""
counts.update(inductor_codegen=0, triton_compile=0, cpp_build=0)
import torch._inductor.graph as ig
real_codegen = ig.GraphLowering.codegen
def codegen(self, *a, **k):
    counts["inductor_codegen"] += 1
    return real_codegen(self, *a, **k)
ig.GraphLowering.codegen = codegen
try:
    import triton.compiler.compiler as tc
    real_compile = tc.compile
    def compile(*a, **k):
        counts["triton_compile"] += 1
        return real_compile(*a, **k)
    tc.compile = compile
except ImportError:
    pass
import torch._inductor.cpp_builder as cb
real_build = cb.CppBuilder.build
def build(self, *a, **k):
    counts["cpp_build"] += 1
    return real_build(self, *a, **k)
cb.CppBuilder.build = build
"""

SERVE = r"""
sys.path.insert(0, sys.argv[2])
import tiny, loader
torch.manual_seed(7)
m = tiny.make_layer(d_model=32, heads=2, ffn=64).eval()
runner = loader.load_model(sys.argv[1], m, warmup=True)
errs = []
for b, t in json.loads(sys.argv[3]):
    x = torch.randn(b, t, 32)
    with torch.no_grad():
        errs.append(float((runner(x) - m(x)).abs().max()))
heavy = sorted(k for k in sys.modules if k.split(".")[0] == "triton"
               or k.startswith(("torch._inductor", "torch._dynamo")))
print(json.dumps({**counts, "max_err": max(errs), "heavy": heavy[:10]}))
"""
START = "import json, sys, torch\ncounts = {}\n"
CHILD = START + COUNTING + SERVE


@pytest.fixture(scope="module")
def tiny_bundle(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("model") / "tiny.aotc"
    env = env_for(tmp_path_factory.mktemp("cache"))
    build(DATA / "tiny.toml", out, env, ROOT, model=ModelOptions(device="cpu"))
    return out


def _module(seed: int = 3, **kw: Any) -> Any:
    sys.path.insert(0, str(DATA))
    import tiny

    torch.manual_seed(seed)
    return tiny.make_layer(**{"d_model": 32, "heads": 2, "ffn": 64, **kw}).eval()


def _serves_like_eager(bundle: Path, m: Any, sizes: list[tuple[int, int]] = SIZES) -> Any:
    """Load ``bundle`` with ``m``'s weights and check every size against ``m`` itself;
    the runner, for more calls."""
    runner = load_model(bundle, m)
    for b, t in sizes:
        x = torch.randn(b, t, 32)
        with torch.no_grad():
            torch.testing.assert_close(runner(x), m(x), rtol=1e-5, atol=1e-5)
    return runner


def _serve_fresh(
    bundle: Path, tmp_path: Path, sizes: list[tuple[int, int]] = SIZES, code: str = CHILD
) -> dict[str, Any]:
    """Serve ``sizes`` from ``bundle`` in a fresh process with empty Inductor and Triton
    caches: what ``code`` prints (CHILD: compilation counts, the largest error against
    eager, the compiler modules imported)."""
    env = {
        **os.environ,
        "TORCHINDUCTOR_CACHE_DIR": str(tmp_path / "inductor"),
        "TRITON_CACHE_DIR": str(tmp_path / "triton"),
    }
    proc = subprocess.run(
        [sys.executable, "-c", code, str(bundle), str(DATA), json.dumps(sizes)],
        capture_output=True, text=True, env=env, timeout=600, cwd=ROOT,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-3000:]
    result: dict[str, Any] = json.loads(proc.stdout.strip().splitlines()[-1])
    return result


def test_manifest_records_the_model(tiny_bundle: Path) -> None:
    from loader.manifest import Manifest

    with BundleFile(tiny_bundle) as f:
        m = Manifest.from_json(f.manifest)
        assert m.kernels == () and m.model is not None
        spec = m.model
        assert spec.dims == ("batch", "seq") and spec.buckets == ((1, 2), (8, 16))
        assert spec.pad == ("batch", "seq") and spec.single_output
        names = [w.name for w in spec.weights]
        assert names[:2] == ["n1.weight", "n1.bias"] and names[-1] == "gain"
        assert spec.weights[-1].kind == "buffer"
        (arts,) = spec.artifacts
        assert arts.device == "cpu" and arts.torch == torch.__version__
        assert [b.bucket for b in arts.buckets] == [(1, 8), (1, 16), (2, 8), (2, 16)]
        assert all(b.entry in f.entries for b in arts.buckets)
        assert all(b.metrics["rel_err"] < 1e-5 for b in arts.buckets)
        assert m.provenance["torch"] == torch.__version__


def test_every_bucket_and_padding_match_eager(tiny_bundle: Path) -> None:
    m = _module()
    runner = _serves_like_eager(tiny_bundle, m)
    # Weights are read in place: an in-place update is seen by the next call.
    with torch.no_grad():
        m.f2.bias.add_(1.0)
        x = torch.randn(1, 8, 32)
        torch.testing.assert_close(runner(x), m(x), rtol=1e-5, atol=1e-5)
    runner.close()


def test_same_process_load_and_calls_compile_nothing(tiny_bundle: Path) -> None:
    counts: dict[str, int] = {}
    import torch._inductor.graph as ig

    real = ig.GraphLowering.codegen

    def codegen(self: Any, *a: Any, **k: Any) -> Any:
        counts["codegen"] = counts.get("codegen", 0) + 1
        return real(self, *a, **k)

    ig.GraphLowering.codegen = codegen  # type: ignore[method-assign]
    try:
        m = _module()
        runner = load_model(tiny_bundle, m, warmup=True)
        for b, t in SIZES:
            runner(torch.randn(b, t, 32))
    finally:
        ig.GraphLowering.codegen = real  # type: ignore[method-assign]
    assert counts.get("codegen", 0) == 0


def test_fresh_process_with_empty_caches_compiles_nothing(
    tiny_bundle: Path, tmp_path: Path
) -> None:
    result = _serve_fresh(tiny_bundle, tmp_path)
    assert result["inductor_codegen"] == 0
    assert result["triton_compile"] == 0
    # On the CPU Inductor builds the artifact's C++ at load (cpp_build > 0); on a GPU the
    # artifact carries compiled Triton kernels (tests/gpu/test_model_gpu.py).
    assert result["max_err"] < 1e-5


def test_wrong_module_is_refused(tiny_bundle: Path) -> None:
    with pytest.raises(ArgumentError, match=r"n1.weight' has shape \[48\], expected \[32\]"):
        load_model(tiny_bundle, _module(d_model=48, heads=2))
    m = _module()
    m.extra = torch.nn.Linear(2, 2)
    with pytest.raises(ArgumentError, match=r"not the one the model was built from.*extra\.weight"):
        load_model(tiny_bundle, m)
    with pytest.raises(ArgumentError, match=r"dtype torch\.float64, expected fp32"):
        load_model(tiny_bundle, _module().double())


def test_bad_calls(tiny_bundle: Path) -> None:
    runner = load_model(tiny_bundle, _module())
    with pytest.raises(ArgumentError, match=r"seq=17 is outside the buckets \(1..16\)"):
        runner(torch.randn(1, 17, 32))
    with pytest.raises(ArgumentError, match=r"has dtype torch\.float64, expected torch\.float32"):
        runner(torch.randn(1, 8, 32, dtype=torch.float64))
    with pytest.raises(ArgumentError, match=r"shape \[1, 8, 31\], expected"):
        runner(torch.randn(1, 8, 31))
    with pytest.raises(ArgumentError, match="takes 1 inputs"):
        runner(torch.randn(1, 8, 32), torch.randn(1, 8, 32))
    with pytest.raises(ArgumentError, match="warmup\\(\\): 'tokens' is not a dimension"):
        runner.warmup(tokens=[1])
    # A dimension not listed in pad must be called at a bucket's size exactly.
    runner.spec = dataclasses.replace(runner.spec, pad=("batch",))
    with pytest.raises(ArgumentError, match=r"seq=3 is not a bucket size \[8, 16\]"):
        runner(torch.randn(1, 3, 32))
    assert runner(torch.randn(1, 8, 32)).shape == (1, 8, 32)
    # a shape served before still has its dtype checked
    with pytest.raises(ArgumentError, match=r"has dtype torch\.float64, expected"):
        runner(torch.randn(1, 8, 32, dtype=torch.float64))


def test_warmup_chooses_buckets_as_calls_do(tiny_bundle: Path) -> None:
    runner = load_model(tiny_bundle, _module())
    assert runner.warmup(batch=[1], seq=[3, 8]) == 1  # seq 3 pads up to 8, as a call would
    assert runner.warmup(seq=16) == 2  # every batch bucket at seq 16
    assert sum(b.run is not None for b in runner._buckets) == 3
    # a size a call would be refused at is refused here too (it used to warm the last bucket)
    with pytest.raises(ArgumentError, match=r"seq=17 is outside the buckets \(1..16\)"):
        runner.warmup(seq=[17])
    runner.spec = dataclasses.replace(runner.spec, pad=("batch",))
    with pytest.raises(ArgumentError, match=r"seq=3 is not a bucket size \[8, 16\]"):
        runner.warmup(seq=[3])
    assert runner.warmup() == 4


def test_route_and_load_bucket_are_the_calls_own_steps(tiny_bundle: Path) -> None:
    runner = load_model(tiny_bundle, _module())
    x = torch.randn(1, 3, 32)
    bucket, sizes, padded = runner.route([x])
    assert (bucket, sizes, padded) == (runner.bucket_for(sizes), {"batch": 1, "seq": 3}, True)
    assert runner.route([x])[0] is bucket  # the same route, from the cache
    index = runner.grid.index([1, 3])
    assert bucket.run is None
    runner.load_bucket(index)  # loads, captures nothing (the CPU has no graphs anyway)
    run = bucket.run
    assert run is not None and bucket.graph is None
    runner.load_bucket(index)
    assert bucket.run is run  # loaded once
    assert runner.warmup(batch=1, seq=3) == 1 and bucket.run is run
    assert sum(b.run is not None for b in runner._buckets) == 1


def test_load_model_takes_digest_and_cache_dir_as_open_does(
    tiny_bundle: Path, tmp_path: Path
) -> None:
    digest = "sha256:" + hashlib.sha256(tiny_bundle.read_bytes()).hexdigest()
    with pytest.raises(BundleError, match="pinned digest mismatch"):
        load_model(tiny_bundle, _module(), digest="sha256:" + "0" * 64)
    load_model(tiny_bundle, _module(), digest=digest).close()
    # a reference pinned to a bundle already in the cache opens it without any lookup
    cache = tmp_path / "bundles"
    (cache / "sha256").mkdir(parents=True)
    shutil.copy(tiny_bundle, cache / "sha256" / digest.removeprefix("sha256:"))
    ref = "oci://127.0.0.1:9/aotc/tiny:1"  # nothing listens there
    runner = load_model(ref, _module(), digest=digest, cache_dir=cache)
    assert Path(runner.file.path) == cache / "sha256" / digest.removeprefix("sha256:")
    runner.close()
    with BundleFile(tiny_bundle) as f, pytest.raises(ArgumentError, match="apply to a path"):
        load_model(f, _module(), digest=digest)


def _rewrite(src: Path, dst: Path, edit: Any) -> Path:
    with BundleFile(src) as f:
        manifest = {k: v for k, v in f.manifest.items() if k not in ("entries", "payload_size")}
        payloads = {n: f.read_entry(n) for n in f.entries}
    edit(manifest["model"]["artifacts"][0])
    dst.write_bytes(encode(manifest, payloads))
    return dst


def test_other_torch_or_device_is_refused(tiny_bundle: Path, tmp_path: Path) -> None:
    other = _rewrite(tiny_bundle, tmp_path / "old.aotc", lambda a: a.update(torch="2.0.0"))
    with pytest.raises(BundleError, match=r"built with torch 2\.0\.0; this process has torch"):
        load_model(other, _module())
    gpu = _rewrite(tiny_bundle, tmp_path / "gpu.aotc",
                   lambda a: a.update(device="cuda", cc=[9, 0], target="sm_90"))  # fmt: skip
    with pytest.raises(NoTargetError, match="no model artifacts for cpu; the bundle holds: sm_90"):
        load_model(gpu, _module())


def test_no_model_in_bundle(tmp_path: Path) -> None:
    from . import handmade

    path = handmade.write(tmp_path / "k.aotc")
    with pytest.raises(BundleError, match="has no \\[model\\]"):
        load_model(path, _module())


def test_unsafe_padding_is_caught_at_build(tmp_path: Path) -> None:
    text = (DATA / "tiny.toml").read_text()
    text = text.replace("ffn = 64 }", "ffn = 64, causal = false }")
    text = text.replace("batch = [1, 2]", "batch = [1]")
    (tmp_path / "tiny.py").write_text((DATA / "tiny.py").read_text())
    (tmp_path / "r.toml").write_text(text)
    with pytest.raises(BuildError, match=r"\[model\].pad: at seq=4 padded up to batch=1, seq=8"):
        build(tmp_path / "r.toml", tmp_path / "x.aotc", env_for(tmp_path / "c"), tmp_path,
              model=ModelOptions(device="cpu"))  # fmt: skip
    assert not (tmp_path / "x.aotc").exists()


def test_workers_build_every_bucket(tmp_path: Path) -> None:
    """Two worker processes build the four buckets into the cache; the build packs them
    from there, reports their compile times (not "cached"), and the bundle serves."""
    out = tmp_path / "tiny.aotc"
    r = build(DATA / "tiny.toml", out, env_for(tmp_path / "c"), tmp_path,
              model=ModelOptions(device="cpu", workers=2))  # fmt: skip
    assert (r.model_buckets, r.model_cached) == (4, 0)
    report = out.with_suffix(".report.md").read_text()
    assert "| cached |" not in report and report.count("| batch=") == 4
    _serves_like_eager(out, _module())
    again = build(DATA / "tiny.toml", tmp_path / "again.aotc", env_for(tmp_path / "c"),
                  tmp_path, model=ModelOptions(device="cpu", workers=2))  # fmt: skip
    assert (again.model_buckets, again.model_cached) == (4, 4)


def test_workers_are_dealt_round_the_gpus() -> None:
    """Default: one worker per GPU of the kind; ``--model-workers`` above the GPU count
    shares them round-robin; never more workers than jobs. (Workers hand their buckets
    back through the pool, so they need no cache directory.)"""
    from aot.model.plan import Place, worker_devices

    one = Place("sm_90", "cuda:0", "H200", (9, 0), ("cuda:0",))
    two = dataclasses.replace(one, devices=("cuda:0", "cuda:1"))
    assert worker_devices(ModelOptions(), one, 12) == ["cuda:0"]
    assert worker_devices(ModelOptions(), two, 12) == ["cuda:0", "cuda:1"]
    assert worker_devices(ModelOptions(workers=3), one, 12) == ["cuda:0"] * 3
    assert worker_devices(ModelOptions(workers=3), two, 12) == ["cuda:0", "cuda:1", "cuda:0"]
    assert worker_devices(ModelOptions(workers=4), two, 2) == ["cuda:0", "cuda:1"]
    assert worker_devices(ModelOptions(workers=4), two, 1) == ["cuda:0"]


def test_a_failing_worker_fails_the_build(tmp_path: Path) -> None:
    text = (DATA / "tiny.toml").read_text()
    text = text.replace("ffn = 64 }", "ffn = 64, causal = false }")
    (tmp_path / "tiny.py").write_text((DATA / "tiny.py").read_text())
    (tmp_path / "r.toml").write_text(text)
    with pytest.raises(BuildError, match=r"\[model\].pad: at .* padded up to batch=\d, seq=\d+"):
        build(tmp_path / "r.toml", tmp_path / "x.aotc", env_for(tmp_path / "c"), tmp_path,
              model=ModelOptions(device="cpu", workers=2))  # fmt: skip
    assert not (tmp_path / "x.aotc").exists()


def _workers(pid: int) -> list[int]:
    """The worker processes ``pid`` started (not multiprocessing's resource tracker)."""
    kids = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
            cmd = (stat.parent / "cmdline").read_bytes()
        except OSError:
            continue
        if int(fields[1]) == pid and b"spawn_main" in cmd:
            kids.append(int(stat.parent.name))
    return kids


@pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="reads /proc (Linux)")
def test_workers_die_with_the_build(tmp_path: Path) -> None:
    """A build killed outright (SIGKILL: no clean-up runs) takes its workers with it. Here
    the workers would otherwise live two minutes: the factory sleeps."""
    import signal
    import time

    slow = "\nimport time\n_made = make_layer\n\n\ndef make_layer(**kw):\n" \
           "    time.sleep(120)\n    return _made(**kw)\n"  # fmt: skip
    (tmp_path / "tiny.py").write_text((DATA / "tiny.py").read_text() + slow)
    (tmp_path / "tiny.toml").write_text((DATA / "tiny.toml").read_text())
    env = {**os.environ, "AOTC_CACHE_DIR": str(tmp_path / "c")}
    cmd = [sys.executable, "-m", "aot.cli", "build", str(tmp_path / "tiny.toml"), "-o",
           str(tmp_path / "x.aotc"), "--model-device", "cpu", "--model-workers", "2"]  # fmt: skip
    proc = subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL)  # fmt: skip
    try:
        deadline = time.monotonic() + 60
        while len(workers := _workers(proc.pid)) < 2 and time.monotonic() < deadline:
            assert proc.poll() is None, "the build ended before its workers started"
            time.sleep(0.05)
        assert len(workers) == 2
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait()
    deadline = time.monotonic() + 30
    while any(Path(f"/proc/{w}").exists() for w in workers) and time.monotonic() < deadline:
        time.sleep(0.1)
    alive = [w for w in workers if Path(f"/proc/{w}").exists()
             and "Z" not in Path(f"/proc/{w}/stat").read_text().rsplit(")", 1)[1][:3]]  # fmt: skip
    assert alive == []


def test_workers_take_the_largest_buckets_first() -> None:
    """Workers take jobs from one queue as they come free, largest first (by element
    count), so that the build does not end waiting on a large bucket started last."""
    from aot.model.plan import BucketJob, largest_first

    d, m = "default", "max-autotune"
    jobs = [BucketJob(b, m) for b in [(1, 128), (4, 128), (16, 2048), (32, 2048), (1, 2048)]]
    assert [j.bucket for j in largest_first(jobs)] == [
        (32, 2048), (16, 2048), (1, 2048), (4, 128), (1, 128)]  # fmt: skip
    # two modes of one bucket are two jobs of the same cost, which may go to two workers
    assert largest_first([BucketJob((1, 8), d), BucketJob((2, 8), m), BucketJob((2, 8), d)]) == [
        ((2, 8), m), ((2, 8), d), ((1, 8), d)]  # fmt: skip


def test_model_build_needs_a_gpu_unless_cpu(tmp_path: Path) -> None:
    with pytest.raises(BuildError, match=r"needs a GPU of a target's kind.*--model-device cpu"):
        build(DATA / "tiny.toml", tmp_path / "x.aotc", env_for(tmp_path / "c"), tmp_path,
              model=ModelOptions(device="auto", gpus=[]))  # fmt: skip


def test_buckets_come_from_the_cache_until_the_model_changes(tmp_path: Path) -> None:
    """Each verified bucket is cached by content: a rebuild compiles nothing and packs the
    same artifacts; a bucket added to the grid compiles that bucket alone; an edit to the
    model's sources compiles every bucket again."""
    src = tmp_path / "src"
    src.mkdir()
    (src / "tiny.py").write_text((DATA / "tiny.py").read_text())
    (src / "tiny.toml").write_text((DATA / "tiny.toml").read_text())
    env = env_for(tmp_path / "cache")

    cached: list[tuple[int, int]] = []  # (buckets, from cache) of each build

    def built(name: str) -> tuple[str, dict[str, bytes]]:
        out = tmp_path / f"{name}.aotc"
        r = build(src / "tiny.toml", out, env, src, model=ModelOptions(device="cpu"))
        cached.append((r.model_buckets, r.model_cached))
        with BundleFile(out) as f:
            payloads = {n: f.read_entry(n) for n in f.entries}
        return out.with_suffix(".report.md").read_text(), payloads

    report1, first = built("first")
    assert "| cached |" not in report1
    report2, second = built("second")
    assert report2.count("| cached |") == 4 and second == first
    assert cached == [(4, 0), (4, 4)]
    # a damaged entry is a miss: that bucket alone is compiled again
    records = sorted((tmp_path / "cache").rglob("*.json"))
    assert len(records) == 4
    meta = json.loads(records[0].read_text())
    del meta["weights"]
    records[0].write_text(json.dumps(meta))
    report_damaged, _ = built("damaged")
    assert report_damaged.count("| cached |") == 3
    toml = (src / "tiny.toml").read_text()
    (src / "tiny.toml").write_text(toml.replace("seq = [8, 16]", "seq = [8, 16, 32]"))
    report_grown, _ = built("grown")
    assert report_grown.count("| cached |") == 4 and report_grown.count("seq=32") == 2
    (src / "tiny.py").write_text((DATA / "tiny.py").read_text() + "\n# edited\n")
    report3, _ = built("third")
    assert "| cached |" not in report3


def _fastest(tmp_path: Path) -> Path:
    """tiny.toml with select = "fastest" (the recipe default), in tmp_path."""
    (tmp_path / "tiny.py").write_text((DATA / "tiny.py").read_text())
    text = (DATA / "tiny.toml").read_text()
    (tmp_path / "tiny.toml").write_text(text.replace('select = "compiled"', 'select = "fastest"'))
    return tmp_path / "tiny.toml"


def _build_fastest(tmp_path: Path) -> tuple[Path, Any, set[str]]:
    """_fastest built for the CPU into tmp_path/t.aotc: (bundle, its artifacts, the names
    of its entries)."""
    from loader.manifest import Manifest

    out = tmp_path / "t.aotc"
    build(_fastest(tmp_path), out, env_for(tmp_path / "c"), tmp_path,
          model=ModelOptions(device="cpu"))  # fmt: skip
    with BundleFile(out) as f:
        spec = Manifest.from_json(f.manifest).model
        assert spec is not None
        return out, spec.artifacts[0], set(f.entries)


def test_fastest_times_each_bucket_and_ships_what_it_chose(tmp_path: Path) -> None:
    """select = "fastest" times every candidate serving of every bucket on this machine
    (the CPU here, both called directly: which wins is the machine's business); each bucket
    records every time, ships an artifact exactly when compiled won, and the bundle serves
    every size like eager."""
    from aot.model.select import Serving, candidates, choose

    out, arts, entries = _build_fastest(tmp_path)
    for b in arts.buckets:
        timed = b.metrics["timed_us"]
        assert sorted(timed) == ["compiled direct", "eager direct"] and min(timed.values()) > 0
        won = choose({s: timed[s.label] for s in candidates("cpu")})
        assert Serving(b.impl, b.graph) == won
        assert (b.entry in entries) if b.impl == "compiled" else b.entry == ""
    assert entries == {b.entry for b in arts.buckets if b.entry}
    report = out.with_suffix(".report.md").read_text()
    assert "| timed µs | serves |" in report and "compiled direct " in report
    _serves_like_eager(out, _module())


def test_eager_buckets_ship_nothing_and_serve_the_module(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Where eager measured faster (forced here for batch 2), the bucket ships no artifact
    and the loader serves the module's own forward there, padding included; batch 1 stays
    compiled. Loading and calling compile nothing in a fresh process."""
    import aot.model.select as ms
    from aot.model.select import Serving, ServingChoice

    def measure(torch: Any, compiled: Any, eager: Any, inputs: Any, device: Any) -> ServingChoice:
        assert list(compiled) == [""]  # one mode: its label is empty
        assert [type(x) for x in compiled[""](*inputs)] == [type(x) for x in eager(*inputs)]
        times = {"compiled direct": 2.0, "eager direct": 1.0}
        if inputs[0].shape[0] == 2:
            return ServingChoice(Serving("eager", False), times, {})
        return ServingChoice(Serving("compiled", False), {**times, "compiled direct": 0.5}, {})

    monkeypatch.setattr(ms, "measure", measure)
    out, arts, entries = _build_fastest(tmp_path)
    impls = {b.bucket: (b.impl, b.entry) for b in arts.buckets}
    assert sorted(entries) == sorted(e for _, e in impls.values() if e)
    assert impls[(2, 8)] == impls[(2, 16)] == ("eager", "")
    assert impls[(1, 8)][0] == impls[(1, 16)][0] == "compiled"
    report = out.with_suffix(".report.md").read_text()
    assert "| compiled direct 2.0; eager direct 1.0 | eager direct |" in report
    runner = _serves_like_eager(out, _module(seed=5))
    # served directly, the module's call is all there is: no lock, its own output; with
    # autograd on (the longer path, which turns it off), an output without a graph
    x = torch.randn(2, 11, 32)
    bucket = runner.bucket_for(runner.sizes([x]))
    assert bucket.module_direct and bucket.serves == "eager direct"

    class NoLock:
        def __enter__(self) -> None:
            raise AssertionError("the direct path took the bucket's lock")

        def __exit__(self, *exc: Any) -> None:
            pass

    bucket.lock = NoLock()  # type: ignore[assignment]
    with torch.no_grad():
        torch.testing.assert_close(runner(x), runner.module(x), rtol=0, atol=0)
    bucket.lock = threading.Lock()
    y = runner(x)
    assert y.grad_fn is None and not y.requires_grad and torch.is_grad_enabled()
    counts = _serve_fresh(out, tmp_path)
    assert counts["inductor_codegen"] == counts["triton_compile"] == 0, counts
    assert counts["max_err"] < 1e-5, counts


def test_an_eager_forward_that_cannot_be_served_keeps_the_bucket_compiled(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A forward that fails as served (on a GPU: one that cannot be captured) is no
    candidate: the bucket ships compiled, with the reason in its metrics and the report.
    One whose compiled artifact fails as served is a build error: the loader would fail
    there too."""
    import aot.model.select as ms

    def uncapturable(module: Any) -> Any:
        def run(*xs: Any) -> Any:
            raise RuntimeError("operation not permitted when stream is capturing")

        return run

    monkeypatch.setattr(ms, "eager_call", uncapturable)
    out, arts, _ = _build_fastest(tmp_path)
    for b in arts.buckets:
        assert b.impl == "compiled" and list(b.metrics["timed_us"]) == ["compiled direct"]
        (why,) = b.metrics["not_servable"].values()
        assert why.startswith("RuntimeError: operation not permitted")
    report = out.with_suffix(".report.md").read_text()
    assert report.count("eager direct: not servable (RuntimeError: operation not permitted") == 4

    def broken(*a: Any, **k: Any) -> Any:
        raise RuntimeError("capture failed")

    monkeypatch.setattr(ms, "measure", broken)
    message = (r"\[model\] at batch=1, seq=8: the compiled artifact does not run as the "
               r"loader serves it: .*capture failed")  # fmt: skip
    with pytest.raises(BuildError, match=message):
        build(_fastest(tmp_path), tmp_path / "x.aotc", env_for(tmp_path / "c"), tmp_path,
              model=ModelOptions(device="cpu"))  # fmt: skip
    assert not (tmp_path / "x.aotc").exists()


def test_measure_picks_the_fastest_and_ties_go_to_compiled() -> None:
    import time

    from aot.model.select import Serving, choose, measure

    def slow(*xs: Any) -> list[Any]:
        time.sleep(0.002)
        return list(xs)

    def fast(*xs: Any) -> list[Any]:
        return list(xs)

    x = [torch.zeros(2)]
    cpu = torch.device("cpu")
    got = measure(torch, {"": slow}, fast, x, cpu)
    assert got.serving == Serving("eager", False) and got.errors == {}
    assert got.times_us["compiled direct"] > 1500 > got.times_us["eager direct"]
    assert measure(torch, {"": fast}, slow, x, cpu).serving == Serving("compiled", False)
    graph, eager = Serving("compiled", True), Serving("eager", True)
    direct = Serving("eager", False)
    assert choose({graph: 5.0, eager: 5.0, direct: 5.0}) == graph
    assert choose({graph: 5.0, eager: 4.9, direct: 4.9}) == eager
    assert choose({graph: 5.0, eager: 4.9, direct: 4.8}) == direct


def test_interleaved_takes_turns_call_by_call_and_rotates_who_goes_first() -> None:
    from aot.model.select import interleaved

    log: list[str] = []
    clock = iter(range(1000))

    def timer(name: str) -> Any:
        def t() -> float:
            log.append(name)
            return float(next(clock))

        return t

    got = interleaved([timer("a"), timer("b"), timer("c")], n=3, warmup=1)
    # one untimed turn, then three timed ones; each turn starts one further along
    assert "".join(log) == "abc" + "bca" + "cab" + "abc"
    # the clock's values 3, 4, 5 went to b, c, a in the first timed turn, and so on
    assert got == [[5.0, 7.0, 9.0], [3.0, 8.0, 10.0], [4.0, 6.0, 11.0]]


def test_unknown_inductor_option_is_refused(tmp_path: Path) -> None:
    text = (DATA / "tiny.toml").read_text() + "options = { max_autotune_gem = true }\n"
    (tmp_path / "tiny.py").write_text((DATA / "tiny.py").read_text())
    (tmp_path / "r.toml").write_text(text)
    with pytest.raises(BuildError, match=r"\[model\].options.max_autotune_gem: not a "
                       r"TorchInductor setting in torch"):  # fmt: skip
        build(tmp_path / "r.toml", tmp_path / "x.aotc", env_for(tmp_path / "c"), tmp_path,
              model=ModelOptions(device="cpu"))  # fmt: skip
    assert not (tmp_path / "x.aotc").exists()


@pytest.fixture(scope="module")
def aoti_bundle(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The tiny layer through AOTInductor: one bucket (a package is a C++ build, ~30 s)."""
    tmp = tmp_path_factory.mktemp("aoti")
    text = (DATA / "tiny.toml").read_text().replace("batch = [1, 2], seq = [8, 16]",
                                                    "batch = [2], seq = [16]")  # fmt: skip
    (tmp / "tiny.py").write_text((DATA / "tiny.py").read_text())
    (tmp / "tiny.toml").write_text(text.replace('backend = "inductor"', 'backend = "aoti"'))
    out = tmp / "tiny.aotc"
    build(tmp / "tiny.toml", out, env_for(tmp / "cache"), tmp, model=ModelOptions(device="cpu"))
    return out


def test_aoti_package_with_a_static_cxx_runtime_is_refused(tmp_path: Path) -> None:
    """A compiler that links libstdc++ into the package's library (as the H200 image's $CXX
    does) yields a library that crashes when a PyTorch process loads it: the build says so,
    names the fix, and writes nothing."""
    cxx = tmp_path / "static-gxx"
    cxx.write_text('#!/bin/sh\ncase " $* " in *" -shared "*) exec g++ "$@" -static-libstdc++;; '
                   'esac\nexec g++ "$@"\n')  # fmt: skip
    cxx.chmod(0o755)
    text = (DATA / "tiny.toml").read_text().replace("batch = [1, 2], seq = [8, 16]",
                                                    "batch = [2], seq = [16]")  # fmt: skip
    text = text.replace('backend = "inductor"', 'backend = "aoti"')
    (tmp_path / "tiny.py").write_text((DATA / "tiny.py").read_text())
    (tmp_path / "r.toml").write_text(text + f'options = {{ "cpp.cxx" = "{cxx}" }}\n')
    with pytest.raises(
        BuildError,
        match=r"(?s)the AOTInductor library built by .*static-gxx "
        r"does not load the shared C\+\+ runtime.*\[model\].options.\"cpp.cxx\"",
    ):
        build(tmp_path / "r.toml", tmp_path / "x.aotc", env_for(tmp_path / "c"), tmp_path,
              model=ModelOptions(device="cpu"))  # fmt: skip
    assert not (tmp_path / "x.aotc").exists()


def test_aoti_backend_matches_eager_and_loads_no_compiler(
    aoti_bundle: Path, tmp_path: Path
) -> None:
    from loader.manifest import Manifest

    with BundleFile(aoti_bundle) as f:
        spec = Manifest.from_json(f.manifest).model
    assert spec is not None and spec.artifacts[0].backend == "aoti"
    sizes = [(2, 16), (1, 16), (2, 9), (1, 3)]
    _serves_like_eager(aoti_bundle, _module(seed=11), sizes)
    # a fresh process serves it without importing Inductor, Dynamo or Triton at all
    result = _serve_fresh(aoti_bundle, tmp_path, sizes, START + SERVE)
    assert result["heavy"] == [] and result["max_err"] < 1e-5, result


def test_several_modes_compile_each_and_the_fastest_serves(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """``mode = ["default", "max-autotune"]``: the bucket is compiled in both modes (one
    cache entry each), every artifact is timed against the module, and the winner ships,
    named by its mode in the manifest, the report, ``aotc inspect`` and the loader. A
    rebuild takes both from the cache. (Matmuls through ATen: Inductor's C++ matmul
    templates on the CPU add packed constants that no manifest lists.)"""
    from aot.cli import main
    from aot.model.select import Serving, candidates, choose
    from loader.manifest import Manifest

    text = (DATA / "tiny.toml").read_text().replace("batch = [1, 2], seq = [8, 16]",
                                                    "batch = [2], seq = [8]")  # fmt: skip
    text = text.replace('backend = "inductor"', 'backend = "aoti"')
    text = text.replace('mode = "default"', 'mode = ["default", "max-autotune"]')
    text = text.replace('select = "compiled"', 'select = "fastest"')
    (tmp_path / "tiny.py").write_text((DATA / "tiny.py").read_text())
    (tmp_path / "r.toml").write_text(text + 'options = { max_autotune_gemm_backends = "ATEN" }\n')
    out, env = tmp_path / "t.aotc", env_for(tmp_path / "c")
    build(tmp_path / "r.toml", out, env, tmp_path, model=ModelOptions(device="cpu"))
    with BundleFile(out) as f:
        spec = Manifest.from_json(f.manifest).model
        entries = set(f.entries)
    assert spec is not None
    arts = spec.artifacts[0]
    (b,) = arts.buckets
    assert arts.mode == "default+max-autotune" and set(b.metrics["modes"]) == {
        "default", "max-autotune"}  # fmt: skip
    timed = b.metrics["timed_us"]
    assert sorted(timed) == ["compiled default direct", "compiled max-autotune direct",
                             "eager direct"]  # fmt: skip
    won = choose({s: timed[s.label] for s in candidates("cpu", ["default", "max-autotune"])})
    assert (b.impl, b.graph, b.mode) == (won.impl, won.graph, won.mode)
    assert bool(b.entry) == (won.impl == "compiled") and entries >= ({b.entry} - {""})
    line = next(x for x in out.with_suffix(".report.md").read_text().splitlines()
                if x.startswith("| batch=2, seq=8 |"))  # fmt: skip
    assert line.endswith(f"| {won.label} |") and "compiled default direct " in line
    runner = _serves_like_eager(out, _module(seed=13), [(2, 8), (1, 5)])
    assert runner.bucket_for({"batch": 2, "seq": 8}).serves == won.label
    assert main(["inspect", str(out)]) == 0
    assert f"{won.label}: " in capsys.readouterr().out
    # both modes' artifacts are in the cache: a rebuild compiles nothing
    build(tmp_path / "r.toml", out, env, tmp_path, model=ModelOptions(device="cpu"))
    assert "| batch=2, seq=8 | cached |" in out.with_suffix(".report.md").read_text()
    assert Serving("compiled", False, "default").label == "compiled default direct"


def test_inspect_lists_the_model(tiny_bundle: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from aot.cli import main

    assert main(["inspect", str(tiny_bundle)]) == 0
    out = capsys.readouterr().out
    assert "model layer (tiny.py:make_layer): x: fp32['batch', 'seq', 32] -> 1 outputs" in out
    assert "cpu (cpu, " in out and "default, inductor):" in out
    assert "batch=2,seq=16" in out and "rel err" in out
