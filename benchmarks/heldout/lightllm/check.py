"""The held-out lightllm kernel from an aotc bundle against lightllm's own wrapper (its JIT,
warm), on the GPU: q and k rotated in place at and between the buckets against float64,
then the time per call of each, side by side, and a head size the bundle was not built for
refused.

    python check.py rotary BUNDLE     (lightllm's kernel file importable; run.sh)
"""

import sys
from typing import Any

from calls import rotary_inputs, rotate
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


def main() -> int:
    which, path = sys.argv[1], sys.argv[2]
    bundle = loader.open(path)
    failed, rows = check(bundle)
    refused_head(bundle)
    return summary(which, ", bf16, 32 query and 8 key heads of 128", "lightllm", rows, failed)


if __name__ == "__main__":
    raise SystemExit(main())
