"""Probe: the layer compiled by AOTInductor at a mode, called directly, against eager.

    python benchmarks/probe_aoti_direct.py 32x2048                  # mode default
    python benchmarks/probe_aoti_direct.py 16x2048 --mode max-autotune

Exports recipes/layer.toml's module (fp16, random weights) at one shape, compiles it with
``torch._inductor.aoti_compile_and_package`` (the weights inside the package: this is a
probe, not model mode), loads it and times one call of it against one of the module, each
from an idle GPU, taking turns (``aot.model.select.interleaved``), 100 pairs. Prints one
JSON line: compile seconds, relative error against eager, the medians, and the paired
ratio eager/package with its 95% interval (``model_bench.paired_ratio``).
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(Path(__file__).resolve().parent))
from model_bench import paired_ratio, shape_arg, verdict  # noqa: E402


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("shape", type=shape_arg, metavar="BxT", help="batch x seq, e.g. 32x2048")
    p.add_argument("--mode", default="default", choices=("default", "max-autotune"))
    p.add_argument("--reps", type=int, default=100)
    args = p.parse_args()
    sys.path[:0] = [str(ROOT), str(ROOT / "recipes" / "models")]
    import torch
    from layer import make_layer

    from aot.model.select import call_us, interleaved
    from aot.recipe.model import MODES

    torch.manual_seed(0)
    m = make_layer().cuda().half().eval()
    b, t = args.shape
    x = torch.randn(b, t, 1024, device="cuda", dtype=torch.half)
    configs = dict(torch._inductor.list_mode_options(MODES[args.mode]))
    configs["cpp.cxx"] = shutil.which("g++")  # see aot/model/plan.py, aoti_compiler
    with torch.no_grad(), tempfile.TemporaryDirectory() as tmp:
        ep = torch.export.export(m, (x,))
        ref = m(x).float()
        t0 = time.perf_counter()
        path = torch._inductor.aoti_compile_and_package(
            ep, package_path=f"{tmp}/layer.pt2", inductor_configs=configs
        )
        compile_s = time.perf_counter() - t0
        run = torch._inductor.aoti_load_package(path)
        y = run(x)
        y = (y[0] if isinstance(y, list | tuple) else y).float()
        err = float((y - ref).abs().max() / ref.abs().max())
        timers = [lambda: call_us(torch, lambda: m(x), True),
                  lambda: call_us(torch, lambda: run(x), True)]  # fmt: skip
        eager, aoti = interleaved(timers, args.reps, 10)
        ci = paired_ratio(eager, aoti)
    print(json.dumps({"shape": f"{b}x{t}", "mode": args.mode, "compile_s": round(compile_s, 1),
                      "rel_err": err, "eager_us": round(statistics.median(eager), 1),
                      "aoti_us": round(statistics.median(aoti), 1),
                      "aoti_vs_eager": [round(c, 4) for c in ci],
                      "verdict": verdict(ci)}))  # fmt: skip


if __name__ == "__main__":
    main()
