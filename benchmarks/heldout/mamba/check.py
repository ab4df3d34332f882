"""The held-out mamba kernels from aotc bundles against mamba_ssm's own wrappers (their
JIT, warm; the chunk product's @triton.autotune tunes at its first call), on the GPU:
outputs at and between the buckets against float64, then the time per call of each, side
by side. The state update: its output and the state it updates, with and without z and the
state's batch indices, and a state width the bundle was not built for refused.

    python check.py selective_state_update BUNDLE     (mamba_ssm importable; run.sh)
    python check.py bmm_chunk BUNDLE
"""

import sys
from typing import Any

from calls import bmm_chunks, bmm_inputs, ssu, ssu_inputs
from mamba_ssm.ops.triton.selective_state_update import selective_state_update
from mamba_ssm.ops.triton.ssd_bmm import _bmm_chunk_fwd
from report import refused, summary, us, verdict

import loader

BATCHES = (1, 3, 8, 13, 64, 100, 256, 300)
SIZES = {"nheads": 80, "dim": 64, "dstate": 128, "nheads_ngroups_ratio": 80}


def _args(batch: int, t: str, z: bool, indices: bool) -> list[Any]:
    args = ssu_inputs({**SIZES, "batch": batch}, {"T": t})
    if not z:
        args[8] = None
    if not indices:
        args[10] = None
    args[9].fill_(float("nan"))  # an element the kernel never writes fails
    return args


def check(bundle: Any) -> tuple[int, list[tuple[str, float, float]]]:
    kernel, failed, rows = bundle["selective_state_update"], 0, []
    for t in ("bf16", "fp16"):
        for z in (True, False):
            for indices in (True, False):
                for b in BATCHES:
                    args = _args(b, t, z, indices)
                    state, x, dt, dt_bias, A, B, C, D, zz, out, idx = args[:11]
                    want_state, want = ssu(state, x, dt, dt_bias, A, B, C, D, zz, idx, 80)
                    theirs_state = state.clone()
                    kernel(*args)
                    theirs = selective_state_update(theirs_state, x, dt, A, B, C, D=D, z=zz,
                                                    dt_bias=dt_bias, dt_softplus=True,
                                                    state_batch_indices=idx)  # fmt: skip
                    at = f"{t} b={b:3} z={int(z)} idx={int(indices)}"
                    failed += verdict(at + " out", "mamba", out, theirs, want)
                    failed += verdict(at + " state", "mamba", state, theirs_state, want_state)
                    if t == "bf16" and z and not indices and b in (1, 8, 64, 256):
                        args = _args(b, t, z, indices)
                        s, x, dt, dt_bias, A, B, C, D, zz = args[:9]
                        ours = us(lambda a=args: kernel(*a))
                        lib = us(lambda s=s, x=x, dt=dt, A=A, B=B, C=C, D=D, zz=zz, db=dt_bias:
                                 selective_state_update(s, x, dt, A, B, C, D=D, z=zz, dt_bias=db,
                                                        dt_softplus=True))  # fmt: skip
                        rows.append((f"batch {b}", ours, lib))
    return failed, rows


def bmm(bundle: Any) -> tuple[int, list[tuple[str, float, float]]]:
    kernel, failed, rows = bundle["bmm_chunk_fwd"], 0, []
    for t in ("bf16", "fp16"):
        for seqlen in (256, 300, 1024, 2000, 4096, 16384, 20000):
            sizes = {"batch": 2, "seqlen": seqlen, "ngroups": 1, "K": 128, "chunk_size": 256}
            args = bmm_inputs(sizes, {"T": t})
            args[2].fill_(float("nan"))
            args[3] = None  # as the author's wrapper is called without seq_idx
            kernel(*args)
            theirs = _bmm_chunk_fwd(args[0], args[1], 256, causal=False)
            want = bmm_chunks(args[0], args[1], 256)
            failed += verdict(f"{t} seqlen={seqlen:5}", "mamba", args[2], theirs, want)
            if t == "bf16" and seqlen in (256, 1024, 4096, 16384):
                ours = us(lambda a=args: kernel(*a))
                lib = us(lambda a=args[0], b=args[1]: _bmm_chunk_fwd(a, b, 256, causal=False))
                rows.append((f"seqlen {seqlen}", ours, lib))
    return failed, rows


def refused_width(bundle: Any) -> None:
    """A state width the bundle was not built for is refused, not run."""
    args = ssu_inputs({"batch": 2, "nheads": 80, "dim": 64, "dstate": 64,
                       "nheads_ngroups_ratio": 80}, {"T": "bf16"})  # fmt: skip
    refused("dstate 64", lambda: bundle["selective_state_update"](*args))


def main() -> int:
    which, path = sys.argv[1], sys.argv[2]
    bundle = loader.open(path)
    if which == "bmm_chunk":
        failed, rows = bmm(bundle)
        return summary(which, ", bf16, batch 2", "mamba", rows, failed)
    failed, rows = check(bundle)
    refused_width(bundle)
    return summary(which, ", bf16 with z", "mamba", rows, failed)


if __name__ == "__main__":
    raise SystemExit(main())
