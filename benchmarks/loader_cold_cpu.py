"""The loader's cold start on the CPU: a reference commit's loader against the working tree's.

Run from the repository root on any machine (no GPU needed; torch for the first row):

    python benchmarks/loader_cold_cpu.py [--ref 760ab74] [--runs 15] [--bundle B.aotc --kernel K]

A service's first result in a fresh process pays for ``import loader``, ``loader.open``,
the kernel's lookup (``bundle[name]``) and its first call before anything runs on the GPU.
Each of those is timed here in fresh processes, for the reference commit's ``loader/``
(``git archive`` of that commit, unpacked into a temporary folder) and for the working
tree's, interleaved run by run so that a busy moment on a shared machine hits both. A row
prints the median over ``--runs`` processes, in ms. Bytecode is cached for both (one
untimed run of each first, into a temporary ``PYTHONPYCACHEPREFIX``).

- ``import loader`` after ``import torch``: as a PyTorch service starts; torch has already
  imported most of the standard library the loader uses, so this is the loader's own cost.
- ``import loader`` alone: the standard library modules it needs are counted too.
- ``open``, ``bundle[name]`` and the first call: against the fake driver in
  tests/fakecuda.py (imported before the clock starts), after ``import torch``. The first
  call decompresses, checks and loads the variant's cubin, as on a GPU.

The bundle is artifacts/example-0.1.0.aotc if it exists, else the example recipe built on
the CPU (``aotc build recipes/example.toml``) into a temporary folder; its ``rmsnorm``
kernel is the one looked up and called. With ``--bundle`` (and ``--kernel``, default
rmsnorm), that bundle's kernel is looked up but not called (its arguments are unknown here).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

# The child: ``sys.argv[1:]`` = the loader's root, the mode, the bundle. It puts that root
# first on sys.path (ahead of the editable install's finder) and prints its timings as JSON.
CHILD = r"""
import json, sys, time
root, mode, bundle, _, name = sys.argv[1:6]
sys.path.insert(0, root)
out = {}
if mode == "torch":
    import torch  # noqa: F401
t0 = time.perf_counter()
import loader
out["import"] = time.perf_counter() - t0
assert loader.__file__.startswith(root), loader.__file__
if mode == "torch":
    import importlib.util
    spec = importlib.util.spec_from_file_location("fakecuda", sys.argv[4])
    fakecuda = sys.modules["fakecuda"] = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(fakecuda)
    from loader import driver
    driver.install(driver.Driver(fakecuda.FakeLib()))
    F = fakecuda.FakeTensor
    args = (F(0x10000), F(0x20000), F(0x30000), 8, 4096, 4096, 4096, 1e-6)
    t0 = time.perf_counter()
    b = loader.open(bundle)
    t1 = time.perf_counter()
    k = b[name]
    t2 = time.perf_counter()
    if sys.argv[6] == "call":
        k(*args)
    t3 = time.perf_counter()
    out.update(open=t1 - t0, lookup=t2 - t1, call=t3 - t2)
    out["modules"] = sorted(m for m in sys.modules if m.startswith("loader"))
print(json.dumps(out))
"""

Samples = dict[tuple[str, str], list[dict[str, object]]]  # by (tree, mode): one per process
ROWS = [
    ("import loader, after import torch", "torch", "import"),
    ("import loader, alone", "alone", "import"),
    ("loader.open(bundle)", "torch", "open"),
    ("bundle[kernel]", "torch", "lookup"),
    ("its first call (cubin loaded)", "torch", "call"),
]


def reference_tree(ref: str, into: Path) -> Path:
    """The loader/ folder of commit ``ref``, unpacked under ``into``."""
    tree = into / f"ref-{ref}"
    tree.mkdir()
    archive = subprocess.run(["git", "-C", str(ROOT), "archive", ref, "loader"],
                             check=True, capture_output=True).stdout  # fmt: skip
    subprocess.run(["tar", "-x", "-C", str(tree)], input=archive, check=True)
    return tree


def example_bundle(tmp: Path) -> Path:
    shipped = ROOT / "artifacts" / "example-0.1.0.aotc"
    if shipped.exists():
        return shipped
    out = tmp / "example.aotc"
    print(f"building {out} from recipes/example.toml (about a minute) ...", flush=True)
    subprocess.run([sys.executable, "-m", "aot.cli", "build", str(ROOT / "recipes" /
                    "example.toml"), "-o", str(out)], check=True, cwd=ROOT,
                   stdout=subprocess.DEVNULL)  # fmt: skip
    return out


def child(
    root: Path, mode: str, opts: argparse.Namespace, env: dict[str, str]
) -> dict[str, object]:
    call = "no-call" if opts.given else "call"
    cmd = [sys.executable, "-c", CHILD, str(root), mode, str(opts.bundle),
           str(ROOT / "tests" / "fakecuda.py"), opts.kernel, call]  # fmt: skip
    done = subprocess.run(cmd, capture_output=True, text=True, env=env, cwd="/")
    if done.returncode:
        raise SystemExit(f"{root} ({mode}) failed:\n{done.stderr}")
    result: dict[str, object] = json.loads(done.stdout.splitlines()[-1])
    return result


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--ref", default="760ab74", help="the reference commit (default 760ab74)")
    ap.add_argument("--runs", type=int, default=15, help="fresh processes per row and tree")
    ap.add_argument("--bundle", type=Path, help="the bundle to open (default: the example)")
    ap.add_argument("--kernel", default="rmsnorm", help="the kernel to look up (rmsnorm)")
    opts = ap.parse_args()
    opts.given = opts.bundle is not None
    print("rerun: python benchmarks/loader_cold_cpu.py " + " ".join(sys.argv[1:]))
    with tempfile.TemporaryDirectory(prefix="loader-cold-") as name:
        tmp = Path(name)
        opts.bundle = (opts.bundle or example_bundle(tmp)).resolve()
        trees = {"ref": reference_tree(opts.ref, tmp), "now": ROOT}
        env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
        env["PYTHONPYCACHEPREFIX"] = str(tmp / "pycache")
        samples: Samples = {}
        for mode in ("torch", "alone"):
            for tree, root in trees.items():
                child(root, mode, opts, env)  # warm: writes the bytecode
                samples[tree, mode] = []
        for _ in range(opts.runs):
            for mode in ("torch", "alone"):
                for tree, root in trees.items():
                    samples[tree, mode].append(child(root, mode, opts, env))
    report(opts, samples)


def report(
    opts: argparse.Namespace, samples: dict[tuple[str, str], list[dict[str, object]]]
) -> None:
    def median(tree: str, mode: str, key: str) -> float:
        return 1e3 * statistics.median(float(s[key]) for s in samples[tree, mode])  # type: ignore[arg-type]

    print(f"bundle: {opts.bundle} ({opts.kernel}); median of {opts.runs} fresh processes each, ms; "
          f"{os.cpu_count()} CPUs, {sys.version.split()[0]}")  # fmt: skip
    print(f"{'':38} {opts.ref:>9} {'now':>9} {'ratio':>7}")
    total = {"ref": 0.0, "now": 0.0}
    for label, mode, key in ROWS:
        if key == "call" and opts.given:
            continue
        ref, now = median("ref", mode, key), median("now", mode, key)
        if mode == "torch":
            total["ref"] += ref
            total["now"] += now
        print(f"{label:38} {ref:9.1f} {now:9.1f} {ref / now:6.1f}x")
    label = "sum of the rows after torch"
    print(f"{label:38} {total['ref']:9.1f} {total['now']:9.1f} {total['ref'] / total['now']:6.1f}x")
    for tree in ("ref", "now"):
        mods = samples[tree, "torch"][-1]["modules"]
        print(f"loader modules loaded ({tree}): {len(mods)}: {' '.join(mods)}")  # type: ignore[arg-type]


if __name__ == "__main__":
    main()
