"""Does a lazy CUDA graph capture survive another thread's allocations? (GPU)

Runs ``serve_while_another_thread_allocates`` from tests/gpu/test_model_gpu.py with the
loader's capture mode set to ``--mode``: a service thread allocates new GPU memory (one
cudaMalloc per step) and runs the module while this thread loads the bundle ``--rounds``
times without warm-up, capturing every bucket at first use. Prints one JSON line: the
mode, and how many calls or service-thread steps failed, with the first messages.

    python benchmarks/probe_capture_threads.py --bundle tiny.aotc --mode global
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--bundle", type=Path, required=True, help="a bundle of the tiny test layer")
    p.add_argument("--mode", choices=("global", "thread_local", "relaxed"), required=True)
    p.add_argument("--rounds", type=int, default=20)
    args = p.parse_args()
    sys.path[:0] = [str(ROOT), str(ROOT / "tests" / "gpu")]
    from test_model_gpu import serve_while_another_thread_allocates

    import loader.model_load

    loader.model_load.CAPTURE_MODE = args.mode
    errors = serve_while_another_thread_allocates(args.bundle, args.rounds)
    print(json.dumps({"mode": args.mode, "rounds": args.rounds, "errors": len(errors),
                      "first": errors[:3]}))  # fmt: skip


if __name__ == "__main__":
    main()
