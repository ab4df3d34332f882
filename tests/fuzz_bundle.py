"""Structure-aware fuzzing of everything that reads a bundle (issue 16).

Each case is a hostile bundle: a seed bundle's manifest mutated field by field (wrong
types, huge, negative and float integers, deep nesting, missing and extra keys, unicode),
its entries table or payloads changed, zstd frames that lie about their size, random
bytes, truncation, or a signed seed's signature trailer mutated (``trailer``). Header
checksums and entry hashes are recomputed wherever the mutation would otherwise be caught
by them, as an attacker would, so that the decoder itself is tested. Every case goes
through each reader:

- ``archive``: ``loader.format.BundleFile`` open and ``verify`` (header, manifest decode,
  every entry's hashes and decompression);
- ``decode``: ``Manifest.from_json`` on the mutated manifest itself;
- ``verify``, ``inspect``: ``aotc verify`` and ``aotc inspect``;
- ``merge``: ``aotc merge`` of the bundle alone;
- ``load``: ``loader.open`` on the fake CUDA driver, one call of every kernel with
  arguments built from its signature, then ``warmup`` (every cubin checked and loaded),
  then every pipeline bound to weights (its steps prepared; graphs are not captured: the
  fake driver's memory is the host's, so a huge bucket would only test the fake);
- ``trusted``: the loader's signature check with the seeds' signing key trusted
  (``loader.signature.require``). It may accept only a seed exactly as signed: accepting
  any other bytes is a forgery, reported as a crash.

A reader may refuse a case only with its documented errors: ``loader.LoaderError`` in the
loader, ``aot.errors.AotcError`` in the builder. Anything else is a crash; a reader that
runs past CASE_SECONDS is a hang. Memory is capped two ways: the process's address space
is limited to what it had plus MEMORY_CAP_BYTES (``main``; an allocation past it is a
MemoryError, reported as over the cap, even if its pages were never touched), and for the
categories that decode payloads the archive reader's Python allocations are traced
(tracemalloc; tracing everything would multiply the run time by six).

    python -m tests.fuzz_bundle [--cases N] [--seed S] [--json]   # exit 1 on any failure
"""

from __future__ import annotations

import argparse
import contextlib
import functools
import json
import random
import resource
import signal
import struct
import sys
import tempfile
import time
import traceback
import tracemalloc
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import zstandard
from cryptography.hazmat.primitives.asymmetric import ed25519

import loader
from aot.errors import AotcError
from aot.inspect import inspect, verify
from aot.merge import merge
from loader import driver, signature
from loader import manifest as mf
from loader.args import TORCH_NAMES
from loader.errors import LoaderError
from loader.format import (
    HEADER_SIZE,
    SIG_MAGIC,
    BundleFile,
    Signature,
    canonical_json,
    encode,
    encode_trailer,
    signed_message,
)
from tests import craft, cubins, handmade
from tests.fakecuda import FakeLib, FakeTensor

CASE_SECONDS = 10.0
MEMORY_CAP_BYTES = 512 * 2**20  # address space beyond the start (main)
TRACED_CAP_BYTES = 64 * 2**20  # Python allocations of one traced reader run
TRACED = ("zstd-lie", "cubin")  # categories whose payload decoding is traced...
TRACED_READERS = ("archive",)  # ...in these readers
# Cases per category for the default run (about 3,000 in all).
DEFAULT_CASES = {
    "manifest-field": 1500,
    "entries": 300,
    "cubin": 400,
    "zstd-lie": 300,
    "random-bytes": 300,
    "truncation": 200,
    "trailer": 400,
}
ENTRY = "cubin/sm_90-fp16-0-g"  # the entry the first call loads (bucket 0, generic)


class _Timeout(BaseException):
    """Raised by the alarm: a BaseException, so that no reader's ``except`` swallows it."""


@dataclass
class Report:
    cases: Counter[str] = field(default_factory=Counter)
    refused: Counter[str] = field(default_factory=Counter)  # (category) readers refusing
    accepted: Counter[str] = field(default_factory=Counter)
    crashes: list[str] = field(default_factory=list)
    hangs: list[str] = field(default_factory=list)
    over_memory: list[str] = field(default_factory=list)
    peak_bytes: int = 0

    @property
    def failures(self) -> list[str]:
        return self.crashes + self.hangs + self.over_memory

    def table(self) -> str:
        head = "| category | cases | reader runs refused | accepted | crashes | hangs | over cap |"
        rows = [head, "|---|---:|---:|---:|---:|---:|---:|"]
        for cat in self.cases:
            bad = [f for f in self.failures if f.startswith(f"[{cat} ")]
            rows.append(
                f"| {cat} | {self.cases[cat]} | {self.refused[cat]} | {self.accepted[cat]} | "
                f"{sum(f in self.crashes for f in bad)} | {sum(f in self.hangs for f in bad)} | "
                f"{sum(f in self.over_memory for f in bad)} |"
            )
        total = sum(self.cases.values())
        rows.append(
            f"| **all** | {total} | {sum(self.refused.values())} | "
            f"{sum(self.accepted.values())} | {len(self.crashes)} | {len(self.hangs)} | "
            f"{len(self.over_memory)} |"
        )
        rows.append(f"\npeak traced allocation of one decode: {self.peak_bytes / 2**20:.1f} MiB "
                    f"(cap {TRACED_CAP_BYTES / 2**20:.0f} MiB)")  # fmt: skip
        return "\n".join(rows)

    def to_json(self) -> dict[str, Any]:
        return {"cases": dict(self.cases), "refused": dict(self.refused),
                "accepted": dict(self.accepted), "failures": self.failures,
                "peak_bytes": self.peak_bytes, "table": self.table()}  # fmt: skip


# --- seeds ---------------------------------------------------------------------------------


def _model_spec() -> mf.ModelSpec:
    buckets = (
        mf.ModelBucket((1,), "model/H200/batch=1", {"rel_err": 1e-4}),
        mf.ModelBucket((2,), "", {"timed_us": {"eager direct": 8.0}}, "eager", graph=False),
    )
    arts = mf.ModelArtifacts("H200", "cuda", "NVIDIA H200", (9, 0), "2.11.0", "default", buckets)
    return mf.ModelSpec(
        name="layer", source="tiny.py:make_layer", dtype="fp16",
        inputs=(mf.ModelInput("x", "fp16", ("batch", 4)),), outputs=(("batch", 4),),
        single_output=True, dims=("batch",), buckets=((1, 2),), pad=("batch",),
        weights=(mf.ModelWeight("w", "parameter", "fp16", (4, 4), (4, 1)),),
        artifacts=(arts,),
    )  # fmt: skip


def seeds() -> list[tuple[dict[str, Any], dict[str, bytes]]]:
    """(manifest JSON without entries, raw payloads) of each seed bundle."""
    m = handmade.manifest()
    payloads = handmade.payloads(m)
    failed = [{"kernel": "scale", "target": "sm_90", "dtypes": {"T": "fp16"}, "config": "c9",
               "spec": "generic", "reason": "out of resource"}]  # fmt: skip
    plain = {**m.to_json(), "build": {"failed": failed}}
    with_model = {**m.to_json(), "model": _model_spec().to_json()}
    model_payloads = {**payloads, "model/H200/batch=1": b"PK\x03\x04 not really a .pt2" * 8}
    part = {**m.to_json(), "build": {"shard": {"index": 1, "count": 2, "instances": 2, "of": 4}}}
    return [(plain, payloads), (with_model, model_payloads), (part, payloads)]


# A fixed signing key: the fuzz run is deterministic, and Ed25519 signatures are too.
SIGNING_KEY = ed25519.Ed25519PrivateKey.from_private_bytes(bytes(range(32)))
_RAW_PUBLIC = SIGNING_KEY.public_key().public_bytes_raw()
TRUSTED = signature.TrustedKey(signature.key_id(_RAW_PUBLIC), _RAW_PUBLIC, "the fuzz key")


def signed(data: bytes, key: ed25519.Ed25519PrivateKey = SIGNING_KEY) -> bytes:
    """``data`` (an unsigned bundle) with a signature trailer by ``key``."""
    raw = key.public_key().public_bytes_raw()
    kid = signature.key_id(raw)
    sig = key.sign(signed_message(data[:HEADER_SIZE], kid))
    return data + encode_trailer(Signature(kid, sig))


@functools.cache
def genuine() -> frozenset[bytes]:
    """The seeds as signed by SIGNING_KEY: the only bytes the ``trusted`` reader may accept."""
    return frozenset(signed(encode(m, p)) for m, p in seeds())


# --- mutations -------------------------------------------------------------------------------

_TEXT = "\x00RAW\x00"  # a placeholder for JSON text that Python values cannot produce


def _paths(node: Any, path: tuple[Any, ...] = ()) -> Iterator[tuple[Any, ...]]:
    yield path
    if isinstance(node, dict):
        for k, v in node.items():
            yield from _paths(v, (*path, k))
    elif isinstance(node, list):
        for i, v in enumerate(node):
            yield from _paths(v, (*path, i))


def _get(node: Any, path: tuple[Any, ...]) -> Any:
    for p in path:
        node = node[p]
    return node


def _values(rng: random.Random, old: Any) -> list[Any]:
    """Replacement values: wrong types, extreme numbers, odd strings, deep structure."""
    deep = rng.choice([70, 1000, 20000])
    values = [
        None, True, False, 0, -1, 1, 2**31, 2**63, -(2**63) - 1, 10**30, 0.5, -2.5,
        "", "x", "\ud800", "é漢字\u202e", "a" * 5000, "M // 0", "cdiv(M, 0)", "__import__('os')",
        "M+" * 400 + "M", "[" + "1+" * 495 + "1]", "-" * 999 + "M", "(" * 150 + "M" + ")" * 150,
        [], {}, [[]], [None], {"": []}, [1, 2, 3], ["a", "b"], {"a": 1}, {"T": 5},
        (_TEXT, "1e400"), (_TEXT, "-1e400"), (_TEXT, "NaN"), (_TEXT, "1" + "0" * 400),
        (_TEXT, "[" * deep + "]" * deep), (_TEXT, '{"a":' * 100 + "1" + "}" * 100),
    ]  # fmt: skip
    if isinstance(old, bool):
        values += [not old]
    elif isinstance(old, int):
        values += [old + 1, old - 1, -old, old * 2**40, old + 0.5]
    elif isinstance(old, str):
        values += [old + "x", old[:-1], old.upper(), old + "\ud800", old * 3]
    elif isinstance(old, list) and old:
        values += [old[:-1], old + old[-1:], old[::-1], [old[0]] * 200]
    return values


def mutate_manifest(rng: random.Random, manifest: dict[str, Any]) -> list[tuple[str, str]]:
    """Mutate ``manifest`` in place at one to three random places; returns the raw-text
    substitutions (placeholder, JSON text) to apply after serializing."""
    texts: list[tuple[str, str]] = []
    for _ in range(rng.choice([1, 1, 1, 2, 3])):
        paths = [p for p in _paths(manifest) if p]
        path = rng.choice(paths)
        parent, key = _get(manifest, path[:-1]), path[-1]
        how = rng.random()
        if how < 0.15 and isinstance(parent, dict):
            del parent[key]
        elif how < 0.25 and isinstance(parent, dict):
            extra = rng.choice(["extra", "x" * 50, "\u00e9", "__class__"])
            parent[extra] = rng.choice([1, [], "?"])
        elif how < 0.35:
            other = _get(manifest, rng.choice(paths))  # a value from elsewhere: right-ish shape
            parent[key] = json.loads(json.dumps(other))
        else:
            value = rng.choice(_values(rng, parent[key]))
            if isinstance(value, tuple):
                token = f"{_TEXT}{len(texts)}"
                texts.append((json.dumps(token), value[1]))
                value = token
            parent[key] = value
    return texts


def _serialize(manifest: dict[str, Any], texts: list[tuple[str, str]]) -> bytes:
    body = canonical_json(manifest)
    for token, text in texts:
        body = body.replace(canonical_json(json.loads(token)), text.encode(), 1)
    return body


def _stored(raw: dict[str, bytes]) -> dict[str, bytes]:
    c = zstandard.ZstdCompressor(level=1, write_content_size=True)
    return {name: c.compress(data) for name, data in raw.items()}


def _head(length: int) -> bytes:
    return SIG_MAGIC + struct.pack("<I", length)


def _cut(rng: random.Random, data: bytes, trailer: bytes, others: list[bytes]) -> bytes:
    """Cut anywhere in the trailer (at its start: an unsigned bundle)."""
    return data + trailer[: rng.randrange(len(trailer))]


def _flip(rng: random.Random, data: bytes, trailer: bytes, others: list[bytes]) -> bytes:
    b = bytearray(trailer)
    for _ in range(rng.randrange(1, 5)):
        i = rng.randrange(len(b))
        b[i] = b[i] ^ (1 << rng.randrange(8)) if rng.random() < 0.5 else rng.randrange(256)
    return data + bytes(b)


def _fields(rng: random.Random, data: bytes, trailer: bytes, others: list[bytes]) -> bytes:
    """The JSON mutated field by field (as manifests are), its length declared right."""
    doc = json.loads(trailer[12:])
    texts = mutate_manifest(rng, doc)
    body = _serialize(doc, texts)
    return data + _head(len(body)) + body


def _length(rng: random.Random, data: bytes, trailer: bytes, others: list[bytes]) -> bytes:
    body = trailer[12:]
    return data + _head(rng.choice([0, len(body) - 1, len(body) + 1, 2**32 - 1])) + body


def _around(rng: random.Random, data: bytes, trailer: bytes, others: list[bytes]) -> bytes:
    junk = rng.choice([b"\n", b"\x00", trailer, SIG_MAGIC, rng.randbytes(40)])
    return rng.choice([data + trailer + junk, data + junk + trailer, data + trailer[:12] + junk])


def _spliced(rng: random.Random, data: bytes, trailer: bytes, others: list[bytes]) -> bytes:
    """The trailer of another seed: another bundle, signed by the same key."""
    return data + rng.choice(others)


def _other_key(rng: random.Random, data: bytes, trailer: bytes, others: list[bytes]) -> bytes:
    """Another key's signature, under its own key id or under the trusted key's."""
    other = ed25519.Ed25519PrivateKey.from_private_bytes(rng.randbytes(32))
    if rng.random() < 0.5:
        return signed(data, other)
    sig = other.sign(signed_message(data[:HEADER_SIZE], TRUSTED.key_id))
    return data + encode_trailer(Signature(TRUSTED.key_id, sig))


def _sig_bytes(rng: random.Random, data: bytes, trailer: bytes, others: list[bytes]) -> bytes:
    """A well-formed trailer holding zero, all-ones or random signature bytes."""
    sig = rng.choice([bytes(64), b"\xff" * 64, rng.randbytes(64)])
    return data + encode_trailer(Signature(TRUSTED.key_id, sig))


def _respelled(rng: random.Random, data: bytes, trailer: bytes, others: list[bytes]) -> bytes:
    """The same fields in other JSON: spaces, escapes, unpadded base64."""
    doc = json.loads(trailer[12:])
    body = canonical_json(doc)
    body = rng.choice([
        json.dumps(doc).encode(),
        json.dumps(doc, sort_keys=True, indent=1).encode(),
        body.replace(b'"ed25519"', b'"\\u0065d25519"'),
        body.replace(b"/", b"\\/") if b"/" in body else body + b" ",
        canonical_json({**doc, "sig": doc["sig"].rstrip("=")}),
    ])  # fmt: skip
    return data + _head(len(body)) + body


def _rewritten(rng: random.Random, data: bytes, trailer: bytes, others: list[bytes]) -> bytes:
    """The bundle under the signature changed, every hash recomputed (as an attacker can)."""
    manifest, payload = craft.split(data)
    manifest["bundle"]["version"] = rng.choice(["2", "1 ", "0.0.0"])
    return craft.join(canonical_json(manifest), payload) + trailer


TRAILER_MUTATIONS = (_cut, _flip, _fields, _length, _around, _spliced, _other_key, _sig_bytes,
                     _respelled, _rewritten)  # fmt: skip


class Cases:
    """Generators of hostile bundle bytes, one method per category."""

    def __init__(self, rng: random.Random):
        self.rng = rng
        self.seeds = [(m, p, encode(m, p)) for m, p in seeds()]

    def pick(self) -> tuple[dict[str, Any], dict[str, bytes], bytes]:
        m, p, data = self.rng.choice(self.seeds)
        return json.loads(json.dumps(m)), dict(p), data

    def manifest_field(self) -> bytes:
        """The manifest mutated; entries and payloads intact, header re-signed."""
        _, _, data = self.pick()
        manifest, payload = craft.split(data)
        entries = {k: manifest.pop(k) for k in ("entries", "payload_size")}
        texts = mutate_manifest(self.rng, manifest)
        body = _serialize({**manifest, **entries}, texts)
        return craft.join(body, payload)

    def entries(self) -> bytes:
        """The entries table mutated (with payload_size), header re-signed."""
        _, _, data = self.pick()
        manifest, payload = craft.split(data)
        table = {"entries": manifest.pop("entries"), "payload_size": manifest.pop("payload_size")}
        texts = mutate_manifest(self.rng, table)
        return craft.join(_serialize({**manifest, **table}, texts), payload)

    def cubin(self) -> bytes:
        """A cubin damaged or lying about its parameters, every hash recomputed."""
        m, raw, _ = self.pick()
        name = ENTRY if self.rng.random() < 0.7 else self.rng.choice(sorted(raw))
        raw[name] = self._bad_cubin(raw[name])
        return encode(m, raw)

    def _bad_cubin(self, data: bytes) -> bytes:
        rng = self.rng
        how = rng.randrange(6)
        if how == 0:  # another parameter table
            sizes = [rng.choice([0, 1, 2, 4, 8, 16, 2**13]) for _ in range(rng.randrange(12))]
            return cubins.make(rng.choice(["scale_kernel", "other"]), sizes, b"fake cubin")
        if how == 1:
            return data[: rng.randrange(len(data))]
        b = bytearray(data)
        if how == 2:  # bit flips
            for _ in range(rng.randrange(1, 8)):
                b[rng.randrange(len(b))] ^= 1 << rng.randrange(8)
        elif how == 3:  # an ELF header field: shoff, shentsize, shnum, shstrndx
            off, fmt = rng.choice([(0x28, "<Q"), (0x3A, "<H"), (0x3C, "<H"), (0x3E, "<H")])
            small = rng.choice([0, 1, 0xFFFF, len(b) % 2**16, 2**15])
            struct.pack_into(fmt, b, off, small if fmt == "<H" else rng.choice([0, len(b), 2**63]))
        elif how == 4:  # a section header's offset or size
            shoff = struct.unpack_from("<Q", b, 0x28)[0]
            sec = shoff + 64 * rng.randrange(1, 4) + rng.choice([24, 32])
            if sec + 8 <= len(b):
                struct.pack_into("<Q", b, sec, rng.choice([0, len(b), 2**40, 2**64 - 1]))
        else:
            return rng.randbytes(rng.randrange(1, 400))
        return bytes(b)

    def zstd_lie(self) -> bytes:
        """An entry whose stored frame lies (declared size, bombs, extra frames, junk)."""
        rng = self.rng
        _, _, data = self.pick()
        manifest, _ = craft.split(data)
        blobs = craft.stored_blobs(data)
        name = ENTRY if rng.random() < 0.7 else rng.choice(sorted(blobs))
        raw_size = manifest["entries"][name]["raw_size"]
        raw_sha = manifest["entries"][name]["sha256"]
        frame, claim = self._frame(raw_size)
        blobs[name] = frame
        return craft.rebuild(manifest, blobs, {name: (claim, raw_sha)})

    def _frame(self, raw_size: int) -> tuple[bytes, int]:
        rng = self.rng
        how = rng.randrange(6)
        plain = zstandard.ZstdCompressor(level=1, write_content_size=False)
        if how == 0:  # declared content size that is not raw_size
            declared = rng.choice([0, 1, raw_size + 1, 2**31, 2**40, 2**63, 2**64 - 3])
            f = plain.compress(b"z" * raw_size)
            lie = f[:4] + bytes([f[4] | 0xC0]) + f[5:6] + struct.pack("<Q", declared) + f[6:]
            return lie, raw_size
        if how == 1:  # a bomb with no declared size
            bomb = plain.compress(bytes(rng.choice([2**20, 2**26])))
            return bomb, rng.choice([raw_size, 100, 2**21])
        if how == 2:  # two frames, or a skippable frame first
            one = plain.compress(b"q" * raw_size)
            skip = struct.pack("<II", 0x184D2A50, 16) + bytes(16)
            return rng.choice([one + one, skip + one, one + skip]), raw_size
        if how == 3:  # a truncated frame
            f = zstandard.ZstdCompressor(level=1).compress(rng.randbytes(raw_size))
            return f[: rng.randrange(len(f))], raw_size
        if how == 4:  # junk
            return rng.randbytes(rng.randrange(0, 300)), raw_size
        # raw_size claims: zero, one less or more, the cap
        f = zstandard.ZstdCompressor(level=1).compress(bytes(raw_size))
        return f, rng.choice([0, raw_size - 1, raw_size + 1, 2**30, 2**30 + 1])

    def random_bytes(self) -> bytes:
        """Junk: a random file, random manifest text (re-signed), or random flips anywhere."""
        rng = self.rng
        _, _, data = self.pick()
        how = rng.randrange(4)
        if how == 0:
            return rng.randbytes(rng.randrange(0, 2000))
        if how == 1:
            return craft.join(rng.randbytes(rng.randrange(0, 500)), rng.randbytes(100))
        manifest, payload = craft.split(data)
        body = bytearray(canonical_json(manifest))
        target = body if how == 2 else bytearray(data)
        for _ in range(rng.randrange(1, 20)):
            target[rng.randrange(len(target))] = rng.randrange(256)
        return craft.join(bytes(body), payload) if how == 2 else bytes(target)

    def truncation(self) -> bytes:
        """A bundle cut short, or cut and re-signed so the manifest checks out."""
        _, _, data = self.pick()
        cut = data[: self.rng.randrange(len(data))]
        if self.rng.random() < 0.5 or len(cut) < craft.HEADER_SIZE:
            return cut
        mlen = struct.unpack_from("<Q", data, 12)[0]
        body = cut[craft.HEADER_SIZE : craft.HEADER_SIZE + mlen]
        return craft.join(body, cut[craft.HEADER_SIZE + mlen :])

    def trailer(self) -> bytes:
        """A signed seed whose signature trailer is cut, flipped, re-spelled, re-declared,
        spliced from another bundle or key, or kept while the bundle under it changes."""
        _, _, data = self.pick()
        others = [signed(d)[len(d) :] for _, _, d in self.seeds if d != data]
        mutate = self.rng.choice(TRAILER_MUTATIONS)
        return mutate(self.rng, data, signed(data)[len(data) :], others)


# --- readers ---------------------------------------------------------------------------------


def _archive(path: Path) -> None:
    with BundleFile(path) as bf:
        bf.verify()


def _decode(path: Path) -> None:
    try:
        manifest, _ = craft.split(path.read_bytes())
    except Exception:  # not parseable by the test's own helper: nothing to decode
        return
    mf.Manifest.from_json(manifest)


def _args(bundle: loader.Bundle, spec: mf.KernelSpec) -> list[Any]:
    binding: dict[str, str] = {}
    for inst in spec.instances:
        if inst.target == bundle.target.name:
            binding = dict(inst.dtypes)
            break
    out: list[Any] = []
    for i, p in enumerate(spec.params):
        if p.is_pointer:
            elem = binding.get(p.type[1:], p.type[1:])
            out.append(FakeTensor(0x10000 + 0x100 * i, f"torch.{TORCH_NAMES.get(elem, elem)}"))
        elif p.type.startswith("fp"):
            out.append(1.0)
        else:
            out.append(1 if p.type in ("i1", "u1") else 16)
    return out


def _load(path: Path) -> None:
    lib = FakeLib()
    driver.install(driver.Driver(lib))
    try:
        with loader.open(path) as bundle:
            for name in bundle.kernel_names:
                k = bundle.kernel(name)
                # refused at call: fine, and warmup still loads every cubin
                with contextlib.suppress(loader.ArgumentError):
                    k(*_args(bundle, k.spec))
            bundle.warmup()
            for name in bundle.pipeline_names:  # bound (weights by address), not captured
                spec = bundle.manifest.pipeline(name)
                weights = [t.name for t in spec.tensors if t.role == "weight"]
                bundle.pipeline(name, **{w: 0x40000 + 0x100 * i for i, w in enumerate(weights)})
    finally:
        driver.install(None)


class Forged(AssertionError):
    """The signature check accepted bytes that no one signed."""


def _trusted(path: Path) -> None:
    with BundleFile(path) as bf:
        signature.require(bf, (TRUSTED,))
    if path.read_bytes() not in genuine():
        raise Forged("the signature check accepted a bundle that is not a seed as signed")


READERS: dict[str, tuple[Callable[[Path], Any], tuple[type[BaseException], ...]]] = {
    "archive": (_archive, (LoaderError,)),
    "decode": (_decode, (LoaderError,)),
    "verify": (verify, (AotcError,)),
    "inspect": (inspect, (AotcError,)),
    "merge": (lambda p: merge([p], p.with_suffix(".merged.aotc")), (AotcError,)),
    "load": (_load, (LoaderError,)),
    "trusted": (_trusted, (LoaderError,)),
}


def _on_alarm(signum: int, frame: Any) -> None:
    raise _Timeout


def run(
    cases: dict[str, int] | None = None, seed: int = 16, traced: tuple[str, ...] = TRACED
) -> Report:
    """Run the fuzz cases; the report counts them and lists every failure."""
    rng = random.Random(seed)
    gen = Cases(rng)
    report = Report()
    previous = signal.signal(signal.SIGALRM, _on_alarm)
    try:
        with tempfile.TemporaryDirectory(prefix="aotc-fuzz-") as tmp:
            for cat, n in (cases or DEFAULT_CASES).items():
                make = getattr(gen, cat.replace("-", "_"))
                for i in range(n):
                    path = Path(tmp) / f"{cat}-{i}.aotc"
                    path.write_bytes(make())
                    for reader, (fn, allowed) in READERS.items():
                        label = f"[{cat} #{i}] {reader}"
                        trace = cat in traced and reader in TRACED_READERS
                        _attempt(report, cat, label, lambda f=fn, p=path: f(p), allowed, trace)
                    report.cases[cat] += 1
                    path.unlink()
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)
    return report


def _attempt(
    report: Report,
    cat: str,
    label: str,
    call: Callable[[], Any],
    allowed: tuple[type[BaseException], ...],
    trace: bool,
) -> None:
    """One reader on one case, bounded in time (and traced), its outcome counted."""
    if trace:
        tracemalloc.start()
    signal.setitimer(signal.ITIMER_REAL, CASE_SECONDS)
    try:
        call()
        report.accepted[cat] += 1
    except _Timeout:
        report.hangs.append(f"{label}: ran past {CASE_SECONDS} s")
    except allowed:
        report.refused[cat] += 1
    except MemoryError:
        report.over_memory.append(f"{label}: MemoryError (over the address-space cap)")
    except BaseException as exc:  # the point: anything else is a crash
        where = traceback.extract_tb(exc.__traceback__)[-1]
        report.crashes.append(f"{label}: {type(exc).__name__}: {str(exc)[:200]} "
                              f"({Path(where.filename).name}:{where.lineno})")  # fmt: skip
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        if trace:
            peak = tracemalloc.get_traced_memory()[1]
            tracemalloc.stop()
            report.peak_bytes = max(report.peak_bytes, peak)
            if peak > TRACED_CAP_BYTES:
                report.over_memory.append(f"{label}: {peak / 2**20:.0f} MiB traced")


def cap_address_space(extra: int = MEMORY_CAP_BYTES) -> None:
    """Let this process map at most ``extra`` bytes more than it has now (Linux)."""
    pages = int(Path("/proc/self/statm").read_text().split()[0])
    limit = pages * resource.getpagesize() + extra
    resource.setrlimit(resource.RLIMIT_AS, (limit, resource.getrlimit(resource.RLIMIT_AS)[1]))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--cases", type=int, default=0, help="cases per category")
    parser.add_argument("--seed", type=int, default=16)
    parser.add_argument("--json", action="store_true", help="print the report as JSON")
    args = parser.parse_args(argv)
    cases = {c: args.cases for c in DEFAULT_CASES} if args.cases else None
    cap_address_space()
    t0 = time.process_time()
    report = run(cases, args.seed)
    if args.json:
        print(json.dumps({**report.to_json(), "cpu_seconds": time.process_time() - t0}))
    else:
        print(report.table())
        print(f"CPU time: {time.process_time() - t0:.1f} s")
        for f in report.failures[:50]:
            print(f)
    return 1 if report.failures else 0


if __name__ == "__main__":
    sys.exit(main())
