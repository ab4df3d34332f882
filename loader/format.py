"""The bundle container, format v1: the single definition both the builder and loader use.

Layout of a ``.aotc`` file::

    offset 0   magic        8 bytes  b"AOTC\\x00\\r\\n\\x1a" (catches text-mode mangling)
           8   version      u32 little-endian (FORMAT_VERSION)
          12   manifest_len u64 little-endian
          20   manifest_sha 32 bytes, sha256 of the manifest bytes
          52   manifest     UTF-8 JSON, canonical (sorted keys, no spaces), uncompressed
          ..   payloads     each entry zstd-compressed on its own, in sorted name order

The manifest's ``entries`` table maps an entry name to its offset in the payload region,
stored (compressed) size, raw size, and the sha256 of both forms. A reader checks the
stored bytes' hash before decompressing and the raw hash after, so a tampered entry is
never handed to the decompressor or to the GPU. Reading the manifest touches no payload,
and a loader decompresses only the entries it uses.

Builds are reproducible: no timestamps, sorted keys and entries, a fixed compression level
and single-threaded zstd give byte-identical files for identical inputs.
"""

from __future__ import annotations

import hashlib
import json
import os
import struct
import tempfile
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, BinaryIO

from .errors import BundleError

MAGIC = b"AOTC\x00\r\n\x1a"
FORMAT_VERSION = 1
_HEADER = struct.Struct("<8sIQ32s")
HEADER_SIZE = _HEADER.size
ZSTD_LEVEL = 19
# A manifest larger than this is not one we wrote; refuse before allocating for it.
MAX_MANIFEST = 256 * 1024 * 1024


def canonical_json(obj: Any) -> bytes:
    return json.dumps(obj, sort_keys=True, separators=(",", ":"), ensure_ascii=True).encode()


def sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


@dataclass(frozen=True)
class Entry:
    name: str
    offset: int
    size: int
    raw_size: int
    sha256: str
    stored_sha256: str

    @staticmethod
    def from_json(name: str, obj: Any, where: str) -> Entry:
        try:
            e = Entry(
                name=name,
                offset=int(obj["offset"]),
                size=int(obj["size"]),
                raw_size=int(obj["raw_size"]),
                sha256=str(obj["sha256"]),
                stored_sha256=str(obj["stored_sha256"]),
            )
        except (KeyError, TypeError, ValueError) as exc:
            raise BundleError(f"{where}: manifest entry {name!r} is malformed ({exc})") from None
        if e.offset < 0 or e.size < 0 or e.raw_size < 0:
            raise BundleError(f"{where}: manifest entry {name!r} has a negative offset or size")
        return e

    def to_json(self) -> dict[str, Any]:
        return {
            "offset": self.offset,
            "size": self.size,
            "raw_size": self.raw_size,
            "sha256": self.sha256,
            "stored_sha256": self.stored_sha256,
        }


def encode(manifest: Mapping[str, Any], payloads: Mapping[str, bytes]) -> bytes:
    """Serialize a bundle. ``manifest`` must not contain ``entries``/``payload_size``."""
    import zstandard

    if "entries" in manifest or "payload_size" in manifest:
        raise ValueError("manifest keys 'entries' and 'payload_size' are written by encode()")
    compressor = zstandard.ZstdCompressor(level=ZSTD_LEVEL, threads=0, write_content_size=True)
    entries: dict[str, Any] = {}
    blobs: list[bytes] = []
    offset = 0
    for name in sorted(payloads):
        raw = payloads[name]
        stored = compressor.compress(raw)
        entries[name] = Entry(
            name, offset, len(stored), len(raw), sha256(raw), sha256(stored)
        ).to_json()
        blobs.append(stored)
        offset += len(stored)
    body = canonical_json({**manifest, "entries": entries, "payload_size": offset})
    header = _HEADER.pack(MAGIC, FORMAT_VERSION, len(body), hashlib.sha256(body).digest())
    return b"".join([header, body, *blobs])


def write_atomic(path: str | os.PathLike[str], data: bytes) -> None:
    """Write ``data`` to ``path`` so that readers see the old file or the new one, never half."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        # mkstemp creates 0600; give the file the mode a plain open() would have.
        umask = os.umask(0)
        os.umask(umask)
        os.chmod(fd, 0o666 & ~umask)
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


class BundleFile:
    """A bundle opened for reading: the manifest is parsed, payloads are read on demand."""

    def __init__(self, path: str | os.PathLike[str]):
        self.path = Path(path)
        where = str(self.path)
        try:
            self._f: BinaryIO = open(self.path, "rb")  # noqa: SIM115 - kept open for entries
        except FileNotFoundError:
            raise BundleError(f"{where}: no such bundle file") from None
        except IsADirectoryError:
            raise BundleError(f"{where}: is a directory, not a bundle file") from None
        try:
            self.manifest, self.entries, self.payload_start = self._read_header(where)
        except BaseException:
            self._f.close()
            raise
        self.manifest_bytes_len = self.payload_start - HEADER_SIZE

    def _read_header(self, where: str) -> tuple[dict[str, Any], dict[str, Entry], int]:
        head = self._f.read(HEADER_SIZE)
        if not head:
            raise BundleError(f"{where}: empty file, not an aotc bundle")
        if len(head) < HEADER_SIZE:
            if head[: len(MAGIC)] != MAGIC[: len(head)]:
                raise BundleError(f"{where}: not an aotc bundle (bad magic bytes)")
            raise BundleError(f"{where}: truncated: header is {len(head)} of {HEADER_SIZE} bytes")
        magic, version, mlen, msha = _HEADER.unpack(head)
        if magic != MAGIC:
            raise BundleError(f"{where}: not an aotc bundle (bad magic bytes)")
        if version != FORMAT_VERSION:
            raise BundleError(
                f"{where}: bundle format version {version}; this loader reads version "
                f"{FORMAT_VERSION}. Rebuild the bundle with a matching aotc, or upgrade aotc."
            )
        if mlen > MAX_MANIFEST:
            raise BundleError(f"{where}: corrupt header (manifest length {mlen})")
        body = self._f.read(mlen)
        if len(body) < mlen:
            raise BundleError(
                f"{where}: truncated: manifest is {len(body)} of {mlen} bytes; re-download it"
            )
        if hashlib.sha256(body).digest() != msha:
            raise BundleError(f"{where}: manifest checksum mismatch: the file was modified")
        try:
            manifest = json.loads(body)
        except ValueError as exc:
            raise BundleError(f"{where}: manifest is not valid JSON ({exc})") from None
        if not isinstance(manifest, dict) or not isinstance(manifest.get("entries"), dict):
            raise BundleError(f"{where}: manifest has no entries table")
        entries = {n: Entry.from_json(n, e, where) for n, e in manifest["entries"].items()}
        payload_start = HEADER_SIZE + mlen
        payload_size = manifest.get("payload_size")
        if not isinstance(payload_size, int):
            raise BundleError(f"{where}: manifest has no payload_size")
        actual = os.fstat(self._f.fileno()).st_size
        expected = payload_start + payload_size
        if actual < expected:
            raise BundleError(
                f"{where}: truncated: {actual} bytes, expected {expected}; re-download it"
            )
        if actual > expected:
            raise BundleError(f"{where}: {actual - expected} unexpected trailing bytes")
        for e in entries.values():
            if e.offset + e.size > payload_size:
                raise BundleError(f"{where}: entry {e.name!r} lies outside the payload region")
        return manifest, entries, payload_start

    def read_entry(self, name: str) -> bytes:
        """Return an entry's raw bytes after checking both of its hashes."""
        import zstandard

        where = str(self.path)
        entry = self.entries.get(name)
        if entry is None:
            raise BundleError(f"{where}: no entry {name!r} in the bundle")
        # pread: no shared file position, so threads may read entries concurrently.
        stored = os.pread(self._f.fileno(), entry.size, self.payload_start + entry.offset)
        if len(stored) != entry.size or sha256(stored) != entry.stored_sha256:
            raise BundleError(f"{where}: entry {name!r} fails its checksum: the file was modified")
        try:
            raw = zstandard.ZstdDecompressor().decompress(stored, max_output_size=entry.raw_size)
        except zstandard.ZstdError as exc:
            raise BundleError(f"{where}: entry {name!r} does not decompress ({exc})") from None
        if len(raw) != entry.raw_size or sha256(raw) != entry.sha256:
            raise BundleError(f"{where}: entry {name!r} decompresses to the wrong content")
        return raw

    def verify(self) -> list[str]:
        """Check every entry; returns the names checked (raises on the first bad one)."""
        names = sorted(self.entries)
        for name in names:
            self.read_entry(name)
        return names

    def close(self) -> None:
        self._f.close()

    def __enter__(self) -> BundleFile:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
