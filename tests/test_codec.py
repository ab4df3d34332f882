"""The generic manifest codec (loader/codec.py): what it writes, what it refuses, and that
the manifest it writes is the one the hand-written pairs wrote, byte for byte."""

from __future__ import annotations

import dataclasses
import hashlib
import sys
import types
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Annotated, Any

import pytest

from loader import codec
from loader import manifest as mf
from loader.codec import DecodeError, Range, decode, encode
from loader.format import canonical_json
from tests import handmade


@dataclass(frozen=True)
class Leaf:
    id: str
    size: Annotated[int, Range(0, 100)]
    ratio: float = 1.0
    tags: tuple[str, ...] = ()

    def _validate(self) -> None:
        if self.id == "bad":
            raise ValueError("id may not be 'bad'")


@dataclass(frozen=True)
class Named:
    name: str = field(metadata=codec.spec(stored=False))
    n: int


@dataclass(frozen=True)
class Root:
    title: str = field(metadata=codec.spec(key=("head", "title")))
    leaves: Mapping[str, Leaf] = field(metadata=codec.spec(listed_by="id"))
    named: Mapping[str, Named] = field(metadata=codec.spec(named_by="name"))
    pair: tuple[int, str]
    maybe: Leaf | None
    free: Mapping[str, Any] = field(default_factory=dict)
    mode: str = field(default="", metadata=codec.spec(omit_default=True, note="a mode name"))
    either: tuple[str | int, ...] = ()


RAW: dict[str, Any] = {
    "head": {"title": "t"},
    "leaves": [{"id": "a", "size": 1, "ratio": 2, "tags": ["x"]}, {"id": "b", "size": 2}],
    "named": {"k": {"n": 5}},
    "pair": [1, "one"],
    "maybe": None,
    "free": {"deep": [{"x": [1.5, None, True]}]},
    "either": ["M", 4],
}


def test_round_trip_and_layout() -> None:
    root = decode(Root, RAW, "")
    assert root.title == "t" and root.leaves["a"].tags == ("x",) and root.named["k"].name == "k"
    assert root.leaves["a"].ratio == 2 and type(root.leaves["a"].ratio) is int  # kept as written
    assert root.leaves["b"] == Leaf("b", 2)  # defaults, declared on the fields
    out = encode(root)
    assert "mode" not in out and out["named"] == {"k": {"n": 5}}
    assert out["leaves"] == [
        {"id": "a", "size": 1, "ratio": 2, "tags": ["x"]},
        {"id": "b", "size": 2, "ratio": 1.0, "tags": []},
    ]
    assert decode(Root, out, "") == root
    assert encode(dataclasses.replace(root, mode="m"))["mode"] == "m"
    assert decode(Root, {**RAW, "unknown": [1]}, "") == root  # newer keys are ignored
    assert decode(Root, {k: v for k, v in RAW.items() if k != "maybe"}, "").maybe is None


@pytest.mark.parametrize(
    ("path", "value", "message"),
    [
        (("head", "title"), 5, "head.title must be a string, got int 5"),
        (("head",), [], "head.title is missing"),
        (
            ("leaves", 1, "size"),
            True,
            'leaves["b"].size must be an integer from 0 to 100, got bool',
        ),
        (("leaves", 1, "size"), 101, 'leaves["b"].size must be an integer from 0 to 100, got int'),
        (
            ("leaves", 1, "size"),
            1.0,
            'leaves["b"].size must be an integer from 0 to 100, got float',
        ),
        (("leaves", 1, "id"), "a", "leaves[\"a\"] repeats id 'a'"),
        (("leaves", 1, "id"), "bad", "leaves[\"bad\"]: id may not be 'bad'"),
        (("leaves", 1), [], r"leaves[1] must be an object, got list []"),
        (("leaves", 0, "ratio"), float("inf"), 'leaves["a"].ratio must be a number, got float inf'),
        (("leaves", 0, "ratio"), 10**400, 'leaves["a"].ratio must be a number, got int'),
        (("leaves", 0, "tags", 0), None, 'leaves["a"].tags[0] must be a string, got NoneType'),
        (("named", "k", "n"), "5", 'named["k"].n must be an integer'),
        (("pair",), [1], "pair must be a list of 2, got 1 items"),
        (("pair", 1), "\ud800", "pair[1] must be a string, got str"),
        (("maybe",), 3, "maybe must be an object or null, got int 3"),
        (("maybe",), {"id": "z"}, "maybe.size is missing"),
        (("free", "deep"), [float("nan")], 'free["deep"] holds a non-finite number'),
        (("free", "deep"), [[[[[]]]]], 'free["deep"] is nested more than 4 levels deep'),
        (("mode",), 3, "mode must be a string (a mode name), got int 3"),
        (("either", 0), 1.5, "either[0] must be a string or an integer"),
    ],
)
def test_every_error_names_the_field_path(
    path: tuple[Any, ...], value: Any, message: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(codec, "MAX_DEPTH", 4)
    raw = copy(RAW)
    node = raw
    for key in path[:-1]:
        node = node[key]
    node[path[-1]] = value
    with pytest.raises(DecodeError) as e:
        decode(Root, raw, "")
    assert str(e.value).startswith(message), str(e.value)


def copy(x: Any) -> Any:
    if isinstance(x, dict):
        return {k: copy(v) for k, v in x.items()}
    return [copy(v) for v in x] if isinstance(x, list) else x


def test_manifest_errors_name_the_manifest_path() -> None:
    j = handmade.manifest().to_json()
    j["kernels"][0]["instances"][1]["variants"][0]["abi"][3] = 7
    with pytest.raises(mf.ManifestError) as e:
        mf.Manifest.from_json(j)
    assert str(e.value) == (
        'manifest: kernels[0].instances[1].variants["c0-g"].abi[3] must be a string, got int 7'
    )


# sha256 of canonical_json(manifest.to_json()) for these manifests, as the hand-written
# to_json methods of e9742d6 wrote them: a model (every optional field set on one bucket,
# left at its default on the other, a CPU artifact without cc), build records, pipelines;
# and a kernel whose choices carry metrics.
BEFORE = (
    "d66d20f99383ef52a3442742b8c69ce2ddbce1f50454d4ee20df345e87729451",
    "c9324eda4f23c918cc6af8329297af9381b8232d3aa1c14b473b8e7e26d77192",
)


def _manifests() -> tuple[mf.Manifest, mf.Manifest]:
    buckets = (
        mf.ModelBucket((1,), "model/H200/batch=1", {"rel_err": 1e-4}, mode="default"),
        mf.ModelBucket((2,), "", {"timed_us": {"eager direct": 8.0}}, "eager", graph=False),
    )
    arts = mf.ModelArtifacts("H200", "cuda", "NVIDIA H200", (9, 0), "2.11.0", "default",
                             buckets, backend="aoti")  # fmt: skip
    cpu = mf.ModelArtifacts("cpu", "cpu", "x86", None, "2.11.0", "default", buckets)
    spec = mf.ModelSpec(
        name="layer", source="tiny.py:make_layer", dtype="fp16",
        inputs=(mf.ModelInput("x", "fp16", ("batch", 4)),), outputs=(("batch", 4),),
        single_output=True, dims=("batch",), buckets=((1, 2),), pad=("batch",),
        weights=(mf.ModelWeight("w", "parameter", "fp16", (4, 4), (4, 1)),),
        artifacts=(arts, cpu),
    )  # fmt: skip
    base = handmade.manifest()
    # The pipelines handmade had then ("stateful", with a state tensor, came later).
    base = dataclasses.replace(base, pipelines=base.pipelines[:2])
    m = dataclasses.replace(
        base, model=spec, build={"failed": [{"kernel": "k"}], "shard": {"index": 1}}
    )
    m2 = handmade.manifest(targets=("sm_80",))
    inst = m2.kernels[0].instances[0]
    choices = tuple(dataclasses.replace(c, metrics={"us": 1.5}) for c in inst.choices)
    kernel = dataclasses.replace(
        m2.kernels[0], instances=(dataclasses.replace(inst, choices=choices),)
    )
    return m, dataclasses.replace(m2, pipelines=(), kernels=(kernel,))


def test_the_encoded_manifest_is_unchanged_byte_for_byte() -> None:
    for m, digest in zip(_manifests(), BEFORE, strict=True):
        assert hashlib.sha256(canonical_json(m.to_json())).hexdigest() == digest
    model = _manifests()[0].model
    assert model is not None and mf.ModelSpec.from_json(model.to_json()) == model


LAZY_MODULE = """
from __future__ import annotations
from dataclasses import dataclass

asked = []

def __getattr__(name):
    asked.append(name)
    if name == "Later":
        from tests.test_codec import Leaf
        return Leaf
    raise AttributeError(name)

@dataclass(frozen=True)
class Holder:
    first: Later
    absent: Never | None = None
"""


def test_annotations_resolve_through_the_modules_getattr_and_only_when_needed(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """loader/manifest.py imports the records of sections a bundle may lack on first use,
    through its ``__getattr__``: the codec resolves a field's annotation that way, and
    only when a value comes for it."""
    module = types.ModuleType("tests._lazy_records")
    monkeypatch.setitem(sys.modules, module.__name__, module)
    exec(LAZY_MODULE, vars(module))
    holder = decode(module.Holder, {"first": {"id": "a", "size": 1}}, "h")
    assert holder.first == Leaf("a", 1) and holder.absent is None
    assert "Later" in module.asked and "Never" not in module.asked
    with pytest.raises(DecodeError, match=r"h\.first\.size must be an integer from 0 to 100"):
        decode(module.Holder, {"first": {"id": "a", "size": 101}}, "h")
