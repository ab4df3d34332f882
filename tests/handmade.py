"""Bundles assembled by hand (no compiler), for testing the loader and the format on CPU."""

from __future__ import annotations

from pathlib import Path

from loader import manifest as mf
from loader.format import encode, write_atomic
from tests import cubins

PARAMS = (
    mf.Param("x_ptr", "*T"),
    mf.Param("out_ptr", "*T"),
    mf.Param("M", "i32"),
    mf.Param("N", "i32"),
    mf.Param("stride", "i32"),
    mf.Param("scale", "fp32"),
)
BUCKETS = (1, 16, 256)


def variant(vid: str, block: int, assume: dict[str, int], cubin: str) -> mf.VariantSpec:
    abi = tuple(p.name for p in PARAMS if assume.get(p.name) != 1)
    return mf.VariantSpec(
        id=vid,
        entry=f"cubin/{cubin}",
        function="scale_kernel",
        num_warps=4,
        num_stages=2,
        shared=1024 * block // 16,
        regs=32,
        meta={"BLOCK": block},
        assume=assume,
        abi=abi,
    )


SPECIALIZED = {"x_ptr": 16, "out_ptr": 16, "N": 16, "stride": 1}


def instance(target: str, dtype: str) -> mf.InstanceSpec:
    variants = {}
    choices = []
    for i, (bound, block) in enumerate(zip(BUCKETS, (16, 64, 128), strict=True)):
        spec = variant(f"c{i}-s", block, SPECIALIZED, f"{target}-{dtype}-{i}-s")
        gen = variant(f"c{i}-g", block, {}, f"{target}-{dtype}-{i}-g")
        variants[spec.id] = spec
        variants[gen.id] = gen
        choices.append(mf.ChoiceSpec((bound,), f"c{i}", "untuned (heuristic)", (gen.id, spec.id)))
    return mf.InstanceSpec(target, {"T": dtype}, variants, tuple(choices))


def pipelines() -> tuple[mf.PipelineSpec, ...]:
    """``twice``: out = (x * 2) * 3 through a scratch tensor, over buckets of M.
    ``biased``: a weight read in place (tmp = w * 2) next to out = x * 5.
    ``stateful``: a state tensor bound at load, written (kv = x * 2) then read (out = kv * 3)."""

    def t(name: str, shape: tuple[str, ...], role: str) -> mf.PipelineTensor:
        return mf.PipelineTensor(name, "fp16", shape, role)

    def scale(x: str, out: str, m: str, factor: float) -> mf.PipelineStep:
        return mf.PipelineStep("scale", (x, out, m, "64", "64", factor))

    twice = mf.PipelineSpec(
        name="twice",
        dims=("M",),
        buckets=(BUCKETS,),
        tensors=(
            t("x", ("M", "64"), "input"),
            t("tmp", ("M", "64"), "scratch"),
            t("out", ("M", "64"), "output"),
        ),
        steps=(scale("x", "tmp", "M", 2.0), scale("tmp", "out", "M", 3.0)),
    )
    biased = mf.PipelineSpec(
        name="biased",
        dims=("M",),
        buckets=(BUCKETS,),
        tensors=(
            t("x", ("M", "64"), "input"),
            t("w", ("16", "64"), "weight"),
            t("wt", ("16", "64"), "output"),
            t("out", ("M", "64"), "output"),
        ),
        steps=(scale("w", "wt", "16", 2.0), scale("x", "out", "M", 5.0)),
    )
    stateful = mf.PipelineSpec(
        name="stateful",
        dims=("M",),
        buckets=(BUCKETS,),
        tensors=(
            t("x", ("M", "64"), "input"),
            t("kv", (str(BUCKETS[-1]), "64"), "state"),
            t("out", ("M", "64"), "output"),
        ),
        steps=(scale("x", "kv", "M", 2.0), scale("kv", "out", "M", 3.0)),
    )
    return (twice, biased, stateful)


def manifest(targets: tuple[str, ...] = ("sm_90", "sm_80")) -> mf.Manifest:
    from aot.targets import resolve

    gpus = [resolve(t) for t in targets]
    kernel = mf.KernelSpec(
        name="scale",
        params=PARAMS,
        dtype_vars={"T": ("fp16", "bf16")},
        grid=("cdiv(M, BLOCK)", "cdiv(N, 128)", "1"),
        bucket_keys=("M",),
        buckets=(BUCKETS,),
        instances=tuple(instance(t, d) for t in targets for d in ("fp16", "bf16")),
    )
    return mf.Manifest(
        name="handmade",
        version="1",
        provenance={"triton": "none", "aotc": "test"},
        targets=tuple(g.to_target() for g in gpus),
        kernels=(kernel,),
        pipelines=pipelines(),
    )


def payloads(m: mf.Manifest) -> dict[str, bytes]:
    """A cubin per variant whose parameter table matches its ABI (tests/cubins.py), marked
    "fake cubin <entry>" so that tests can tell which one the driver was given."""
    out = {}
    for k in m.kernels:
        types = {p.name: p.type for p in k.params}
        for inst in k.instances:
            for v in inst.variants.values():
                sizes = cubins.abi_sizes([types[n] for n in v.abi], v.scratch_args)
                note = f"fake cubin {v.entry}".encode() * 20
                out[v.entry] = cubins.make(v.function, sizes, note)
    return out


def write(path: Path, targets: tuple[str, ...] = ("sm_90", "sm_80")) -> Path:
    m = manifest(targets)
    write_atomic(path, encode(m.to_json(), payloads(m)))
    return path
