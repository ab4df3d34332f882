"""Held-out FLA kernels from aotc bundles against FLA's own wrappers (their JIT, with
their autotune warm), on the GPU: outputs at scales None, 0.0 and 0.5, at and between the
buckets, against float64; then the time per call of each, side by side.

    python check.py cumsum BUNDLE      (with FLA's package and einops importable; run.sh)
    python check.py logsumexp BUNDLE
"""

import sys
from typing import Any

import torch
from calls import B, H, chunk_cumsum, logsumexp
from fla.ops.utils.cumsum import chunk_local_cumsum_scalar
from fla.ops.utils.logsumexp import logsumexp_fwd
from report import summary, us

import loader

SCALES = (None, 0.0, 0.5)


def cumsum(bundle: Any) -> tuple[int, list[tuple[str, float, float]]]:
    kernel, failed, rows = bundle["cumsum"], 0, []
    for t in (64, 1000, 1024, 3000, 4096, 16384, 20000):
        g = torch.randn(B, t, H, device="cuda", dtype=torch.float32)
        out = torch.empty_like(g)
        for scale in SCALES:
            out.fill_(float("nan"))
            kernel(g, out, scale, None, None, t)
            theirs = chunk_local_cumsum_scalar(g, 64, scale=scale)
            has = kernel.variant_for(g, out, scale, None, None, t).meta["HAS_SCALE"]
            failed += report(f"T={t:6}", scale, has, out, theirs, chunk_cumsum(g, scale))
        ours = us(lambda g=g, out=out, t=t: kernel(g, out, 0.5, None, None, t))
        fla = us(lambda g=g: chunk_local_cumsum_scalar(g, 64, scale=0.5))
        rows.append((f"T={t}", ours, fla))
    return failed, rows


def lse(bundle: Any) -> tuple[int, list[tuple[str, float, float]]]:
    kernel, failed, rows = bundle["logsumexp"], 0, []
    for n, d in ((1, 4096), (7, 4096), (64, 32000), (1000, 32000), (16384, 4096), (20000, 32000)):
        x = torch.randn(n, d, device="cuda", dtype=torch.float32)
        z = torch.empty(n, 1, device="cuda")
        for scale in SCALES:
            z.fill_(float("nan"))
            kernel(x, z, scale)
            theirs = logsumexp_fwd(x, scale=scale)[:, None]
            has = kernel.variant_for(x, z, scale).meta["HAS_SCALE"]
            failed += report(f"{n:5} x {d:5}", scale, has, z, theirs, logsumexp(x, scale))
        ours = us(lambda x=x, z=z: kernel(x, z, 0.5))
        fla = us(lambda x=x: logsumexp_fwd(x, scale=0.5))
        rows.append((f"{n} x {d}", ours, fla))
    return failed, rows


def report(at: str, scale: Any, has: bool, ours: Any, theirs: Any, want: Any) -> int:
    """Right: the bundle computes what the author's kernel computes through its own
    wrapper (NaN where it gives NaN), and both match float64 where the kernel does."""
    errors = [float((x.double() - want).abs().max()) for x in (ours, theirs)]
    tol = 1e-4 * max(1.0, float(want.abs().max()))
    same = torch.equal(ours.isnan(), theirs.isnan()) and float(
        (ours.double() - theirs.double()).nan_to_num().abs().max()) <= tol  # fmt: skip
    exact = errors[1] <= tol  # False where FLA's own result is off float64 (NaN, too)
    ok = same and (errors[0] <= tol or not exact) and has == (scale is not None)
    note = "" if exact else " (the kernel's own result: not float64's)"
    print(f"{at} scale={scale!s:5} HAS_SCALE={has!s:5} max error ours {errors[0]:.1e} "
          f"FLA {errors[1]:.1e} {'ok' if ok else 'WRONG'}{note}")  # fmt: skip
    return 0 if ok else 1


def main() -> int:
    which, path = sys.argv[1], sys.argv[2]
    failed, rows = {"cumsum": cumsum, "logsumexp": lse}[which](loader.open(path))
    return summary(which, " at scale 0.5", "FLA", rows, failed)


if __name__ == "__main__":
    raise SystemExit(main())
