"""A bundle's signature trailer (``aotc sign``): its bytes, written and parsed strictly.

Layout, after the payload region (loader/format.py has the whole file's)::

    magic   8 bytes  b"AOTCSIG1"
    length  u32 little-endian, the JSON's length (at most MAX_TRAILER)
    JSON    canonical: {"alg": "ed25519", "key_id": 16 hex digits,
            "sig": base64 of the 64-byte signature}

The signature is a trailer so that a signed bundle stays one file that every reader opens
as before, and an unsigned bundle keeps today's bytes: a signature can be added after the
build (and after ``aotc merge``), by another job holding the key, without re-encoding
anything. It signs ``signed_message``: a domain string, the 52-byte header (magic,
version, manifest length and the manifest's sha256), the algorithm and the key id. The
manifest's sha256 binds the manifest, which binds every entry's offset, size and hashes,
so the signature covers everything the loader trusts; the trailer itself is not signed
but is parsed strictly (exact magic and length, canonical JSON of exactly these three
keys, canonical base64), so that a file has one signed form per key and any other
trailing bytes are refused. Ed25519 is deterministic: signing again with the same key
gives the same bytes. Parsing the trailer needs no cryptography; checking the signature
against trusted keys is loader/signature.py.
"""

from __future__ import annotations

import base64
import binascii
import json
import os
import re
import struct
from dataclasses import dataclass

from .codec import canonical_json, no_constant
from .errors import BundleError

SIG_MAGIC = b"AOTCSIG1"
_TRAILER_HEAD = struct.Struct("<8sI")
# Ours is about 130 bytes; a larger trailer is not a signature.
MAX_TRAILER = 1024
SIG_ALG = "ed25519"
_SIG_DOMAIN = b"aotc-bundle-signature-v1\x00"
_KEY_ID = re.compile(r"[0-9a-f]{16}")


@dataclass(frozen=True)
class Signature:
    """A bundle's signature trailer, parsed (not checked: see loader/signature.py)."""

    key_id: str  # the first 16 hex digits of the sha256 of the raw public key
    sig: bytes  # 64 bytes
    alg: str = SIG_ALG


def signed_message(header: bytes, key_id: str, alg: str = SIG_ALG) -> bytes:
    """What a signature signs: the domain string (so that no other use of the key can be
    replayed as a bundle signature), the bundle's header (which binds the manifest and,
    through it, every entry), the algorithm and the key id."""
    return b"".join([_SIG_DOMAIN, header, alg.encode(), b"\x00", key_id.encode()])


def encode_trailer(signature: Signature) -> bytes:
    body = canonical_json({"alg": signature.alg, "key_id": signature.key_id,
                           "sig": base64.b64encode(signature.sig).decode()})  # fmt: skip
    return _TRAILER_HEAD.pack(SIG_MAGIC, len(body)) + body


def parse_trailer(data: bytes, where: str) -> Signature:
    """The signature in ``data``, all the bytes after the payload region; anything but one
    well-formed trailer is refused."""
    if len(data) < _TRAILER_HEAD.size or not data.startswith(SIG_MAGIC):
        raise BundleError(f"{where}: {len(data)} unexpected trailing bytes (not a signature)")
    _, length = _TRAILER_HEAD.unpack_from(data)
    body = data[_TRAILER_HEAD.size :]
    if length != len(body):
        raise BundleError(f"{where}: signature trailer declares {length} bytes, {len(body)} "
                          "follow: the file was modified")  # fmt: skip
    bad = f"{where}: signature trailer is malformed"
    try:
        doc = json.loads(body.decode("ascii"), parse_constant=no_constant)
    except (ValueError, RecursionError):  # also UnicodeDecodeError
        raise BundleError(f"{bad} (not JSON)") from None
    if not isinstance(doc, dict) or sorted(doc) != ["alg", "key_id", "sig"]:
        raise BundleError(f"{bad}: expected the keys alg, key_id and sig")
    alg, key_id, text = doc["alg"], doc["key_id"], doc["sig"]
    if alg != SIG_ALG:
        raise BundleError(f"{bad}: algorithm {alg!r}; this aotc checks {SIG_ALG!r} signatures")
    if not isinstance(key_id, str) or not _KEY_ID.fullmatch(key_id):
        raise BundleError(f"{bad}: key_id is not 16 lowercase hex digits")
    try:
        sig = base64.b64decode(text, validate=True) if isinstance(text, str) else b""
    except binascii.Error:
        sig = b""
    if len(sig) != 64 or base64.b64encode(sig).decode() != text:
        raise BundleError(f"{bad}: sig is not the base64 of a 64-byte {SIG_ALG} signature")
    signature = Signature(key_id, sig, alg)
    if encode_trailer(signature) != data:
        raise BundleError(f"{bad}: its JSON is not in canonical form")
    return signature


def read_trailer(fd: int, start: int, end: int, where: str) -> Signature | None:
    """The signature in the bytes ``start:end`` of the open file ``fd`` (everything after
    the payload region), None if there are none."""
    if end == start:
        return None
    if end - start > _TRAILER_HEAD.size + MAX_TRAILER:
        raise BundleError(f"{where}: {end - start} unexpected trailing bytes (not a signature)")
    return parse_trailer(os.pread(fd, end - start, start), where)
