"""Pack: the model's manifest records and payloads (format in ``loader/manifest.py``).

One ``ModelArtifacts`` per place, one ``ModelBucket`` per bucket; a bucket served by a
compiled artifact ships it as an entry, a bucket the module's eager forward serves ships
nothing (the loader runs the service's own module there).
"""

from __future__ import annotations

from collections.abc import Sequence

from loader import manifest as mf

from ..recipe import ModelRecipe
from .plan import Place
from .select import Outcome


def entry_name(target: str, dims: Sequence[str], bucket: Sequence[int]) -> str:
    return f"model/{target}/" + ",".join(f"{d}={b}" for d, b in zip(dims, bucket, strict=True))


def bucket_record(mr: ModelRecipe, place: Place, o: Outcome) -> tuple[mf.ModelBucket, bytes]:
    """The bucket's record, and its entry's bytes (none when eager serves it)."""
    s = o.serving
    entry = entry_name(place.target, mr.dims, o.bucket) if s.impl == "compiled" else ""
    record = mf.ModelBucket(o.bucket, entry, dict(o.metrics), s.impl, s.graph, s.mode)
    return record, o.data if entry else b""


def artifacts_record(
    mr: ModelRecipe, place: Place, buckets: Sequence[mf.ModelBucket], torch_version: str
) -> mf.ModelArtifacts:
    """Everything built for one place."""
    return mf.ModelArtifacts(
        target=place.target,
        device="cpu" if place.device == "cpu" else "cuda",
        device_name=place.name,
        cc=place.cc,
        torch=torch_version,
        mode=mr.mode,
        buckets=tuple(buckets),
        backend=mr.backend,
    )


def model_record(
    mr: ModelRecipe, weights: Sequence[mf.ModelWeight], single_output: bool,
    artifacts: Sequence[mf.ModelArtifacts],
) -> mf.ModelSpec:  # fmt: skip
    """The manifest's ``model``: what the loader checks a call and a module against."""
    return mf.ModelSpec(
        name=mr.name,
        source=mr.source_text,
        dtype=mr.dtype,
        inputs=mr.inputs,
        outputs=mr.outputs,
        single_output=single_output,
        dims=mr.dims,
        buckets=mr.buckets,
        pad=mr.pad,
        weights=tuple(weights),
        artifacts=tuple(artifacts),
    )
