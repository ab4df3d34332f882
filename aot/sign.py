"""``aotc keygen``, ``aotc sign`` and ``aotc verify --key``: Ed25519 signatures of bundles.

Signing is the last step of a build, after ``aotc merge`` and before ``aotc push``: it
appends a signature trailer to the bundle (layout: loader/trailer.py) and changes nothing
else, so the signed file is the unsigned one plus about 150 bytes, and signing it again
with the same key gives the same bytes. The signature signs the bundle's header, which
binds the manifest and through it every entry; loader/signature.py checks it, in
``aotc verify --key`` and in a service that configures trusted keys.

An aotc signature travels inside the bundle file. OCI signatures (cosign, notation) sign a
registry manifest's digest and are checked by registry-side policy before a pull; they do
not follow a bundle copied as a file, and the loader does not see them. The two work
together: sign the bundle, push it, then sign the pushed manifest with cosign or notation.
"""

from __future__ import annotations

import os
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from loader import signature
from loader.errors import BundleError, TrustedKeyError
from loader.format import BundleFile, write_atomic
from loader.manifest import describe_shard
from loader.trailer import Signature, encode_trailer, signed_message

from .errors import BadBundle, UsageError

HINT = "make a key pair with `aotc keygen -o NAME`"


@dataclass(frozen=True)
class KeyPair:
    private: Path
    public: Path
    key_id: str


@dataclass(frozen=True)
class SignResult:
    output: Path
    key_id: str
    replaced: str | None  # the key id of a signature this one replaced


def _crypto(why: str) -> Any:
    try:
        return signature.crypto(why)
    except TrustedKeyError as exc:
        raise UsageError(str(exc)) from None


def keygen(name: Path) -> KeyPair:
    """A new Ed25519 key pair: ``NAME.key`` (private, PKCS#8 PEM, mode 0600) and ``NAME.pub``
    (public, SubjectPublicKeyInfo PEM). Existing files are never replaced."""
    ed25519 = _crypto("aotc keygen")
    from cryptography.hazmat.primitives import serialization as ser

    private, public = Path(f"{name}.key"), Path(f"{name}.pub")
    for path in (private, public):
        if path.exists() or path.is_symlink():
            raise UsageError(
                f"{path} exists; aotc keygen never replaces a key: choose another "
                "-o NAME or remove it"
            )
    key = ed25519.Ed25519PrivateKey.generate()
    pub = key.public_key()
    raw = pub.public_bytes(ser.Encoding.Raw, ser.PublicFormat.Raw)
    _publish(
        private,
        key.private_bytes(ser.Encoding.PEM, ser.PrivateFormat.PKCS8, ser.NoEncryption()),
        0o600,
    )
    try:
        _publish(
            public, pub.public_bytes(ser.Encoding.PEM, ser.PublicFormat.SubjectPublicKeyInfo), 0o644
        )
    except BaseException:
        private.unlink(missing_ok=True)
        raise
    return KeyPair(private, public, signature.key_id(raw))


def _publish(path: Path, data: bytes, mode: int) -> None:
    """Write ``path`` whole with ``mode`` from its first byte, failing if it exists: written
    to a temporary file (created 0600) beside it, then hard-linked into place."""
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    except OSError as exc:
        raise UsageError(f"{path}: cannot write it ({exc.strerror or exc})") from None
    try:
        with os.fdopen(fd, "wb") as f:
            os.fchmod(f.fileno(), mode)
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.link(tmp, path)
    except FileExistsError:
        raise UsageError(f"{path} exists; aotc keygen never replaces a key") from None
    except OSError as exc:
        raise UsageError(f"{path}: cannot write it ({exc.strerror or exc})") from None
    finally:
        Path(tmp).unlink(missing_ok=True)


def _private_key(path: Path) -> Any:
    ed25519 = _crypto("aotc sign")
    from cryptography.exceptions import UnsupportedAlgorithm
    from cryptography.hazmat.primitives import serialization

    try:
        pem = signature.read_key_file(path)
    except TrustedKeyError as exc:
        raise UsageError(str(exc)) from None
    if b"PUBLIC KEY-----" in pem:
        raise UsageError(
            f"{path}: is a public key; aotc sign needs the private key (the .key "
            "file `aotc keygen` wrote beside it)"
        )
    try:
        key = serialization.load_pem_private_key(pem, password=None)
    except TypeError:  # encrypted
        raise UsageError(
            f"{path}: the private key is encrypted; aotc sign reads an "
            "unencrypted PKCS#8 PEM key (keep it in a CI secret)"
        ) from None
    except (ValueError, UnsupportedAlgorithm):
        raise UsageError(f"{path}: not a PEM private key; {HINT}") from None
    if not isinstance(key, ed25519.Ed25519PrivateKey):
        kind = type(key).__name__.removeprefix("_").replace("PrivateKey", "")
        raise UsageError(f"{path}: a {kind} key, not Ed25519; aotc signs with Ed25519 keys: {HINT}")
    return key


def sign(bundle: Path, key_path: Path, output: Path | None = None) -> SignResult:
    """Sign ``bundle`` with the private key at ``key_path``; write it to ``output`` (default:
    the bundle itself, replaced atomically). A signature already there is replaced."""
    key = _private_key(key_path)
    from cryptography.hazmat.primitives import serialization as ser

    raw = key.public_key().public_bytes(ser.Encoding.Raw, ser.PublicFormat.Raw)
    kid = signature.key_id(raw)
    try:
        with BundleFile(bundle) as bf:
            bf.verify()  # never sign a damaged bundle
            if bf.spec.shard is not None:
                raise UsageError(
                    f"{bundle}: a partial bundle ({describe_shard(bf.spec.shard)}); "
                    "merge the parts with `aotc merge`, then sign the merged "
                    "bundle"
                )
            _check_covered(bf)
            old = bf.signature
            header, unsigned = bf.header, bf.unsigned_bytes()
    except BundleError as exc:
        raise BadBundle(str(exc)) from None
    sig = Signature(kid, key.sign(signed_message(header, kid)))
    target = output or bundle
    try:
        write_atomic(target, unsigned + encode_trailer(sig))
    except OSError as exc:
        raise UsageError(f"{target}: cannot write it ({exc.strerror or exc})") from None
    return SignResult(target, kid, old.key_id if old is not None else None)


def _check_covered(bf: BundleFile) -> None:
    """Refuse a payload region with bytes no entry's hash covers: a signed bundle must have
    no byte that could change without breaking its signature (ours have none)."""
    covered = 0
    for e in sorted(bf.entries.values(), key=lambda e: e.offset):
        if e.offset > covered:
            break
        covered = max(covered, e.offset + e.size)
    if covered != bf.payload_end - bf.payload_start:
        raise BadBundle(
            f"{bf.path}: its payload region has bytes no entry covers; aotc "
            "signs only bundles aotc wrote: rebuild it"
        )


def load_public_keys(paths: Sequence[Path]) -> tuple[signature.TrustedKey, ...]:
    """``--key`` files as trusted keys (exit 2 for a file that is not one)."""
    try:
        return signature.configured(list(paths), os.environ)
    except TrustedKeyError as exc:
        raise UsageError(str(exc)) from None


def check(bundle: Path, keys: Sequence[signature.TrustedKey]) -> str:
    """The signature line of ``aotc verify``: with ``keys``, the signature must be by one of
    them (BadBundle otherwise); without, what the bundle carries, unchecked."""
    try:
        with BundleFile(bundle) as bf:
            if keys:
                key = signature.require(bf, keys)
                return f"signature OK: signed by key {key.key_id} ({key.source})"
            sig = bf.signature
    except BundleError as exc:  # SignatureError included
        raise BadBundle(str(exc)) from None
    except TrustedKeyError as exc:
        raise UsageError(str(exc)) from None
    if sig is None:
        return "unsigned"
    return f"signed by key {sig.key_id} (not checked: give --key PUB to check it)"


def signed_line(bf: BundleFile) -> str:
    """``aotc inspect``'s line about the signature."""
    sig = bf.signature
    if sig is None:
        return "  signature: none (sign with `aotc sign`)"
    return f"  signature: {sig.alg}, key {sig.key_id} (check it with `aotc verify --key PUB`)"
