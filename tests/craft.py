"""Crafting hostile bundles for tests: change anything, then re-sign what integrity checks
cover (the header's manifest checksum, entry offsets, sizes and hashes), as an attacker
can. What is left to refuse them is the decoder's own checks."""

from __future__ import annotations

import hashlib
import struct
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from loader.format import FORMAT_VERSION, HEADER_SIZE, MAGIC, canonical_json, sha256

_HEADER = struct.Struct("<8sIQ32s")


def split(data: bytes) -> tuple[dict[str, Any], bytes]:
    """A bundle's manifest (parsed) and its payload region."""
    import json

    _, _, mlen, _ = _HEADER.unpack_from(data)
    manifest = json.loads(data[HEADER_SIZE : HEADER_SIZE + mlen])
    return manifest, data[HEADER_SIZE + mlen :]


def join(body: bytes, payload: bytes = b"") -> bytes:
    """A bundle of these manifest bytes and payload, its header checksum recomputed."""
    header = _HEADER.pack(MAGIC, FORMAT_VERSION, len(body), hashlib.sha256(body).digest())
    return header + body + payload


def stored_blobs(data: bytes) -> dict[str, bytes]:
    """Each entry's stored (compressed) bytes, by name."""
    manifest, payload = split(data)
    return {
        name: payload[e["offset"] : e["offset"] + e["size"]]
        for name, e in manifest["entries"].items()
    }


def rebuild(
    manifest: Mapping[str, Any],
    stored: Mapping[str, bytes],
    raw: Mapping[str, tuple[int, str]] | None = None,
) -> bytes:
    """A bundle of ``manifest`` (its entries table recomputed) and these stored blobs.
    ``raw`` gives an entry's claimed (raw_size, sha256 of the raw bytes); by default the
    manifest's own entries say it."""
    old = manifest.get("entries", {})
    entries, blobs, offset = {}, [], 0
    for name in sorted(stored):
        blob = stored[name]
        raw_size, raw_sha = (raw or {}).get(name) or (old[name]["raw_size"], old[name]["sha256"])
        entries[name] = {"offset": offset, "size": len(blob), "raw_size": raw_size,
                         "sha256": raw_sha, "stored_sha256": sha256(blob)}  # fmt: skip
        blobs.append(blob)
        offset += len(blob)
    body = canonical_json({**manifest, "entries": entries, "payload_size": offset})
    return join(body, b"".join(blobs))


def write(path: Path, data: bytes) -> Path:
    path.write_bytes(data)
    return path
