"""FLA's chunk-local cumsum from an aotc bundle against FLA's own wrapper (its JIT, with
its autotune warm), on the GPU: outputs at scales None, 0.0 and 0.5 at and between the
buckets against float64, then the time per call of each, side by side.

    python check.py BUNDLE      (with FLA's package and einops importable; see run.sh)
"""

import sys

import torch
import triton.testing
from calls import B, H, chunk_cumsum
from fla.ops.utils.cumsum import chunk_local_cumsum_scalar

import loader


def main() -> int:
    kernel = loader.open(sys.argv[1])["cumsum"]
    failed = 0
    rows = []
    for t in (64, 1000, 1024, 3000, 4096, 16384, 20000):
        g = torch.randn(B, t, H, device="cuda", dtype=torch.float32)
        out = torch.empty_like(g)
        for scale in (None, 0.0, 0.5):
            out.fill_(float("nan"))
            kernel(g, out, scale, None, None, t)
            theirs = chunk_local_cumsum_scalar(g, 64, scale=scale)
            want = chunk_cumsum(g, scale)
            errors = [float((x.double() - want).abs().max()) for x in (out, theirs)]
            ok = all(e <= 1e-4 * max(1.0, float(want.abs().max())) for e in errors)
            has = kernel.variant_for(g, out, scale, None, None, t).meta["HAS_SCALE"]
            ok = ok and has == (scale is not None)
            failed += not ok
            print(
                f"T={t:6} scale={scale!s:5} HAS_SCALE={has!s:5} max error ours "
                f"{errors[0]:.1e} FLA {errors[1]:.1e} {'ok' if ok else 'WRONG'}"
            )
            if scale == 0.5:
                ours_us = 1e3 * triton.testing.do_bench(
                    lambda g=g, out=out, t=t: kernel(g, out, 0.5, None, None, t)
                )
                fla_us = 1e3 * triton.testing.do_bench(
                    lambda g=g: chunk_local_cumsum_scalar(g, 64, scale=0.5)
                )
                rows.append((t, ours_us, fla_us))
    print("\nT        bundle µs   FLA µs   FLA/bundle   (scale=0.5; FLA allocates its output)")
    for t, ours_us, fla_us in rows:
        print(f"{t:<8} {ours_us:9.1f} {fla_us:8.1f} {fla_us / ours_us:10.2f}x")
    print(f"\n{'all outputs right' if not failed else f'{failed} WRONG'}")
    return 1 if failed else 0


if __name__ == "__main__":
    raise SystemExit(main())
