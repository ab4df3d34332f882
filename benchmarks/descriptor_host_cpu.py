"""Host cost of a call with TMA descriptors against plain pointers, in Python, on the CPU.

Run from the repository root on any machine with Triton (no GPU, no torch needed):

    python benchmarks/descriptor_host_cpu.py [-n 20000] [--repeats 7]

It builds tests/test_descriptors.py's recipe (recipes/hopper's matmul with host descriptors,
and the same product with in-kernel descriptors, which takes plain pointers and strides)
for sm_90 on this CPU, then calls both through the loader against the fake driver of
tests/fakecuda.py, whose cuLaunchKernel and cuTensorMapEncodeTiled are a C function that
returns 0 at once (as in benchmarks/host_path_cpu.py): the ctypes calls cost what real ones
cost on the host, the driver's own work is left out, and everything else measured is the
loader's Python. Tensors are stand-ins with torch's attributes. Each row prints the best of
``--repeats`` samples of ``-n`` calls, in µs per call, and the difference to the
plain-pointer call. The same rows on an H200 are benchmarks/hopper_bench.py's "host" table.
"""

from __future__ import annotations

import shutil
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import loader  # noqa: E402
from aot.build import build  # noqa: E402
from aot.env import Environment  # noqa: E402
from benchmarks.host_path_cpu import install_noop_driver, measure, options  # noqa: E402
from tests.test_descriptors import HOPPER, RECIPE, Tensor  # noqa: E402


def rows(bundle: loader.Bundle) -> dict[str, Callable[[], object]]:
    m = n = k = 128
    a, b, c = Tensor(0x100000, (m, k)), Tensor(0x200000, (k, n)), Tensor(0x300000, (m, n))
    plain = bundle["matmul_tma_device"]
    described = bundle["matmul_tma"]
    plain_args = (a, b, c, m, n, k, k, n, n)
    desc_args = (a, b, c, m, n, k)
    plain_path = plain.host_path(*plain_args)
    desc_path = described.host_path(*desc_args)
    fresh = [Tensor(0x400000 + 256 * i, (m, n)) for i in range(300)]  # more than the cache
    turn = iter(range(1 << 62))

    def new_output() -> None:
        described(a, b, fresh[next(turn) % len(fresh)], m, n, k)

    return {
        "plain pointers: k(*tensors) (fast path)": lambda: plain(*plain_args),
        "descriptors: k(*tensors) (fast path, maps cached)": lambda: described(*desc_args),
        "descriptors, a new output tensor each call": new_output,
        "plain pointers: Launcher.launch": plain_path.launch,
        "descriptors: Launcher.launch (expand, pack, C call)": desc_path.launch,
        "descriptors: checked path": desc_path.checked,
    }


def main() -> None:
    opts = options(__doc__ or "")
    install_noop_driver("cuTensorMapEncodeTiled")
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        shutil.copytree(HOPPER, root / "hopper")
        (root / "tma.toml").write_text(RECIPE)
        env = Environment(cache_dir=root / "cache", jobs=2, progress=False)
        build(root / "tma.toml", root / "tma.aotc", env, root)
        bundle = loader.open(root / "tma.aotc")
        results = measure(rows(bundle), opts.n, opts.repeats)
        bundle.close()
    base = results["plain pointers: k(*tensors) (fast path)"]
    print(f"\nhost cost per call in Python, no-op driver calls (best of {opts.repeats}, µs)")
    for name, us in results.items():
        print(f"{name:<56}{us:>8.2f}{us - base:>+9.2f}")


if __name__ == "__main__":
    main()
