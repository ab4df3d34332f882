"""Bundle format v1: round trip, determinism, and refusal of truncated or tampered files."""

from __future__ import annotations

import json
import struct
import tracemalloc
from pathlib import Path
from typing import Any

import pytest
import zstandard

import loader
from aot.errors import BadBundle
from aot.inspect import inspect, verify
from aot.merge import merge
from loader import format as bundle_format
from loader.errors import BundleError
from loader.format import HEADER_SIZE, MAGIC, BundleFile, encode
from loader.format import sha256 as format_sha
from loader.manifest import Manifest
from tests import craft, handmade


def test_round_trip(tmp_path: Path) -> None:
    m = handmade.manifest()
    payloads = handmade.payloads(m)
    path = tmp_path / "x.aotc"
    path.write_bytes(encode(m.to_json(), payloads))
    with BundleFile(path) as bf:
        assert Manifest.from_json(bf.manifest) == m
        for name, raw in payloads.items():
            assert bf.read_entry(name) == raw
        assert bf.verify() == sorted(payloads)


def test_encoding_is_deterministic_and_order_independent() -> None:
    m = handmade.manifest()
    payloads = handmade.payloads(m)
    reversed_payloads = dict(reversed(list(payloads.items())))
    assert encode(m.to_json(), payloads) == encode(m.to_json(), reversed_payloads)


def test_manifest_is_readable_without_payloads(tmp_path: Path) -> None:
    path = handmade.write(tmp_path / "x.aotc")
    data = path.read_bytes()
    _, version, mlen, _ = struct.unpack_from("<8sIQ32s", data)
    manifest = json.loads(data[HEADER_SIZE : HEADER_SIZE + mlen])
    assert version == 1 and manifest["bundle"]["name"] == "handmade"
    assert set(manifest["entries"]) == set(handmade.payloads(handmade.manifest()))


def _damage(path: Path, how: str) -> None:
    data = bytearray(path.read_bytes())
    mlen = struct.unpack_from("<Q", data, 12)[0]
    if how == "truncate-payload":
        data = data[:-10]
    elif how == "truncate-manifest":
        data = data[: HEADER_SIZE + mlen // 2]
    elif how == "truncate-header":
        data = data[:20]
    elif how == "flip-payload":
        data[HEADER_SIZE + mlen + 3] ^= 1
    elif how == "flip-manifest":
        data[HEADER_SIZE + 10] ^= 1
    elif how == "bad-magic":
        data[0:8] = b"PK\x03\x04....."[:8]
    elif how == "version":
        data[8:12] = struct.pack("<I", 2)
    elif how == "append":
        data += b"x"
    elif how == "empty":
        data = bytearray()
    path.write_bytes(bytes(data))


@pytest.mark.parametrize(
    ("how", "message"),
    [
        ("truncate-payload", "truncated"),
        ("truncate-manifest", "truncated: manifest"),
        ("truncate-header", "truncated: header"),
        ("flip-payload", "fails its checksum"),
        ("flip-manifest", "manifest checksum mismatch"),
        ("bad-magic", "not an aotc bundle"),
        ("version", "format version 2"),
        ("append", "unexpected trailing bytes"),
        ("empty", "empty file"),
    ],
)
def test_verify_refuses_damage(tmp_path: Path, how: str, message: str) -> None:
    path = handmade.write(tmp_path / "x.aotc")
    assert verify(path).startswith("OK")
    _damage(path, how)
    with pytest.raises(BadBundle, match=message) as e:
        verify(path)
    assert str(path) in str(e.value)


def test_tampered_payload_with_consistent_length_is_caught_before_decompression(
    tmp_path: Path,
) -> None:
    path = handmade.write(tmp_path / "x.aotc")
    _damage(path, "flip-payload")
    with BundleFile(path) as bf, pytest.raises(BundleError, match="fails its checksum"):
        bf.verify()


def test_missing_and_directory(tmp_path: Path) -> None:
    with pytest.raises(BundleError, match="no such bundle file"):
        BundleFile(tmp_path / "none.aotc")
    with pytest.raises(BundleError, match="is a directory"):
        BundleFile(tmp_path)


def test_manifest_schema_errors_are_bundle_errors(tmp_path: Path) -> None:
    m = handmade.manifest().to_json()
    del m["kernels"][0]["grid"]
    path = tmp_path / "bad.aotc"
    path.write_bytes(encode(m, {}))
    with pytest.raises(BadBundle, match=r"manifest: kernels\[0\].grid is missing"):
        inspect(path)


def test_inspect_summarizes(tmp_path: Path) -> None:
    text = inspect(handmade.write(tmp_path / "x.aotc"))
    assert "handmade 1" in text
    assert "kernel scale(x_ptr: *T, out_ptr: *T, M: i32, N: i32, stride: i32, scale: fp32)" in text
    assert "buckets on M: [1, 16, 256]" in text
    assert "sm_90 [T=fp16]: 6 variants; 3 buckets untuned (heuristic)" in text


def test_magic_is_stable() -> None:
    assert MAGIC == b"AOTC\x00\r\n\x1a"


# --- crafted bundles (issue 16): every hash re-signed, so only the decoder can refuse them


def _crafted(tmp_path: Path, edit: Any) -> Path:
    """handmade's bundle with its manifest JSON edited by ``edit`` and re-encoded."""
    m = handmade.manifest()
    j = m.to_json()
    edit(j)
    return craft.write(tmp_path / "crafted.aotc", encode(j, handmade.payloads(m)))


def _retext(path: Path, old: bytes, new: bytes) -> Path:
    """Replace manifest text (a number JSON cannot round-trip, say) and re-sign the header."""
    data = path.read_bytes()
    _, payload = craft.split(data)
    mlen = struct.unpack_from("<Q", data, 12)[0]
    body = data[HEADER_SIZE : HEADER_SIZE + mlen]
    assert old in body
    return craft.write(path, craft.join(body.replace(old, new, 1), payload))


def _refused_everywhere(path: Path, message: str, tmp_path: Path) -> None:
    """verify, inspect, merge and loader.open all refuse ``path`` with ``message``."""
    for check in (verify, inspect):
        with pytest.raises(BadBundle, match=message):
            check(path)
    with pytest.raises(BadBundle, match=message):
        merge([path], tmp_path / "merged.aotc")
    with pytest.raises(loader.BundleError, match=message):
        loader.open(path)  # refused before any driver call


@pytest.mark.parametrize("depth", [70, 1000, 100_000])
def test_deep_nesting_is_refused_by_verify_inspect_merge_and_open(
    tmp_path: Path, depth: int
) -> None:
    path = _crafted(tmp_path, lambda j: j["provenance"].update(deep="DEEP"))
    _retext(path, b'"DEEP"', b"[" * depth + b"]" * depth)
    _refused_everywhere(path, "nested", tmp_path)


@pytest.mark.parametrize(
    ("field", "text", "message"),
    [
        ("raw_size", b"1e400", r"raw_size must be an integer from 0 to 1073741824"),
        ("raw_size", str(10**30).encode(), r"raw_size must be an integer from 0 to"),
        ("raw_size", str(2**63).encode(), r"raw_size must be an integer from 0 to"),
        ("size", b"1e400", r"\.size must be an integer"),
        ("size", b"-1", r"\.size must be an integer"),
        ("offset", b"true", r"\.offset must be an integer"),
        ("offset", b"1.0", r"\.offset must be an integer"),
        ("raw_size", b"NaN", "not valid JSON"),
    ],
)
def test_entry_sizes_are_checked_integers(
    tmp_path: Path, field: str, text: bytes, message: str
) -> None:
    path = handmade.write(tmp_path / "x.aotc")
    manifest, _ = craft.split(path.read_bytes())
    entry = manifest["entries"]["cubin/sm_80-bf16-0-g"]
    _retext(path, f'"{field}":{entry[field]},'.encode(), f'"{field}":'.encode() + text + b",")
    _refused_everywhere(path, message, tmp_path)


@pytest.mark.parametrize(
    ("edit", "message"),
    [
        (lambda j: j.update(build=[]), r"manifest: build must be an object, got list \[\]"),
        (
            lambda j: j["kernels"][0]["instances"][0]["choices"][0].update(metrics=5),
            r"kernels\[0\]\.instances\[0\]\.choices\[0\]\.metrics must be an object, got int 5",
        ),
        (
            lambda j: j["kernels"][0]["instances"][0]["choices"][0].update(variants=[[]]),
            r"choices\[0\]\.variants\[0\] must be a string, got list",
        ),
        (
            lambda j: j["kernels"][0]["instances"][1].update(variants=[[]]),
            r"instances\[1\]\.variants\[0\] must be an object, got list",
        ),
        (
            lambda j: j["kernels"][0].update(dtype_vars={"T": 5}),
            r'kernels\[0\]\.dtype_vars\["T"\] must be a list, got int 5',
        ),
        (
            lambda j: j["kernels"][0]["instances"][1]["variants"][0]["abi"].__setitem__(3, 7),
            r'kernels\[0\]\.instances\[1\]\.variants\["c0-g"\]\.abi\[3\] must be a string, '
            r"got int 7",
        ),
        (
            lambda j: j["kernels"][0]["instances"][0]["variants"][0].update(num_warps=True),
            r"num_warps must be an integer from 1 to 32, got bool True",
        ),
        (
            lambda j: j["build"].update(failed=[5]),
            r"build\.failed\[0\] must be an object, got int 5",
        ),
        (lambda j: j["targets"][0].update(cc=[9]), r"targets\[0\]\.cc must be a list of 2"),
        (lambda j: j["bundle"].update(name="\ud800"), r"bundle\.name must be a string"),
    ],
)
def test_wrong_types_are_refused_with_the_field_path(
    tmp_path: Path, edit: Any, message: str
) -> None:
    _refused_everywhere(_crafted(tmp_path, edit), message, tmp_path)


def _frame(raw: bytes, declared: int | None) -> bytes:
    """A zstd frame of ``raw`` whose header claims ``declared`` bytes of content (none:
    no claim at all)."""
    plain = zstandard.ZstdCompressor(level=3, write_content_size=False).compress(raw)
    assert plain[4] & 0xC0 == 0 and not plain[4] & 0x20  # no size field, a window byte
    if declared is None:
        return plain
    fhd = plain[4] | 0xC0  # an 8-byte Frame_Content_Size field
    return plain[:4] + bytes([fhd]) + plain[5:6] + struct.pack("<Q", declared) + plain[6:]


def _lying(tmp_path: Path, stored: bytes, raw_size: int, raw_sha: str = "0" * 64) -> Path:
    data = handmade.write(tmp_path / "x.aotc").read_bytes()
    manifest, _ = craft.split(data)
    blobs = craft.stored_blobs(data)
    name = "cubin/sm_90-fp16-0-s"
    blobs[name] = stored
    return craft.write(
        tmp_path / "lie.aotc", craft.rebuild(manifest, blobs, {name: (raw_size, raw_sha)})
    )


@pytest.mark.parametrize("declared", [2**31, 2**40, 2**63, 2**64 - 3])
def test_a_frame_claiming_more_than_raw_size_is_refused_without_allocating_it(
    tmp_path: Path, declared: int
) -> None:
    raw = b"x" * 100
    path = _lying(tmp_path, _frame(raw, declared), 100, format_sha(raw))
    tracemalloc.start()
    try:
        with pytest.raises(BadBundle, match=r"frame declares|does not decompress"):
            verify(path)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 16 * 2**20, peak


def test_a_frame_that_expands_past_raw_size_stops_at_raw_size(tmp_path: Path) -> None:
    raw = bytes(64 * 2**20)  # 64 MiB of zeros: a few KiB compressed, no size declared
    bomb = zstandard.ZstdCompressor(level=3, write_content_size=False).compress(raw)
    small = zstandard.ZstdCompressor(level=3, write_content_size=False)
    with pytest.raises(BadBundle):  # untraced first: modules verify imports on first use
        verify(_lying(tmp_path, bomb, 100))  # would count (1.3 MB when this test runs alone)
    for stored, claim in ((bomb, 100), (bomb, 2**21), (small.compress(b"y" * 10), 5)):
        path = _lying(tmp_path, stored, claim)
        tracemalloc.start()
        try:
            with pytest.raises(BadBundle, match="decompress"):
                verify(path)
            peak = tracemalloc.get_traced_memory()[1]
        finally:
            tracemalloc.stop()
        assert peak < 3 * claim + 2**20, (claim, peak)


MAX_ENTRY_SIZE = 1 << 30  # the documented cap (loader/format.py)


def test_an_entry_over_the_cap_is_refused(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    assert getattr(bundle_format, "MAX_ENTRY_SIZE", None) == MAX_ENTRY_SIZE
    path = _lying(tmp_path, _frame(b"x" * 100, None), MAX_ENTRY_SIZE + 1)
    _refused_everywhere(path, "at most 1073741824", tmp_path)
    monkeypatch.setattr(bundle_format, "MAX_ENTRY_SIZE", 1000)  # and the builder keeps to it
    with pytest.raises(ValueError, match="'big' is 1001 bytes; a bundle entry is at most 1000"):
        encode({}, {"big": b"\0" * 1001})


def test_a_missing_entry_is_refused_at_open(tmp_path: Path) -> None:
    m = handmade.manifest()
    payloads = handmade.payloads(m)
    del payloads["cubin/sm_80-bf16-2-s"]
    path = craft.write(tmp_path / "x.aotc", encode(m.to_json(), payloads))
    _refused_everywhere(path, "variant c2-s of scale names a missing entry", tmp_path)
