"""Held-out unsloth kernels from aotc bundles against unsloth's own wrappers (their JIT,
warm), on the GPU: outputs at and between the buckets against float64, then the time per
call of each, side by side.

    python check.py rms_layernorm BUNDLE   (with unsloth's kernels importable; run.sh)
    python check.py rope BUNDLE
    python check.py swiglu BUNDLE
"""

import sys
from typing import Any

import torch
from calls import EPS, cos_sin, rms_norm, rope, swiglu
from report import refused, summary, us, verdict
from unsloth.kernels.rms_layernorm import Fast_RMS_Layernorm
from unsloth.kernels.rope_embedding import Fast_RoPE_Embedding
from unsloth.kernels.swiglu import swiglu_fg_kernel

import loader

ROWS = (1, 7, 16, 100, 128, 1000, 1024, 5000, 8192)
TIMED = (1, 128, 1024, 8192)


def report(at: str, ours: Any, theirs: Any, want: Any, want_theirs: Any = None) -> int:
    return verdict(at, "unsloth", ours, theirs, want, want_theirs)


def rms(bundle: Any) -> tuple[int, list[tuple[str, float, float]]]:
    kernel, failed, rows = bundle["rms_layernorm"], 0, []
    for dt in (torch.float16, torch.bfloat16):
        for cols in (4096, 8192):
            for n in ROWS:
                x = torch.randn(n, cols, device="cuda", dtype=dt)
                w = torch.randn(cols, device="cuda", dtype=dt)
                y = torch.full_like(x, float("nan"))
                r = torch.empty(n, device="cuda", dtype=torch.float32)
                kernel(y, x, w, r)
                theirs = Fast_RMS_Layernorm.apply(x, w, EPS, False)
                failed += report(f"{str(dt)[6:]:8} {n:5} x {cols:5}", y, theirs, rms_norm(x, w))
                if n in TIMED and dt == torch.bfloat16:
                    ours = us(lambda a=(y, x, w, r): kernel(*a))
                    lib = us(lambda x=x, w=w: Fast_RMS_Layernorm.apply(x, w, EPS, False))
                    rows.append((f"{n} x {cols}", ours, lib))
    return failed, rows


def rot(bundle: Any) -> tuple[int, list[tuple[str, float, float]]]:
    """Q [seq, heads * 128] rotated in place (batch 1); unsloth's wrapper takes it as
    [1, seq, heads, 128]."""
    kernel, failed, rows = bundle["rope"], 0, []
    for dt in (torch.float16, torch.bfloat16):
        for heads in (8, 32):
            for n in ROWS:
                q = torch.randn(n, heads * 128, device="cuda", dtype=dt)
                cos, sin = cos_sin(n, 128, "cuda", dt)
                want = rope(q, cos, sin, n)
                theirs = Fast_RoPE_Embedding.apply(q.clone().view(1, n, heads, 128), cos, sin)
                ours = q.clone()
                kernel(ours, cos, sin, n)
                at = f"{str(dt)[6:]:8} {n:5} x {heads:2} heads"
                failed += report(at, ours, theirs.reshape(n, -1), want)
                if n in TIMED and dt == torch.bfloat16:
                    t = us(lambda a=(ours, cos, sin, n): kernel(*a))
                    q4 = q.view(1, n, heads, 128)
                    lib = us(lambda q4=q4, c=cos, s=sin: Fast_RoPE_Embedding.apply(q4, c, s))
                    rows.append((f"{n} x {heads} heads", t, lib))
    return failed, rows


def swi(bundle: Any) -> tuple[int, list[tuple[str, float, float]]]:
    kernel, failed, rows = bundle["swiglu"], 0, []
    for dt in (torch.float16, torch.bfloat16):
        for n in ROWS:
            e = torch.randn(1, n, 14336, device="cuda", dtype=dt)
            g = torch.randn_like(e)
            h = torch.full_like(e, float("nan"))
            args = (e, g, h, e.numel())
            kernel(*args)
            theirs = swiglu_fg_kernel(e, g)
            failed += report(f"{str(dt)[6:]:8} {n:5} x 14336", h, theirs, swiglu(e, g))
            if n in TIMED and dt == torch.bfloat16:
                ours = us(lambda a=args: kernel(*a))
                lib = us(lambda e=e, g=g: swiglu_fg_kernel(e, g))
                rows.append((f"{n} x 14336", ours, lib))
    return failed, rows


def refused_views(bundle: Any) -> None:
    """A width, or a view's row stride, the bundle was not built for is refused, not run."""
    x = torch.randn(4, 12288, device="cuda", dtype=torch.float16)
    cases = {"width 5120": x[:, :5120].contiguous(), "rows 12288 apart": x[:, :4096]}
    for what, v in cases.items():
        y, w = torch.empty(v.shape, device="cuda", dtype=v.dtype), v[0].contiguous()
        refused(what, lambda y=y, v=v, w=w: bundle["rms_layernorm"](
            y, v, w, torch.empty(4, device="cuda")))  # fmt: skip


def main() -> int:
    which, path = sys.argv[1], sys.argv[2]
    bundle = loader.open(path)
    failed, rows = {"rms_layernorm": rms, "rope": rot, "swiglu": swi}[which](bundle)
    if which == "rms_layernorm":
        refused_views(bundle)
    return summary(which, ", bf16", "unsloth", rows, failed)


if __name__ == "__main__":
    raise SystemExit(main())
