"""Host cost of a call through an op (``bundle["gemm"]``) against the kernel it routes to,
in Python, on the CPU.

Run from the repository root on any machine with Triton (no GPU, no torch needed):

    python benchmarks/op_host_cpu.py [-n 20000] [--repeats 7]

It builds recipes/example.toml for this CPU (every bucket of its op then routes to
``matmul``), and also routes the op, as a GPU build that measured the TMA kernel faster
would, to ``matmul_tma``; then it calls each kernel directly and through the op, against
the fake driver of tests/fakecuda.py with cuLaunchKernel and cuTensorMapEncodeTiled a C
no-op (benchmarks/host_path_cpu.py): what is measured is the loader's Python. Each row
prints the best of ``--repeats`` samples of ``-n`` calls, in µs per call, and the op's
cost over the direct call.
"""

from __future__ import annotations

import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import loader  # noqa: E402
from aot.build import build  # noqa: E402
from aot.env import Environment  # noqa: E402
from benchmarks.host_path_cpu import install_noop_driver, measure, options  # noqa: E402
from loader.op import Op, OpRoute, OpSpec  # noqa: E402
from tests.test_descriptors import Tensor  # noqa: E402


def main() -> None:
    opts = options(__doc__ or "")
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        env = Environment(cache_dir=root / "cache", jobs=2, progress=False)
        build(ROOT / "recipes" / "example.toml", root / "example.aotc", env, root)
        install_noop_driver("cuTensorMapEncodeTiled")  # after the build: no GPU to tune on
        bundle = loader.open(root / "example.aotc")
        m = n = k = 128
        a, b, c = Tensor(0x100000, (m, k)), Tensor(0x200000, (k, n)), Tensor(0x300000, (m, n))
        args = (a, b, c, m, n, k, k, 1, n, 1, n, 1)
        mm, tma, gemm = bundle["matmul"], bundle["matmul_tma"], bundle["gemm"]
        buckets = len(mm.spec.buckets[0])
        route = OpRoute(bundle.target.name, {"T": "fp16"}, ("matmul_tma",) * buckets,
                        ("measured",) * buckets)  # fmt: skip
        to_tma = Op(OpSpec("gemm", ("matmul", "matmul_tma"), (route,)), [mm, tma],
                    bundle.target.name)  # fmt: skip
        rows = {
            "matmul(*args)": lambda: mm(*args),
            "gemm(*args), routed to matmul": lambda: gemm(*args),
            "matmul_tma(a, b, c, M, N, K)": lambda: tma(*args[:6]),
            "gemm(*args), routed to matmul_tma": lambda: to_tma(*args),
        }
        results = measure(rows, opts.n, opts.repeats)
        bundle.close()
    print(f"\nhost cost per call in Python, no-op driver calls (best of {opts.repeats}, µs)")
    names = list(results)
    for direct, via in ((names[0], names[1]), (names[2], names[3])):
        print(f"{direct:<40}{results[direct]:>8.2f}")
        print(f"{via:<40}{results[via]:>8.2f}{results[via] - results[direct]:>+9.2f}")


if __name__ == "__main__":
    main()
