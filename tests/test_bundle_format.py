"""Bundle format v1: round trip, determinism, and refusal of truncated or tampered files."""

from __future__ import annotations

import json
import struct
from pathlib import Path

import pytest

from aot.errors import BadBundle
from aot.inspect import inspect, verify
from loader.errors import BundleError
from loader.format import HEADER_SIZE, MAGIC, BundleFile, encode
from loader.manifest import Manifest
from tests import handmade


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
