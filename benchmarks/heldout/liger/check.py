"""Held-out Liger-Kernel kernels from aotc bundles against Liger's own wrappers (their JIT,
warm), on the GPU: outputs at and between the buckets against float64, then the time per
call of each, side by side.

    python check.py rms_norm BUNDLE      (with Liger's package importable; run.sh)
    python check.py swiglu BUNDLE
    python check.py rms_norm_rule BUNDLE   (rms_norm with Liger's own warps)
    python check.py kl_div BUNDLE
    python check.py rope BUNDLE
    python check.py cross_entropy BUNDLE
"""

import sys
from typing import Any

import torch
from calls import EPS, IGNORE, KL_EPS, ce_rows, kl_rows, rms_norm, rotate, swiglu
from liger_kernel.ops.cross_entropy import cross_entropy_forward
from liger_kernel.ops.kl_div import kldiv_forward_triton
from liger_kernel.ops.rms_norm import rms_norm_forward
from liger_kernel.ops.rope import rope_forward
from liger_kernel.ops.swiglu import swiglu_forward
from report import refused, summary, us, verdict

import loader

ROWS = (1, 7, 16, 100, 128, 1000, 1024, 5000, 8192)


def report(at: str, ours: Any, theirs: Any, want: Any, want_theirs: Any = None) -> int:
    return verdict(at, "Liger", ours, theirs, want, want_theirs)


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


def kl(bundle: Any) -> tuple[int, list[tuple[str, float, float]]]:
    """Per-row KL divergence (batchmean: Liger's wrapper returns the rows' sum / rows)."""
    kernel, failed, rows = bundle["kl_div"], 0, []
    for dt in (torch.float32, torch.bfloat16):
        for cols in (4096, 128256):
            for n in ROWS if cols == 4096 else ROWS[:-2]:
                y = torch.randn(n, cols, device="cuda").log_softmax(-1).to(dt)
                gt = torch.randn(n, cols, device="cuda").softmax(-1).to(dt)
                loss = torch.full((n,), float("nan"), device="cuda")
                args = (y, cols, gt, cols, loss, 1, cols, KL_EPS)
                kernel(*args)
                theirs = kldiv_forward_triton(y, gt, False, "batchmean", KL_EPS)
                want = kl_rows(y, gt)
                at = f"{str(dt)[6:]:8} {n:5} x {cols:6}"
                failed += report(at, loss, theirs, want, want.sum() / n)
                if n in (1, 128, 1024) and dt == torch.bfloat16:
                    ours = us(lambda a=args: kernel(*a))
                    lib = us(lambda y=y, gt=gt: kldiv_forward_triton(y, gt, False, "batchmean",
                                                                      KL_EPS))  # fmt: skip
                    rows.append((f"{n} x {cols}", ours, lib))
    return failed, rows


def rope(bundle: Any) -> tuple[int, list[tuple[str, float, float]]]:
    """q and k rotated in place, (batch, seq, heads, head_dim) as rope_forward lays them
    out; Liger's wrapper takes HF's (batch, heads, seq, head_dim) view of the same."""
    kernel, failed, rows = bundle["rope"], 0, []
    for dt in (torch.float16, torch.bfloat16):
        for batch in (1, 2, 8):
            for sl in (1, 7, 128, 500, 1024, 3000, 8192):
                q = torch.randn(batch, sl, 32, 128, device="cuda", dtype=dt)
                k = torch.randn(batch, sl, 8, 128, device="cuda", dtype=dt)
                angle = torch.randn(1, sl, 64, device="cuda").repeat(1, 1, 2)
                cos, sin = angle.cos().to(dt), angle.sin().to(dt)
                want_q, want_k = rotate(q, cos, sin), rotate(k, cos, sin)
                tq, tk = q.clone().transpose(1, 2), k.clone().transpose(1, 2)
                theirs = [t.transpose(1, 2) for t in rope_forward(tq, tk, cos, sin)[:2]]
                args = (q, 32 * 128, k, 8 * 128, cos, 128, sin, 128, sl)
                kernel(*args)
                at = f"{str(dt)[6:]:8} {batch} x {sl:5}"
                failed += report(f"{at} q", q, theirs[0], want_q)
                failed += report(f"{at} k", k, theirs[1], want_k)
                if sl in (1, 128, 1024, 8192) and batch in (1, 8) and dt == torch.bfloat16:
                    ours = us(lambda a=args: kernel(*a))
                    lib = us(lambda q=tq, k=tk, c=cos, s=sin: rope_forward(q, k, c, s))
                    rows.append((f"{batch} x {sl}", ours, lib))
    return failed, rows


def ce_call(kernel: Any, x: Any, y: Any, loss: Any, kept: int) -> None:
    """The bundle's kernel called as cross_entropy_forward launches Liger's: by keyword."""
    kernel(X_ptr=x, X_stride=x.stride(-2), Y_ptr=y, Y_stride=y.stride(-1), weight_ptr=None,
           loss_ptr=loss, z_loss_ptr=None, loss_stride=loss.stride(-1),
           token_accuracy_ptr=None, token_accuracy_stride=0, predicted_tokens_ptr=None,
           predicted_tokens_stride=0, n_cols=x.shape[1], n_non_ignore=kept,
           sum_non_ignore_weight=kept, ignore_index=IGNORE, weight_sum=0.0,
           lse_square_scale=0.0, label_smoothing=0.0, reduction="mean", softcap=None,
           RETURN_Z_LOSS=False, RETURN_TOKEN_ACCURACY=False, RETURN_PREDICTED_TOKENS=False,
           HAS_WEIGHT=False, HAS_SOFTCAPPING=False, HAS_GRADIENTS=True)  # fmt: skip


def ce(bundle: Any) -> tuple[int, list[tuple[str, float, float]]]:
    """The loss per row and the logits' gradient, written over them, against float64 and
    Liger's cross_entropy_forward (mean reduction: it returns the rows' sum)."""
    kernel, failed, rows = bundle["cross_entropy"], 0, []
    for dt in (torch.float32, torch.bfloat16):
        for cols in (32000, 128256):
            for n in ROWS if cols == 32000 else ROWS[:-2]:
                x0 = torch.randn(n, cols, device="cuda", dtype=dt)
                y = torch.randint(0, cols, (n,), device="cuda")
                y[1::10] = IGNORE
                kept = int((y != IGNORE).sum())
                want_loss, want_grad = ce_rows(x0, y, kept)
                x, loss = x0.clone(), torch.full((n,), float("nan"), device="cuda", dtype=dt)
                loss[y == IGNORE] = 0.0  # Liger's wrapper starts from zeros
                ce_call(kernel, x, y, loss, kept)
                lib = cross_entropy_forward(x0.clone().requires_grad_(), y, None, IGNORE, 0.0,
                                            0.0, "mean", None, False)  # fmt: skip
                at = f"{str(dt)[6:]:8} {n:5} x {cols:6}"
                failed += report(f"{at} loss", loss, lib[0], want_loss, want_loss.sum())
                failed += report(f"{at} grad", x, lib[4].detach(), want_grad)
                if n in (1, 128, 1024) and dt == torch.bfloat16:
                    args = (x, cols, y, 1, None, loss, None, 1, None, 0, None, 0, cols, kept,
                            kept, 0.0, IGNORE, None)  # fmt: skip
                    ours = us(lambda a=args: kernel(*a))
                    xg = x0.clone().requires_grad_()
                    theirs = us(lambda x=xg, y=y: cross_entropy_forward(x, y, None, IGNORE, 0.0,
                                                                        0.0, "mean", None,
                                                                        False))  # fmt: skip
                    rows.append((f"{n} x {cols}", ours, theirs))
    return failed, rows


def refused_calls(which: str, bundle: Any) -> None:
    """What the bundle was not built for is refused, not run by another variant."""
    bf16 = {"device": "cuda", "dtype": torch.bfloat16}
    q, k, c = (torch.empty(3, 16, 32, 128, **bf16), torch.empty(3, 16, 8, 128, **bf16),
               torch.empty(1, 16, 128, **bf16))  # fmt: skip
    x, loss = torch.empty(4, 3000, **bf16), torch.zeros(4, **bf16)
    y = torch.zeros(4, device="cuda", dtype=torch.int64)
    calls = {
        "rope": [("batch 3", lambda: bundle["rope"](q, 4096, k, 1024, c, 128, c, 128, 16))],
        "cross_entropy": [
            ("width 3000", lambda: ce_call(bundle["cross_entropy"], x, y, loss, 4)),
            ("label smoothing", lambda: bundle["cross_entropy"](
                x, 3000, y, 1, None, loss, None, 1, None, 0, None, 0, 3000, 4, 4, 0.0,
                IGNORE, None, label_smoothing=0.1)),
        ],
    }  # fmt: skip
    for what, call in calls.get(which, []):
        refused(what, call)


def refused_width(bundle: Any) -> None:
    """A width the bundle was not built for is refused, not run."""
    x = torch.randn(4, 5120, device="cuda", dtype=torch.float16)
    refused("width 5120", lambda: bundle["swiglu"](x, x, torch.empty_like(x), 5120, 1.0))


def main() -> int:
    which, path = sys.argv[1], sys.argv[2]
    bundle = loader.open(path)
    checks = {"rms_norm": rms, "rms_norm_rule": rms, "swiglu": swi, "kl_div": kl, "rope": rope,
              "cross_entropy": ce}  # fmt: skip
    failed, rows = checks[which](bundle)
    if which == "swiglu":
        refused_width(bundle)
    refused_calls(which, bundle)
    if which == "rms_norm_rule":  # Liger's calculate_settings: 8 warps at 4096, 16 at 8192
        for cols in (4096, 8192):
            x = torch.empty(64, cols, device="cuda", dtype=torch.bfloat16)
            args = (x, cols, x, cols, x[0], 1, x[:, 0].float(), 1, cols, EPS, 0.0)
            print(f"width {cols}: {bundle['rms_norm'].variant_for(*args).num_warps} warps")
    return summary(which, ", bf16", "Liger", rows, failed)


if __name__ == "__main__":
    raise SystemExit(main())
