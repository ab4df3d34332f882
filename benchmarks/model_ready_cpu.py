"""Time to ready of the two model backends, on the CPU (any machine; a check of the
mechanism, not issue 5's GPU goal).

    python benchmarks/model_ready_cpu.py [--runs 3]

Builds tests/data/model/tiny.toml for the CPU twice, with backend "inductor" (a
standalone_compile artifact per bucket) and "aoti" (an AOTInductor package per bucket),
both with the same buckets (build results are cached in AOTC_CACHE_DIR), then times fresh
processes from start to the first result of every bucket, and counts the modules of
torch's compiler stack each one imported. Prints a side-by-side table.
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
DATA = ROOT / "tests" / "data" / "model"

CHILD = r"""
import json, sys, time
t0 = time.perf_counter()
import torch
t1 = time.perf_counter()
sys.path.insert(0, sys.argv[2])
import tiny, loader
m = tiny.make_layer(d_model=32, heads=2, ffn=64).eval()
runner = loader.load_model(sys.argv[1], m, warmup=True)
with torch.no_grad():
    for b, t in json.loads(sys.argv[3]):
        runner(torch.randn(b, t, 32))
heavy = [k for k in sys.modules if k.split(".")[0] == "triton"
         or k.startswith(("torch._inductor", "torch._dynamo"))]
print(json.dumps({"import_torch_s": t1 - t0, "ready_s": time.perf_counter() - t0,
                  "compiler_modules": len(heavy)}))
"""


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--runs", type=int, default=3)
    args = p.parse_args()
    sys.path.insert(0, str(ROOT))
    from aot.build import build
    from aot.env import from_environ
    from aot.model import ModelOptions

    work = Path(tempfile.mkdtemp(prefix="model-ready-"))
    (work / "tiny.py").write_text((DATA / "tiny.py").read_text())
    text = (DATA / "tiny.toml").read_text()
    grid = [(b, t) for b in (1, 2) for t in (8, 16)]
    rows = {}
    for backend in ("inductor", "aoti"):
        recipe = work / f"{backend}.toml"
        recipe.write_text(text + f'backend = "{backend}"\n')
        bundle = work / f"{backend}.aotc"
        build(recipe, bundle, from_environ(), work, model=ModelOptions(device="cpu"))
        runs = []
        for _ in range(args.runs):
            env = {**os.environ, "TORCHINDUCTOR_CACHE_DIR": tempfile.mkdtemp(prefix="ind-")}
            argv = [str(bundle), str(work), json.dumps(grid)]
            out = subprocess.run([sys.executable, "-c", CHILD, *argv], capture_output=True,
                                 text=True, env=env, check=True, cwd=ROOT)  # fmt: skip
            runs.append(json.loads(out.stdout.strip().splitlines()[-1]))
        rows[backend] = {
            "ready_s": statistics.median(r["ready_s"] for r in runs),
            "import_torch_s": statistics.median(r["import_torch_s"] for r in runs),
            "compiler_modules": runs[0]["compiler_modules"],
            "bundle_kib": bundle.stat().st_size / 1024,
        }
    print(f"tiny layer, {len(grid)} buckets, CPU, median of {args.runs} fresh processes\n")
    print("| backend | ready s | of which import torch s | compiler modules imported | "
          "bundle KiB |\n|---|---|---|---|---|")  # fmt: skip
    for name, r in rows.items():
        print(
            f"| {name} | {r['ready_s']:.2f} | {r['import_torch_s']:.2f} | "
            f"{r['compiler_modules']} | {r['bundle_kib']:.0f} |"
        )
    ratio = rows["inductor"]["ready_s"] / rows["aoti"]["ready_s"]
    print(f"\naoti ready {ratio:.1f}x sooner than inductor")


if __name__ == "__main__":
    main()
