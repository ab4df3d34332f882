"""Held-out Liger-Kernel kernels from aotc bundles against Liger's own wrappers (their JIT,
warm), on the GPU: outputs at and between the buckets against float64, then the time per
call of each, side by side.

    python check.py rms_norm BUNDLE      (with Liger's package importable; run.sh)
    python check.py swiglu BUNDLE
    python check.py rms_norm_rule BUNDLE   (rms_norm with Liger's own warps)
"""

import sys
from typing import Any

import torch
from calls import EPS, rms_norm, swiglu
from liger_kernel.ops.rms_norm import rms_norm_forward
from liger_kernel.ops.swiglu import swiglu_forward
from report import summary, us

import loader

ROWS = (1, 7, 16, 100, 128, 1000, 1024, 5000, 8192)


def report(at: str, ours: Any, theirs: Any, want: Any) -> int:
    """Right: the bundle and Liger's wrapper both within 1e-2 of float64, norm-relative
    (one rounding to fp16 or bf16 is about 4e-3), every element written."""
    norm = float(want.norm())
    errors = [float((x.double() - want).norm()) / norm for x in (ours, theirs)]
    ok = bool(torch.isfinite(ours).all()) and errors[0] <= 1e-2 and errors[1] <= 1e-2
    print(f"{at} error ours {errors[0]:.1e} Liger {errors[1]:.1e} {'ok' if ok else 'WRONG'}")
    return 0 if ok else 1


def rms(bundle: Any) -> tuple[int, list[tuple[str, float, float]]]:
    kernel, failed, rows = bundle["rms_norm"], 0, []
    for dt in (torch.float16, torch.bfloat16):
        for cols in (4096, 8192):
            for n in ROWS:
                x = torch.randn(n, cols, device="cuda", dtype=dt)
                w = torch.randn(cols, device="cuda", dtype=dt)
                y = torch.full_like(x, float("nan"))
                rstd = torch.empty(n, device="cuda", dtype=torch.float32)
                args = (y, cols, x, cols, w, 1, rstd, 1, cols, EPS, 0.0)
                kernel(*args)
                theirs = rms_norm_forward(x, w, EPS, 0.0, "llama", None)[0]
                at = f"{str(dt)[6:]:8} {n:5} x {cols:5}"
                failed += report(at, y, theirs, rms_norm(x, w))
                if n in (1, 128, 1024, 8192) and dt == torch.bfloat16:
                    ours = us(lambda a=args: kernel(*a))
                    lib = us(lambda x=x, w=w: rms_norm_forward(x, w, EPS, 0.0, "llama", None))
                    rows.append((f"{n} x {cols}", ours, lib))
    return failed, rows


def swi(bundle: Any) -> tuple[int, list[tuple[str, float, float]]]:
    kernel, failed, rows = bundle["swiglu"], 0, []
    for dt in (torch.float16, torch.bfloat16):
        for n in ROWS:
            a = torch.randn(n, 14336, device="cuda", dtype=dt)
            b = torch.randn_like(a)
            c = torch.full_like(a, float("nan"))
            kernel(a, b, c, 14336, 1.0)
            theirs = swiglu_forward(a, b)[2]
            failed += report(f"{str(dt)[6:]:8} {n:5} x 14336", c, theirs, swiglu(a, b))
            if n in (1, 128, 1024, 8192) and dt == torch.bfloat16:
                ours = us(lambda a=a, b=b, c=c: kernel(a, b, c, 14336, 1.0))
                lib = us(lambda a=a, b=b: swiglu_forward(a, b))
                rows.append((f"{n} x 14336", ours, lib))
    return failed, rows


def refused(bundle: Any) -> None:
    """A width the bundle was not built for is refused, not run."""
    x = torch.randn(4, 5120, device="cuda", dtype=torch.float16)
    try:
        bundle["swiglu"](x, x, torch.empty_like(x), 5120, 1.0)
    except loader.ArgumentError as exc:
        print(f"width 5120 refused: {str(exc).splitlines()[0][:160]}")
    else:
        print("width 5120 WRONGLY run")


def main() -> int:
    which, path = sys.argv[1], sys.argv[2]
    bundle = loader.open(path)
    failed, rows = {"rms_norm": rms, "rms_norm_rule": rms, "swiglu": swi}[which](bundle)
    if which == "swiglu":
        refused(bundle)
    if which == "rms_norm_rule":  # Liger's calculate_settings: 8 warps at 4096, 16 at 8192
        for cols in (4096, 8192):
            x = torch.empty(64, cols, device="cuda", dtype=torch.bfloat16)
            args = (x, cols, x, cols, x[0], 1, x[:, 0].float(), 1, cols, EPS, 0.0)
            print(f"width {cols}: {bundle['rms_norm'].variant_for(*args).num_warps} warps")
    return summary(which, ", bf16", "Liger", rows, failed)


if __name__ == "__main__":
    raise SystemExit(main())
