"""What serving a bucket through ``loader.load_model`` costs over calling the module.

    python benchmarks/model_call_overhead.py --bundle artifacts/layer-0.1.0.aotc 4x2048 32x512

For buckets the build chose to serve directly (``eager direct``: the module's own forward),
the loader adds only its per-call Python (route the shapes to a bucket, autograd off, the
bucket's lock) before the first kernel starts; from an idle GPU that delay is all of the
difference. Prints, per shape, the median latency (CUDA events, one call from an idle GPU,
the contenders taking turns call by call) of the module, the runner, and the route lookup
followed by the module, and the module's time over the runner's paired per turn with its
95% interval (``verdict``: faster, slower or tie); then the runner's host time per call
over a no-op module's.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import timeit
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from model_bench import layer_runner, paired_ratio, samples_us, shape_arg, verdict


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--bundle", type=Path, required=True, help="a bundle of recipes/layer.toml")
    p.add_argument("shapes", type=shape_arg, nargs="+", metavar="BxT",
                   help="batch x seq, e.g. 4x2048")  # fmt: skip
    p.add_argument("--reps", type=int, default=100)
    args = p.parse_args()
    torch, m, r = layer_runner(args.bundle)
    with torch.no_grad():
        for b, t in args.shapes:
            x = torch.randn(b, t, 1024, device="cuda", dtype=torch.half)
            fns = {"module": lambda: m(x), "runner": lambda: r(x),  # noqa: B023
                   "route+module": lambda: (r.route((x,)), m(x))}  # noqa: B023 # fmt: skip
            got = samples_us(torch, fns, args.reps)
            serves = r.bucket_for(r.sizes([x])).serves
            ci = paired_ratio(got["module"], got["runner"])  # > 1: the runner is faster
            print(json.dumps({"shape": f"{b}x{t}", "serves": serves,
                              **{f"{k}_us": round(statistics.median(v), 1)
                                 for k, v in got.items()},
                              "runner_vs_module": [round(c, 4) for c in ci],
                              "verdict": verdict(ci)}))  # fmt: skip
        # the runner's own host time: its direct path (a bucket the module serves directly)
        # with a no-op in place of the module, less the no-op called alone
        b, t = args.shapes[0]
        x = torch.randn(b, t, 1024, device="cuda", dtype=torch.half)
        bucket = r.bucket_for(r.sizes([x]))
        bucket.module_direct = True
        r.module = noop = torch.nn.Identity()
        n = 20000
        us = {name: min(timeit.repeat(f, number=n, repeat=5)) / n * 1e6
              for name, f in (("runner", lambda: r(x)), ("noop", lambda: noop(x)))}  # fmt: skip
        print(json.dumps({"runner_host_us_over_noop_module": round(us["runner"] - us["noop"], 2),
                          "noop_module_us": round(us["noop"], 2)}))  # fmt: skip


if __name__ == "__main__":
    main()
