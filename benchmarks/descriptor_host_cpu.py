"""Host cost of a call with TMA descriptors against plain pointers, in Python, on the CPU.

Run from the repository root on any machine with Triton (no GPU, no torch needed):

    python benchmarks/descriptor_host_cpu.py [-n 20000] [--repeats 7]

It builds tests/test_descriptors.py's recipe (recipes/hopper's matmul with host descriptors,
and the same product with in-kernel descriptors, which takes plain pointers and strides)
and tests/test_splitk_workspace.py's split-K kernel with and without its workspace check
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
from tests.test_splitk_workspace import RECIPE as SPLITK_RECIPE  # noqa: E402

# The split-K kernel without its workspace check: no call values, no constraints on them.
UNCHECKED_RECIPE = "\n".join(
    "sizes = { N = 4096, K = 4096 }" if line.startswith("sizes =") else line
    for line in SPLITK_RECIPE.replace('name = "splitk"', 'name = "splitk_unchecked"').splitlines()
    if not line.startswith(("call =", '  "SPLIT_K == 1 or'))
)


def splitk_rows(
    checked: loader.Bundle, unchecked: loader.Bundle
) -> dict[str, Callable[[], object]]:
    """The split-K kernel with and without its workspace check (two call values read off
    the buffers' shapes, two constraints per call), otherwise the same call."""
    m, n, k = 100, 4096, 4096
    tiles = -(-m // 64) * (n // 128)
    args = (Tensor(0x100000, (m, k)), Tensor(0x200000, (k, n)), Tensor(0x300000, (m, n)),
            Tensor(0x400000, (tiles * 4 * 64 * 128,), dtype="torch.float32"),
            Tensor(0x500000, (tiles,), dtype="torch.int32"), m, n, k)  # fmt: skip
    with_check, without = checked["splitk"], unchecked["splitk_unchecked"]
    return {
        "split-K, workspace unchecked: k(*tensors) (fast path)": lambda: without(*args),
        "split-K, workspace checked: k(*tensors) (fast path)": lambda: with_check(*args),
    }


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
        built = {}
        for name, text in (("tma", RECIPE), ("splitk", SPLITK_RECIPE),
                           ("unchecked", UNCHECKED_RECIPE)):  # fmt: skip
            (root / f"{name}.toml").write_text(text)
            build(root / f"{name}.toml", root / f"{name}.aotc", env, root)
            built[name] = loader.open(root / f"{name}.aotc")
        table = {**rows(built["tma"]), **splitk_rows(built["splitk"], built["unchecked"])}
        results = measure(table, opts.n, opts.repeats)
        for b in built.values():
            b.close()
    base = results["plain pointers: k(*tensors) (fast path)"]
    print(f"\nhost cost per call in Python, no-op driver calls (best of {opts.repeats}, µs)")
    for name, us in results.items():
        print(f"{name:<56}{us:>8.2f}{us - base:>+9.2f}")
    cost = (results["split-K, workspace checked: k(*tensors) (fast path)"]
            - results["split-K, workspace unchecked: k(*tensors) (fast path)"])  # fmt: skip
    print(f"the split-K workspace check costs {cost:+.2f} µs per call")


if __name__ == "__main__":
    main()
