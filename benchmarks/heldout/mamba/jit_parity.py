"""On the CPU: is the bmm_chunk bundle's machine code, at a call of batch 2 x 16384 tokens
(bf16, no seq_idx), what Triton's JIT compiles for that call with the same config?

The JIT specialises each integer argument at a call: equal to 1 (compiled in) or divisible
by 16. This compiles the kernel so for the bundle's config at the 16384-token bucket and
compares the machine code (cubin text section) with each of the bundle's variants of that
config, printing their assumptions, registers and shared memory. probe_batch.py times the
two on an H200.

    PYTHONPATH=<mamba_ssm's folder>:<stubs>:<this folder> python jit_parity.py BUNDLE
"""

from __future__ import annotations

import argparse
import os

os.environ["TRITON_DISABLE_LINE_INFO"] = "1"  # as aotc compiles: no source paths in the cubin

import triton
import triton.language as tl
from calls import bmm_inputs
from mamba_ssm.ops.triton.ssd_bmm import _bmm_chunk_fwd_kernel
from triton.backends.compiler import GPUTarget
from triton.compiler import ASTSource

from loader.cubin import inspect, machine_code
from loader.format import BundleFile

SEQLEN, BATCH = 16384, 2


def call_ints() -> dict[str, int]:
    """The integer arguments of the call, from the recipe's own inputs (calls.py) at batch 2
    x 16384 on the CPU; without seq_idx, whose strides mamba's wrapper then passes as 0."""
    fn = _bmm_chunk_fwd_kernel.fn
    runtime = [n for n, p in zip(fn.arg_names, fn.params, strict=True) if not p.is_constexpr]
    sizes = {"batch": BATCH, "seqlen": SEQLEN, "ngroups": 1, "K": 128, "chunk_size": 256}
    args = bmm_inputs(sizes, {"T": "bf16"}, device="cpu")
    ints = {n: a for n, a in zip(runtime, args, strict=True) if type(a) is int}
    return {**ints, "stride_seq_idx_batch": 0, "stride_seq_idx_seqlen": 0}


def jit_cubin(meta: dict[str, int], warps: int, stages: int) -> bytes:
    """What the JIT compiles at the call for this config."""
    fn = _bmm_chunk_fwd_kernel.fn
    sig: dict[str, str] = {}
    consts: dict[str, object] = {"seq_idx_ptr": None, "IS_CAUSAL": False, "HAS_SEQ_IDX": False,
                                 "dot_dtype": tl.bfloat16, **meta}  # fmt: skip
    attrs = {}
    ints = call_ints()
    for i, name in enumerate(fn.arg_names):
        if name in consts:
            sig[name] = "constexpr"
        elif name.endswith("_ptr"):
            sig[name], attrs[(i,)] = "*bf16", [["tt.divisibility", 16]]
        elif ints[name] == 1:
            sig[name], consts[name] = "constexpr", 1
        else:
            sig[name] = "i32"
            if ints[name] % 16 == 0:
                attrs[(i,)] = [["tt.divisibility", 16]]
    src = ASTSource(fn, sig, constexprs=consts, attrs=attrs)
    options = {"num_warps": warps, "num_stages": stages}
    return triton.compile(src, target=GPUTarget("cuda", 90, 32), options=options).asm["cubin"]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("bundle")
    bundle = BundleFile(ap.parse_args().bundle)
    kernel = bundle.manifest["kernels"][0]
    inst = next(i for i in kernel["instances"]
                if i["dtypes"] == {"T": "bf16", "seq_idx_ptr": "none"})  # fmt: skip
    choice = next(c for c in inst["choices"] if c["bucket"] == [SEQLEN])
    variants = [v for v in inst["variants"] if v["id"] in choice["variants"]]
    v0 = variants[0]
    meta = {k: v for k, v in v0["meta"].items() if k.startswith("BLOCK")}
    jit = jit_cubin(meta, v0["num_warps"], v0["num_stages"])
    info = inspect(jit)
    print(f"config {meta} w{v0['num_warps']} s{v0['num_stages']}; the JIT's compile: "
          f"{info.regs} registers")  # fmt: skip
    for v in variants:
        same = machine_code(bundle.read_entry(v["entry"])) == machine_code(jit)
        assumed = ", ".join(
            f"{k}{'==1' if x == 1 else '%16'}" for k, x in sorted(v["assume"].items())
        )
        print(
            f"  variant {v['id']}: {v['regs']} registers, {v.get('shared')} B shared; "
            f"the JIT's machine code: {'yes' if same else 'no'}; assumes {assumed or 'nothing'}"
        )


if __name__ == "__main__":
    main()
