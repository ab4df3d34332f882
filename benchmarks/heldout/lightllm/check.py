"""The held-out lightllm kernels from an aotc bundle against lightllm's own wrappers (their
JIT, warm), on the GPU, at and between the buckets against float64, then the time per call
of each, side by side, and a head size the bundle was not built for refused:

- rotary: q and k rotated in place;
- decode: GQA flash decoding's two stages over ragged contexts and shuffled token slots
  (the ranges past a context are never written, by either side).

    python check.py rotary|decode BUNDLE     (lightllm's kernel files importable; run.sh)
"""

import sys
from typing import Any

from calls import combine, ranges_attention, rotary_inputs, rotate, stage1_inputs
from lightllm.models.llama.triton_kernel.gqa_flash_decoding_stage1 import flash_decode_stage1
from lightllm.models.llama.triton_kernel.gqa_flash_decoding_stage2 import flash_decode_stage2
from lightllm.models.llama.triton_kernel.rotary_emb import rotary_emb_fwd
from report import refused, summary, us, verdict

import loader

TOKENS = (1, 5, 16, 100, 128, 1000, 1024, 8192, 9000)
SIZES = {"HEAD_Q": 32, "HEAD_K": 8, "head_dim": 128}


def check(bundle: Any) -> tuple[int, list[tuple[str, float, float]]]:
    kernel, failed, rows = bundle["rotary"], 0, []
    for t in ("bf16", "fp16"):
        for n in TOKENS:
            args = rotary_inputs({**SIZES, "max_total_len": n}, {"T": t})
            q, k, cos, sin = args[:4]
            want_q, want_k = rotate(q, cos, sin), rotate(k, cos, sin)
            theirs_q, theirs_k = q.clone(), k.clone()
            kernel(*args)
            rotary_emb_fwd(theirs_q, theirs_k, cos, sin)
            failed += verdict(f"{t} tokens={n:5} q", "lightllm", q, theirs_q, want_q)
            failed += verdict(f"{t} tokens={n:5} k", "lightllm", k, theirs_k, want_k)
            if t == "bf16" and n in (1, 128, 1024, 8192):
                ours = us(lambda a=args: kernel(*a))
                lib = us(lambda q=q, k=k, c=cos, s=sin: rotary_emb_fwd(q, k, c, s))
                rows.append((f"tokens {n}", ours, lib))
    return failed, rows


def refused_head(bundle: Any) -> None:
    """A head size the bundle was not built for is refused, not run."""
    args = rotary_inputs({**SIZES, "head_dim": 64, "max_total_len": 4}, {"T": "bf16"})
    refused("head_dim 64", lambda: bundle["rotary"](*args))


DECODE = ((1, 1000), (3, 1024), (5, 3000), (16, 4096), (40, 9000), (64, 16384), (64, 20000))


def decode(bundle: Any) -> tuple[int, list[tuple[str, float, float]]]:
    """Both stages at (sequences, longest context), contexts ragged below the longest."""
    import torch

    one, two, failed, rows = bundle["decode_stage1"], bundle["decode_stage2"], 0, []
    for t in ("bf16", "fp16"):
        for b, n in DECODE:
            sizes = {"batch": b, "max_len": n, "kv_heads": 8, "head_dim": 128, "gqa_group_size": 4}
            args = stage1_inputs(sizes, {"T": t})
            q, k, v, _, r2t, idx, seqlen, mid_o, mid_lse = args[:9]
            seqlen.random_(1, n + 1)
            seqlen[0] = n
            mid_o.fill_(float("nan"))
            mid_lse.fill_(float("nan"))
            o = torch.empty_like(q)
            theirs = [torch.full_like(x, float("nan")) for x in (mid_o, mid_lse, o)]
            stage2 = [seqlen, mid_o, mid_lse, o, *mid_o.stride(), *mid_lse.stride(), *o.stride()]
            one(*args, max_len=n)
            two(*stage2, max_len=n)
            flash_decode_stage1(q, k, v, r2t, idx, seqlen, n, theirs[0], theirs[1], 128)
            flash_decode_stage2(theirs[0], theirs[1], seqlen, theirs[2], 128)
            want_o, want_lse = ranges_attention(q, k, v, r2t, idx, seqlen)
            written = torch.isfinite(want_lse)
            at = f"{t} seqs={b:2} context={n:5}"
            for name, ours, lib, want in (("mid_o", mid_o, theirs[0], want_o),
                                          ("lse", mid_lse, theirs[1], want_lse)):  # fmt: skip
                rows_written = written if name == "lse" else written[..., None].expand_as(want)
                failed += verdict(f"{at} {name}", "lightllm", ours[rows_written],
                                  lib[rows_written], want[rows_written])  # fmt: skip
                if not bool(torch.isnan(ours[~rows_written]).all()):
                    print(f"{at} {name}: WRONG, a range past its context was written")
                    failed += 1
            want = combine(seqlen, want_o, want_lse)
            failed += verdict(f"{at} o", "lightllm", o, theirs[2], want)
            if t == "bf16" and n in (1000, 4096, 16384):
                ours_us = us(lambda a=args, s=stage2, n=n: (one(*a, max_len=n), two(*s, max_len=n)))
                lib_us = us(lambda q=q, k=k, v=v, r=r2t, i=idx, s=seqlen, n=n, m=theirs: (
                    flash_decode_stage1(q, k, v, r, i, s, n, m[0], m[1], 128),
                    flash_decode_stage2(m[0], m[1], s, m[2], 128)))  # fmt: skip
                rows.append((f"{b}x{n}", ours_us, lib_us))
    return failed, rows


def refused_decode_head(bundle: Any) -> None:
    """A head size the bundle was not built for is refused, not run."""
    sizes = {"batch": 2, "max_len": 256, "kv_heads": 8, "head_dim": 64, "gqa_group_size": 4}
    args = stage1_inputs(sizes, {"T": "bf16"})
    refused("head_dim 64", lambda: bundle["decode_stage1"](*args, max_len=256))


def main() -> int:
    which, path = sys.argv[1], sys.argv[2]
    bundle = loader.open(path)
    if which == "decode":
        failed, rows = decode(bundle)
        refused_decode_head(bundle)
        return summary(which, ", bf16, stages 1 and 2, 32 query and 8 KV heads of 128",
                       "lightllm", rows, failed)  # fmt: skip
    failed, rows = check(bundle)
    refused_head(bundle)
    return summary(which, ", bf16, 32 query and 8 key heads of 128", "lightllm", rows, failed)


if __name__ == "__main__":
    raise SystemExit(main())
