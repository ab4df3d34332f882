"""Signed bundles: the keys a service trusts, and the check at open.

A bundle may carry an Ed25519 signature in a trailer (layout: loader/trailer.py). A service
that configures trusted public keys (``loader.open(path, trusted_keys=[...])``, or
``$AOTC_TRUSTED_KEYS``, a ``:``-separated list of PEM files) opens only bundles signed by
one of them: an unsigned bundle, one signed by another key, and one whose contents no
longer match its signature are refused with ``SignatureError``. Without keys nothing is
checked and nothing is imported. With keys, the check needs the ``cryptography`` package
(``pip install 'aotc[sign]'``), imported here and only then.

Why Ed25519 from pyca/cryptography: keys and signatures are small (32 and 64 bytes, one
PEM line each), signing is deterministic (signing again gives the same bytes), there are
no parameters to choose wrongly (curve, hash, padding), and the library is well kept and
widely deployed. Sigstore would tie verification to a transparency log and an identity
provider the service must reach or mirror; a key pair kept as a CI secret is all a
service needs to say "built by our CI".
"""

from __future__ import annotations

import hashlib
import os
import stat
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from .errors import SignatureError, TrustedKeyError
from .trailer import signed_message

if TYPE_CHECKING:
    from .format import BundleFile

ENV = "AOTC_TRUSTED_KEYS"
HINT = "pip install 'aotc[sign]'"
MAX_KEY_FILE = 64 * 1024  # a PEM key is a few hundred bytes


@dataclass(frozen=True)
class TrustedKey:
    """An Ed25519 public key a service trusts, and where it came from (for messages)."""

    key_id: str
    raw: bytes  # the 32-byte public key
    source: str


KeySource = bytes | str | os.PathLike[str] | TrustedKey


def key_id(raw: bytes) -> str:
    """A key's id: the first 16 hex digits of the sha256 of its raw 32 bytes."""
    return hashlib.sha256(raw).hexdigest()[:16]


_LOADER_WHY = "checking bundle signatures"


def crypto(why: str = _LOADER_WHY) -> Any:
    """pyca/cryptography's Ed25519 module, or a TrustedKeyError that says what to install."""
    try:
        from cryptography.hazmat.primitives.asymmetric import ed25519
    except ImportError:
        also = (
            f" (or unset {ENV} and pass no trusted_keys, to open bundles unchecked)"
            if why == _LOADER_WHY
            else ""
        )
        raise TrustedKeyError(f"{why} needs the cryptography package: {HINT}{also}") from None
    return ed25519


def read_key_file(path: str | os.PathLike[str]) -> bytes:
    """A key file's bytes: a regular file this process can read, of a key's size. (Opened
    without blocking, so that a FIFO named by mistake is refused, not waited on.)"""
    where = str(path)
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    except FileNotFoundError:
        raise TrustedKeyError(f"{where}: no such key file") from None
    except OSError as exc:
        raise TrustedKeyError(f"{where}: cannot read the key file ({exc.strerror})") from None
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise TrustedKeyError(f"{where}: not a regular file; give a PEM key file")
        data = b""
        while len(data) <= MAX_KEY_FILE and (part := os.read(fd, MAX_KEY_FILE + 1 - len(data))):
            data += part
    except OSError as exc:
        raise TrustedKeyError(f"{where}: cannot read the key file ({exc.strerror})") from None
    finally:
        os.close(fd)
    if len(data) > MAX_KEY_FILE:
        raise TrustedKeyError(f"{where}: {MAX_KEY_FILE} bytes or more: not a PEM key file")
    return data


def public_key(pem: bytes, source: str) -> TrustedKey:
    """The Ed25519 public key in ``pem`` (SubjectPublicKeyInfo, as ``aotc keygen`` writes)."""
    ed25519 = crypto()
    from cryptography.exceptions import UnsupportedAlgorithm
    from cryptography.hazmat.primitives import serialization

    if b"PRIVATE KEY-----" in pem:
        raise TrustedKeyError(
            f"{source}: is a private key; trust the public key (the .pub "
            "file `aotc keygen` wrote beside it)"
        )
    try:
        key = serialization.load_pem_public_key(pem)
    except (ValueError, TypeError, UnsupportedAlgorithm):
        raise TrustedKeyError(
            f"{source}: not a PEM public key (-----BEGIN PUBLIC KEY-----); "
            "make a key pair with `aotc keygen`"
        ) from None
    if not isinstance(key, ed25519.Ed25519PublicKey):
        kind = type(key).__name__.removeprefix("_").replace("PublicKey", "")
        raise TrustedKeyError(
            f"{source}: a {kind} key, not Ed25519; aotc signatures are Ed25519 "
            "(make a key pair with `aotc keygen`)"
        )
    raw = key.public_bytes(serialization.Encoding.Raw, serialization.PublicFormat.Raw)
    return TrustedKey(key_id(raw), raw, source)


def _load(item: KeySource, index: int) -> TrustedKey:
    if isinstance(item, TrustedKey):
        return item
    if isinstance(item, bytes):
        return public_key(item, f"trusted_keys[{index}]")
    if isinstance(item, str) and item.lstrip().startswith("-----BEGIN"):
        return public_key(item.encode(), f"trusted_keys[{index}]")
    if not isinstance(item, str | os.PathLike):
        raise TrustedKeyError(
            f"trusted_keys[{index}]: {type(item).__name__}; give PEM bytes "
            "or the path of a public key file"
        )
    return public_key(read_key_file(item), str(item))


def configured(
    keys: Sequence[KeySource] | None, environ: Mapping[str, str]
) -> tuple[TrustedKey, ...]:
    """The keys to require a signature by: ``keys`` if given, else ``$AOTC_TRUSTED_KEYS``;
    none (no check) when neither names any. Fails closed: an empty ``keys``, or a variable
    set to nothing but separators, is an error rather than "check nothing"."""
    if keys is None:
        text = environ.get(ENV, "")
        if not text.strip():
            return ()
        paths = [p for p in text.split(os.pathsep) if p.strip()]
        if not paths:
            raise TrustedKeyError(
                f"{ENV}={text!r} names no key file; give the public key "
                "files, ':'-separated, or unset it"
            )
        return tuple(public_key(read_key_file(Path(p.strip())), p.strip()) for p in paths)
    if isinstance(keys, str | bytes | os.PathLike | TrustedKey):
        keys = [keys]  # one key given bare: not a sequence of characters
    if not keys:
        raise TrustedKeyError(
            f"trusted_keys=[] names no key; give at least one, or pass None to use ${ENV}"
        )
    return tuple(_load(item, i) for i, item in enumerate(keys))


def require(file: BundleFile, keys: Sequence[TrustedKey]) -> TrustedKey:
    """The trusted key that signed ``file``; SignatureError if none did."""
    where = str(file.path)
    trusted = ", ".join(f"{k.key_id} ({k.source})" for k in keys)
    sig = file.signature
    if sig is None:
        raise SignatureError(
            f"{where}: the bundle is not signed; a signature by one of these keys is "
            f"required: {trusted}. Sign it with `aotc sign BUNDLE --key KEY.key` in CI"
        )
    candidates = [k for k in keys if k.key_id == sig.key_id]
    if not candidates:
        raise SignatureError(
            f"{where}: signed by key {sig.key_id}, which is not trusted here (trusted: {trusted})"
        )
    ed25519 = crypto()
    from cryptography.exceptions import InvalidSignature

    message = signed_message(file.header, sig.key_id, sig.alg)
    for key in candidates:
        try:
            ed25519.Ed25519PublicKey.from_public_bytes(key.raw).verify(sig.sig, message)
        except InvalidSignature:
            continue
        return key
    raise SignatureError(
        f"{where}: the signature by key {sig.key_id} does not match the "
        "bundle: it was modified after signing, or the signature was copied "
        "from another bundle"
    )


def check(file: BundleFile, keys: Sequence[KeySource] | None) -> TrustedKey | None:
    """The loader's trust check at open: with keys configured (``keys``, else the
    environment), the key that signed ``file``; None when none are configured."""
    trusted = configured(keys, os.environ)
    return require(file, trusted) if trusted else None
