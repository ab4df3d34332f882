"""Where a model bucket's GPU time goes: the kernels of eager PyTorch and of the bundle's
artifact (called directly, no CUDA graph, so every kernel shows), side by side.

    python benchmarks/model_kernel_profile.py --bundle artifacts/layer-0.1.0.aotc 4x2048

Prints, per shape, the total CUDA time of each and its top kernels (name, calls, µs per
call of the model). Needs a GPU.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]


def kernels(torch: Any, fn: Any, reps: int) -> dict[str, tuple[int, float]]:
    """{kernel name: (calls per model call, µs per model call)} over ``reps`` calls."""
    from torch.profiler import ProfilerActivity, profile

    for _ in range(3):
        fn()
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        for _ in range(reps):
            fn()
        torch.cuda.synchronize()
    out: dict[str, tuple[int, float]] = {}
    for e in prof.key_averages():
        us = e.device_time_total if hasattr(e, "device_time_total") else e.cuda_time_total
        if us > 0 and e.count >= reps:
            out[e.key] = (e.count // reps, us / reps)
    return out


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--bundle", type=Path, required=True)
    p.add_argument("--recipe", type=Path, default=ROOT / "recipes" / "layer.toml")
    p.add_argument("--reps", type=int, default=20)
    p.add_argument("--top", type=int, default=8)
    p.add_argument("shapes", nargs="+", help="BxT")
    args = p.parse_args()
    sys.path.insert(0, str(ROOT))
    sys.path.insert(0, str(ROOT / "recipes" / "models"))
    import torch
    from layer import make_layer

    import loader
    from aot.recipe import load

    model = load(args.recipe).model
    assert model is not None
    m = make_layer(**model.kwargs).cuda().half().eval()
    runner = loader.load_model(args.bundle, m, cuda_graphs=False)
    with torch.no_grad():
        for shape in args.shapes:
            b, t = (int(v) for v in shape.lower().split("x"))
            x = torch.randn(b, t, model.kwargs["d_model"], device="cuda", dtype=torch.half)
            for name, fn in (("eager", lambda: m(x)), ("aotc", lambda: runner(x))):  # noqa: B023
                ks = kernels(torch, fn, args.reps)
                total = sum(us for _, us in ks.values())
                top = sorted(ks.items(), key=lambda kv: -kv[1][1])[: args.top]
                print(json.dumps({"shape": shape, "who": name, "gpu_us": round(total, 1),
                                  "kernels": len(ks)}), flush=True)  # fmt: skip
                for k, (n, us) in top:
                    print(f"  {us:8.1f} us  x{n}  {k[:110]}", flush=True)


if __name__ == "__main__":
    main()
