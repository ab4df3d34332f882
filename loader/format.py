"""The bundle container, format v1: the single definition both the builder and loader use.

Layout of a ``.aotc`` file::

    offset 0   magic        8 bytes  b"AOTC\\x00\\r\\n\\x1a" (catches text-mode mangling)
           8   version      u32 little-endian (FORMAT_VERSION)
          12   manifest_len u64 little-endian
          20   manifest_sha 32 bytes, sha256 of the manifest bytes
          52   manifest     UTF-8 JSON, canonical (sorted keys, no spaces), uncompressed
          ..   payloads     each entry zstd-compressed on its own, in sorted name order
          ..   signature    optional trailer (``aotc sign``):
                 magic      8 bytes  b"AOTCSIG1"
                 length     u32 little-endian, the JSON's length (at most MAX_TRAILER)
                 JSON       canonical: {"alg": "ed25519", "key_id": 16 hex digits,
                            "sig": base64 of the 64-byte signature}

The manifest's ``entries`` table maps an entry name to its offset in the payload region,
stored (compressed) size, raw size, and the sha256 of both forms. A reader checks the
stored bytes' hash before decompressing and the raw hash after, so a tampered entry is
never handed to the decompressor or to the GPU. Reading the manifest touches no payload,
and a loader decompresses only the entries it uses.

Builds are reproducible: no timestamps, sorted keys and entries, a fixed compression level
and single-threaded zstd give byte-identical files for identical inputs.

The signature trailer's rationale and strict form: loader/trailer.py.

``BundleFile`` is the archive layer: the one place that opens a bundle, checks its header,
manifest and (on demand) entry hashes, and decodes the typed manifest. It needs no GPU,
and every failure is a ``BundleError``. Untrusted bytes meet these limits first:
- the manifest is at most MAX_MANIFEST bytes and JSON nested at most MAX_DEPTH levels;
- an entry decompresses to at most MAX_ENTRY_SIZE bytes (1 GiB): its declared
  ``raw_size`` is checked against that cap and against the size its zstd frame declares
  before anything is allocated, and decompression streams into at most ``raw_size``
  bytes (python-zstandard would otherwise trust the frame's own size claim).
"""

from __future__ import annotations

import hashlib
import json
import os
import struct
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, BinaryIO

from . import codec
from .codec import Range, canonical_json, no_constant
from .errors import BundleError
from .manifest import Manifest, ManifestError

if TYPE_CHECKING:
    from .trailer import (
        MAX_TRAILER,
        SIG_ALG,
        SIG_MAGIC,
        Signature,
        encode_trailer,
        parse_trailer,
        signed_message,
    )

_TRAILER_NAMES = frozenset(("MAX_TRAILER", "SIG_ALG", "SIG_MAGIC", "Signature", "encode_trailer",
                            "parse_trailer", "read_trailer", "signed_message"))  # fmt: skip


def __getattr__(name: str) -> Any:
    # loader/trailer.py is imported when a bundle has a trailer, or a name of it is asked
    # for here: an unsigned bundle opens without it (start-up time).
    if name in _TRAILER_NAMES:
        from . import trailer

        value = getattr(trailer, name)
        globals()[name] = value
        return value
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


# The trailer's names and canonical_json are imported from here too (aot, tests).
__all__ = [
    "FORMAT_VERSION",
    "HEADER_SIZE",
    "MAGIC",
    "MAX_DEPTH",
    "MAX_ENTRY_SIZE",
    "MAX_MANIFEST",
    "MAX_TRAILER",
    "SIG_ALG",
    "SIG_MAGIC",
    "ZSTD_LEVEL",
    "BundleFile",
    "Entry",
    "Signature",
    "canonical_json",
    "decompress",
    "encode",
    "encode_trailer",
    "parse_manifest",
    "parse_trailer",
    "sha256",
    "signed_message",
    "write_atomic",
]

MAGIC = b"AOTC\x00\r\n\x1a"
FORMAT_VERSION = 1
_HEADER = struct.Struct("<8sIQ32s")
HEADER_SIZE = _HEADER.size
ZSTD_LEVEL = 19
# A manifest larger than this is not one we wrote; refuse before allocating for it.
MAX_MANIFEST = 256 * 1024 * 1024
# JSON nesting of the manifest (ours is about 8 deep); deeper documents are refused before
# anything walks them recursively.
MAX_DEPTH = codec.MAX_DEPTH
# The largest entry, decompressed. Cubins are kilobytes and model artifacts megabytes.
MAX_ENTRY_SIZE = 1 << 30
_MIN_WINDOW = 1 << 10  # zstd's smallest window
_CHUNK = 1 << 20  # how much of a frame of undeclared size is read at a time


def sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


@dataclass(frozen=True)
class Entry:
    """One payload: where its compressed bytes lie in the payload region, and its hashes."""

    name: str = field(metadata=codec.spec(stored=False))  # the key of the entries table
    offset: Annotated[int, Range(0, 2**62)]
    size: Annotated[int, Range(0, 2 * MAX_ENTRY_SIZE)]
    raw_size: Annotated[int, Range(0, MAX_ENTRY_SIZE)] = field(
        metadata=codec.spec(note=f"an entry is at most {MAX_ENTRY_SIZE} bytes")
    )
    sha256: str
    stored_sha256: str


@dataclass(frozen=True)
class _Layout:
    """The manifest's own table of the payload region (written by ``encode``)."""

    entries: Mapping[str, Entry] = field(metadata=codec.spec(named_by="name"))
    payload_size: Annotated[int, Range(0, 2**62)]


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
        if len(raw) > MAX_ENTRY_SIZE:
            raise ValueError(f"entry {name!r} is {len(raw)} bytes; a bundle entry is at most "
                             f"{MAX_ENTRY_SIZE}")  # fmt: skip
        stored = compressor.compress(raw)
        entry = Entry(name, offset, len(stored), len(raw), sha256(raw), sha256(stored))
        entries[name] = codec.encode(entry)
        blobs.append(stored)
        offset += len(stored)
    body = canonical_json({**manifest, "entries": entries, "payload_size": offset})
    header = _HEADER.pack(MAGIC, FORMAT_VERSION, len(body), hashlib.sha256(body).digest())
    return b"".join([header, body, *blobs])


def write_atomic(path: str | os.PathLike[str], data: bytes) -> None:
    """Write ``data`` to ``path`` so that readers see the old file or the new one, never half."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    import tempfile  # only writers need it; readers start faster without

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
    """A bundle opened for reading: the manifest is checked and decoded, payloads are read
    on demand. ``manifest`` is the manifest's JSON as written, ``spec`` its typed form.
    ``header`` is the file's first HEADER_SIZE bytes, ``payload_end`` where its payload
    region ends, ``signature`` its parsed signature trailer (None if unsigned)."""

    header: bytes
    payload_end: int
    signature: Signature | None

    def __init__(self, path: str | os.PathLike[str]):
        self.path = Path(path)
        where = str(self.path)
        try:
            self._f: BinaryIO = open(self.path, "rb")  # noqa: SIM115 - kept open for entries
        except FileNotFoundError:
            raise BundleError(f"{where}: no such bundle file") from None
        except IsADirectoryError:
            raise BundleError(f"{where}: is a directory, not a bundle file") from None
        except OSError as exc:
            raise BundleError(f"{where}: cannot read it ({exc.strerror or exc})") from None
        try:
            self.manifest, self.entries, self.payload_start = self._read_header(where)
            self.spec: Manifest = _decode(self.manifest, self.entries, where)
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
        self.header = head
        magic, version, mlen, msha = _HEADER.unpack(head)
        if magic != MAGIC:
            raise BundleError(f"{where}: not an aotc bundle (bad magic bytes)")
        if version != FORMAT_VERSION:
            raise BundleError(
                f"{where}: bundle format version {version}; this loader reads version "
                f"{FORMAT_VERSION}. Rebuild the bundle with a matching aotc, or upgrade aotc."
            )
        actual = os.fstat(self._f.fileno()).st_size
        if mlen > MAX_MANIFEST:
            raise BundleError(f"{where}: corrupt header (manifest length {mlen})")
        if HEADER_SIZE + mlen > actual:
            raise BundleError(
                f"{where}: truncated: manifest is {actual - HEADER_SIZE} of {mlen} bytes; "
                "re-download it"
            )
        body = self._f.read(mlen)
        if len(body) < mlen:
            raise BundleError(
                f"{where}: truncated: manifest is {len(body)} of {mlen} bytes; re-download it"
            )
        if hashlib.sha256(body).digest() != msha:
            raise BundleError(f"{where}: manifest checksum mismatch: the file was modified")
        manifest = parse_manifest(body, where)
        try:
            layout = codec.decode(_Layout, manifest, "")
        except codec.DecodeError as exc:
            raise BundleError(f"{where}: manifest: {exc}") from None
        payload_start = HEADER_SIZE + mlen
        expected = payload_start + layout.payload_size
        if actual < expected:
            raise BundleError(
                f"{where}: truncated: {actual} bytes, expected {expected}; re-download it"
            )
        self.payload_end = expected
        self.signature = None
        if actual != expected:  # trailing bytes: a signature, or refused
            from .trailer import read_trailer

            self.signature = read_trailer(self._f.fileno(), expected, actual, where)
        for e in layout.entries.values():
            if e.offset + e.size > layout.payload_size:
                raise BundleError(f"{where}: entry {e.name!r} lies outside the payload region")
        return manifest, dict(layout.entries), payload_start

    def unsigned_bytes(self) -> bytes:
        """The file without its signature trailer: the bytes a signature is made for."""
        data = os.pread(self._f.fileno(), self.payload_end, 0)
        if len(data) != self.payload_end or not data.startswith(self.header):
            raise BundleError(f"{self.path}: changed while it was read; try again")
        return data

    def read_entry(self, name: str) -> bytes:
        """Return an entry's raw bytes after checking both of its hashes."""
        where = str(self.path)
        entry = self.entries.get(name)
        if entry is None:
            raise BundleError(f"{where}: no entry {name!r} in the bundle")
        # pread: no shared file position, so threads may read entries concurrently.
        stored = os.pread(self._f.fileno(), entry.size, self.payload_start + entry.offset)
        if len(stored) != entry.size or sha256(stored) != entry.stored_sha256:
            raise BundleError(f"{where}: entry {name!r} fails its checksum: the file was modified")
        raw = decompress(stored, entry.raw_size, f"{where}: entry {name!r}")
        if sha256(raw) != entry.sha256:
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


def parse_manifest(body: bytes, where: str) -> dict[str, Any]:
    """The manifest's JSON: UTF-8, an object nested at most MAX_DEPTH levels. (Values are
    checked by the codec, which names the field.)"""
    try:
        manifest = json.loads(body.decode("utf-8"), parse_constant=no_constant)
    except RecursionError:
        raise BundleError(f"{where}: manifest is nested too deeply to be ours") from None
    except ValueError as exc:  # also UnicodeDecodeError
        raise BundleError(f"{where}: manifest is not valid JSON ({exc})") from None
    if not isinstance(manifest, dict):
        raise BundleError(f"{where}: manifest has no entries table")
    if codec.too_deep(manifest, MAX_DEPTH):
        raise BundleError(f"{where}: manifest is nested more than {MAX_DEPTH} levels deep")
    return manifest


def _decode(manifest: Mapping[str, Any], entries: Mapping[str, Entry], where: str) -> Manifest:
    """The typed manifest, every entry it names present."""
    try:
        spec = Manifest.from_json(manifest)
    except ManifestError as exc:
        raise BundleError(f"{where}: {exc}") from None
    for k in spec.kernels:
        for inst in k.instances:
            for v in inst.variants.values():
                if v.entry not in entries:
                    raise BundleError(
                        f"{where}: variant {v.id} of {k.name} names a missing entry {v.entry!r}"
                    )
    for a in spec.model.artifacts if spec.model is not None else ():
        for b in a.buckets:
            if b.impl == "compiled" and b.entry not in entries:
                raise BundleError(f"{where}: model bucket {list(b.bucket)} of {a.target} names "
                                  f"a missing entry {b.entry!r}")  # fmt: skip
    return spec


def decompress(stored: bytes, raw_size: int, what: str) -> bytes:
    """``stored`` (one zstd frame) decompressed to exactly ``raw_size`` bytes, allocating no
    more: the frame's declared size must agree, its window may not exceed ``raw_size``, and
    the output is read from a stream, never past ``raw_size``. A frame that declares no
    size (we always write it) is read in chunks, so that a false ``raw_size`` costs only
    what the frame really holds."""
    import zstandard

    try:
        declared = zstandard.get_frame_parameters(stored).content_size
        if declared not in (zstandard.CONTENTSIZE_UNKNOWN, raw_size):
            raise BundleError(f"{what}: its zstd frame declares {declared} bytes; the manifest "
                              f"says {raw_size}: the file was modified")  # fmt: skip
        dctx = zstandard.ZstdDecompressor(max_window_size=max(_MIN_WINDOW, raw_size))
        reader = dctx.stream_reader(stored, read_across_frames=False)
        chunk = raw_size if declared == raw_size else min(raw_size, _CHUNK)
        parts, got = [], 0
        while got < raw_size:
            part = reader.read(min(chunk, raw_size - got))
            if not part:
                break
            parts.append(part)
            got += len(part)
        extra = reader.read(1)
    except zstandard.ZstdError as exc:
        raise BundleError(f"{what} does not decompress ({exc})") from None
    if got != raw_size or extra:
        raise BundleError(f"{what} decompresses to the wrong content")
    return parts[0] if len(parts) == 1 else b"".join(parts)
