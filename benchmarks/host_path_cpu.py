"""Host cost of one kernel call in Python, on the CPU: checked path vs fast path.

Run from the repository root on any machine (no GPU, no torch needed):

    python benchmarks/host_path_cpu.py [-n 20000] [--repeats 7]

The loader runs against the fake driver in tests/fakecuda.py, except that its
cuLaunchKernel is a C function that returns 0 at once (libm's ``fegetround``, declared with
cuLaunchKernel's arguments), so the ctypes call costs what a real one costs on the host
and everything else measured is the loader's own Python. The kernel is tests/handmade.py's
``scale(x, out, M, N, stride, scale)``; tensors are stand-ins with torch's attributes
(``dtype``, ``is_cuda``, ``data_ptr()``); a real tensor's attribute reads cost a little
more. Each row prints the best of ``--repeats`` samples of ``-n`` calls, in µs per call.
benchmarks/launch_overhead.py measures the same on a GPU, against Triton's launcher.
"""

from __future__ import annotations

import argparse
import ctypes
import ctypes.util
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import loader  # noqa: E402
from loader import driver  # noqa: E402
from tests import handmade  # noqa: E402
from tests.fakecuda import FakeLib  # noqa: E402


class Tensor:
    """What the loader reads of a torch tensor."""

    __slots__ = ("addr", "dtype", "is_cuda")

    def __init__(self, addr: int, dtype: str = "torch.float16"):
        self.addr, self.dtype, self.is_cuda = addr, dtype, True

    def data_ptr(self) -> int:
        return self.addr


def noop_launch() -> Any:
    """A C function that returns 0 and ignores its arguments, to stand for cuLaunchKernel."""
    noop = ctypes.CDLL(ctypes.util.find_library("m") or "libm.so.6")["fegetround"]
    noop.restype = ctypes.c_int
    if noop() != 0:  # FE_TONEAREST is 0 on x86-64 and aarch64
        raise SystemExit("fegetround() is not 0 here; cannot stand in for cuLaunchKernel")
    return noop


def rows(k: loader.Kernel) -> dict[str, Callable[[], object]]:
    args = (Tensor(0x10000), Tensor(0x20000), 20, 256, 1, 2.0)
    raw = (0x10000, 0x20000, 20, 256, 1, 2.0)
    fp16 = {"T": "fp16"}
    path = k.host_path(*args)  # the call's pieces (loader/profile.py); teaches the fast path
    return {
        "checked path: convert, binding, select, launch": path.checked,
        "raw pointers + dtypes= (checked path)": lambda: k(*raw, dtypes=fp16),
        "fast path: k(*tensors)": lambda: k(*args),
        "  its lookup (signature, pointers, variant)": path.lookup,
        "  its Launcher.launch (pack, grid, C call)": path.launch,
        "  its C call alone (untyped ctypes)": path.driver_call,
        "for comparison: the C call with argtypes": path.driver_call_typed,
    }


def measure(fns: dict[str, Callable[[], object]], n: int, repeats: int) -> dict[str, float]:
    best = dict.fromkeys(fns, float("inf"))
    for _ in range(repeats):  # interleaved, so that a noisy moment does not hit one row only
        for name, fn in fns.items():
            t0 = time.perf_counter()
            for _ in range(n):
                fn()
            best[name] = min(best[name], (time.perf_counter() - t0) / n * 1e6)
    return best


def options(doc: str) -> argparse.Namespace:
    """-n and --repeats, the options of this script and benchmarks/descriptor_host_cpu.py."""
    ap = argparse.ArgumentParser(description=doc.split("\n")[0])
    ap.add_argument("-n", type=int, default=20000, help="calls per sample")
    ap.add_argument("--repeats", type=int, default=7, help="samples per row (best is shown)")
    return ap.parse_args()


def install_noop_driver(*calls: str) -> None:
    """The fake driver, with cuLaunchKernel and ``calls`` a C no-op, installed."""
    lib = FakeLib()
    for name in ("cuLaunchKernel", *calls):
        setattr(lib, name, noop_launch())
    driver.install(driver.Driver(lib))


def main() -> None:
    opts = options(__doc__ or "")
    install_noop_driver()
    with tempfile.TemporaryDirectory() as tmp:
        bundle = loader.open(handmade.write(Path(tmp) / "scale.aotc"))
        results = measure(rows(bundle.kernel("scale")), opts.n, opts.repeats)
        bundle.close()
    print(f"\nhost cost per call in Python, no-op cuLaunchKernel (best of {opts.repeats}, µs)")
    for name, us in results.items():
        print(f"{name:<52}{us:>8.2f}")


if __name__ == "__main__":
    main()
