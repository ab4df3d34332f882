"""Signed bundles (issue 16, item 6): the trailer's format, signing, and the check a service
asks for with trusted keys: in the archive layer, the loader (fake driver), load_model, the
environment variable and the CLI. Registry round trips: tests/test_signature_registry.py."""

from __future__ import annotations

import base64
import json
import os
import stat
import struct
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner, Result
from cryptography.hazmat.primitives import serialization as ser
from cryptography.hazmat.primitives.asymmetric import ec, ed25519, rsa

import loader
from aot.cli.commands import cli
from aot.errors import BadBundle, UsageError
from aot.inspect import inspect
from aot.merge import merge
from aot.sign import KeyPair, check, keygen, load_public_keys, sign
from loader import driver, signature
from loader.errors import BundleError, SignatureError
from loader.format import (
    SIG_MAGIC,
    BundleFile,
    Signature,
    encode,
    encode_trailer,
    signed_message,
)
from tests import craft, handmade
from tests.fakecuda import FakeLib

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(autouse=True)
def no_trusted_keys(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(signature.ENV, raising=False)


@pytest.fixture
def ci(tmp_path: Path) -> KeyPair:
    return keygen(tmp_path / "keys" / "ci")


@pytest.fixture
def other(tmp_path: Path) -> KeyPair:
    return keygen(tmp_path / "keys" / "other")


def signed(tmp_path: Path, key: KeyPair, name: str = "s.aotc") -> Path:
    path = handmade.write(tmp_path / name)
    sign(path, key.private)
    return path


def invoke(args: list[str], **env: str) -> Result:
    r = CliRunner().invoke(cli, args, env={"AOTC_NO_PROGRESS": "1", **env}, prog_name="aotc")
    assert r.exception is None or isinstance(r.exception, SystemExit), r.exc_info
    return r


# --- signing -------------------------------------------------------------------------------


def test_sign_appends_a_trailer_and_changes_nothing_else(tmp_path: Path, ci: KeyPair) -> None:
    path = handmade.write(tmp_path / "x.aotc")
    unsigned = path.read_bytes()
    result = sign(path, ci.private)
    data = path.read_bytes()
    assert result.key_id == ci.key_id and result.replaced is None
    assert data.startswith(unsigned) and data[len(unsigned) :].startswith(SIG_MAGIC)
    assert len(data) - len(unsigned) < 200
    # deterministic: signing again (the signed file, or the unsigned one) gives the same bytes
    assert sign(path, ci.private).replaced == ci.key_id and path.read_bytes() == data
    again = tmp_path / "again.aotc"
    again.write_bytes(unsigned)
    sign(again, ci.private)
    assert again.read_bytes() == data
    with BundleFile(path) as bf:
        assert bf.signature is not None and bf.signature.key_id == ci.key_id
        assert bf.unsigned_bytes() == unsigned
        assert signature.require(bf, load_public_keys([ci.public])).key_id == ci.key_id


def test_resigning_with_another_key_replaces_the_signature(
    tmp_path: Path, ci: KeyPair, other: KeyPair
) -> None:
    path = signed(tmp_path, ci)
    assert sign(path, other.private).replaced == ci.key_id
    with BundleFile(path) as bf:
        assert signature.require(bf, load_public_keys([other.public])).key_id == other.key_id
        with pytest.raises(SignatureError, match=f"signed by key {other.key_id}, which is not"):
            signature.require(bf, load_public_keys([ci.public]))


def test_sign_to_another_file_leaves_the_input(tmp_path: Path, ci: KeyPair) -> None:
    path = handmade.write(tmp_path / "x.aotc")
    before = path.read_bytes()
    out = tmp_path / "out" / "x.signed.aotc"
    assert sign(path, ci.private, out).output == out
    assert path.read_bytes() == before and out.read_bytes().startswith(before)
    with pytest.raises(UsageError, match="cannot write it"):
        sign(path, ci.private, path / "under-a-file.aotc")


def test_sign_refuses_damaged_partial_and_gapped_bundles(tmp_path: Path, ci: KeyPair) -> None:
    damaged = handmade.write(tmp_path / "d.aotc")
    data = bytearray(damaged.read_bytes())
    data[-1] ^= 1
    damaged.write_bytes(bytes(data))
    with pytest.raises(BadBundle, match="fails its checksum"):
        sign(damaged, ci.private)
    m = handmade.manifest()
    part = {**m.to_json(), "build": {"shard": {"index": 1, "count": 2, "instances": 2, "of": 4}}}
    partial = craft.write(tmp_path / "p.aotc", encode(part, handmade.payloads(m)))
    with pytest.raises(UsageError, match=r"partial bundle .* then sign the merged"):
        sign(partial, ci.private)
    # bytes between entries that no hash covers: could change under a signature
    manifest, payload = craft.split(handmade.write(tmp_path / "g.aotc").read_bytes())
    first = min(manifest["entries"].values(), key=lambda e: e["offset"])
    for e in manifest["entries"].values():
        if e is not first:
            e["offset"] += 7
    manifest["payload_size"] += 7
    cut = first["size"]
    gapped = payload[:cut] + b"GAPGAP!" + payload[cut:]
    path = craft.write(tmp_path / "g.aotc", craft.join(json.dumps(manifest).encode(), gapped))
    with BundleFile(path) as bf:
        bf.verify()  # a valid bundle...
    with pytest.raises(BadBundle, match="bytes no entry covers"):
        sign(path, ci.private)  # ...that aotc does not sign
    assert SIG_MAGIC not in path.read_bytes()


# --- the trailer, parsed strictly ----------------------------------------------------------


def _trailer(doc: object, raw: bytes | None = None) -> bytes:
    body = raw if raw is not None else json.dumps(doc, separators=(",", ":")).encode()
    return SIG_MAGIC + struct.pack("<I", len(body)) + body


def _good(key_id: str = "0123456789abcdef") -> dict[str, str]:
    return {"alg": "ed25519", "key_id": key_id, "sig": base64.b64encode(bytes(64)).decode()}


BAD_TRAILERS = [
    ("junk", b"x", "1 unexpected trailing bytes"),
    ("short magic", SIG_MAGIC[:5], "5 unexpected trailing bytes"),
    ("magic only", SIG_MAGIC, "8 unexpected trailing bytes"),
    ("other magic", b"AOTCSIG2" + _trailer(_good())[8:], "unexpected trailing bytes"),
    ("huge", SIG_MAGIC + bytes(5000), "5008 unexpected trailing bytes"),
    ("length too long", SIG_MAGIC + struct.pack("<I", 500) + b"{}", "declares 500 bytes, 2"),
    ("length too short", _trailer(_good())[:-3], "declares"),
    ("bytes after", _trailer(_good()) + b"\n", "declares"),
    ("two trailers", _trailer(_good()) * 2, "declares"),
    ("not json", _trailer(None, b"{alg: ed25519}"), "not JSON"),
    ("not utf8", _trailer(None, b'{"alg":"\xff"}'), "not JSON"),
    ("NaN", _trailer(None, b'{"alg":NaN}'), "not JSON"),
    ("deep", _trailer(None, b"[" * 500 + b"]" * 500), "expected the keys"),
    ("a list", _trailer([1, 2]), "expected the keys"),
    ("missing key", _trailer({"alg": "ed25519", "key_id": "0123456789abcdef"}), "expected"),
    ("extra key", _trailer({**_good(), "x": 1}), "expected the keys"),
    ("other alg", _trailer({**_good(), "alg": "rsa"}), "algorithm 'rsa'"),
    ("alg type", _trailer({**_good(), "alg": 5}), "algorithm 5"),
    ("key id case", _trailer(_good("0123456789ABCDEF")), "key_id"),
    ("key id short", _trailer(_good("0123")), "key_id"),
    ("key id type", _trailer({**_good(), "key_id": []}), "key_id"),
    ("sig short", _trailer({**_good(), "sig": base64.b64encode(bytes(63)).decode()}), "64-byte"),
    ("sig not base64", _trailer({**_good(), "sig": "!" * 88}), "64-byte"),
    ("sig type", _trailer({**_good(), "sig": 5}), "64-byte"),
    # the same 64 bytes in a second spelling: base64's unused bits set, or whitespace
    ("sig non-canonical", _trailer({**_good(), "sig": "A" * 85 + "B=="}), "64-byte"),
    ("sig spaces", _trailer({**_good(), "sig": " " + _good()["sig"]}), "64-byte"),
    ("unsorted keys", _trailer(None, json.dumps(dict(reversed(_good().items())),
                                                separators=(",", ":")).encode()), "canonical"),
    ("spaces", _trailer(None, json.dumps(_good()).encode()), "canonical"),
]  # fmt: skip


@pytest.mark.parametrize(
    ("trailer", "message"), [c[1:] for c in BAD_TRAILERS], ids=[c[0] for c in BAD_TRAILERS]
)
def test_bad_trailers_are_refused_by_every_reader(
    tmp_path: Path, trailer: bytes, message: str
) -> None:
    path = handmade.write(tmp_path / "x.aotc")
    path.write_bytes(path.read_bytes() + trailer)
    with pytest.raises(BundleError, match=message) as e:
        BundleFile(path)
    assert str(path) in str(e.value)
    r = invoke(["verify", str(path)])
    assert r.exit_code == 3 and "Traceback" not in r.output


def test_a_well_formed_trailer_is_opened_by_readers_that_do_not_check(tmp_path: Path) -> None:
    path = handmade.write(tmp_path / "x.aotc")
    path.write_bytes(path.read_bytes() + _trailer(_good()))
    with BundleFile(path) as bf:
        assert bf.signature == Signature("0123456789abcdef", bytes(64))
        bf.verify()
    assert "key 0123456789abcdef" in inspect(path)


def test_truncating_a_signed_bundle_is_refused(tmp_path: Path, ci: KeyPair) -> None:
    path = signed(tmp_path, ci)
    data = path.read_bytes()
    with BundleFile(path) as bf:
        end = bf.payload_end
    for cut in range(end + 1, len(data)):
        path.write_bytes(data[:cut])
        with pytest.raises(BundleError, match=r"unexpected trailing bytes|declares"):
            BundleFile(path)
    path.write_bytes(data[:end])  # the trailer gone entirely: an unsigned bundle
    with BundleFile(path) as bf:
        assert bf.signature is None
        with pytest.raises(SignatureError, match="not signed"):
            signature.require(bf, load_public_keys([ci.public]))


# --- what a signature does and does not accept ---------------------------------------------


def _rewrite(path: Path) -> None:
    """An attacker's rewrite, self-consistent: a cubin replaced, its entry's hashes, every
    offset and the header's manifest sha256 recomputed; the signature trailer kept."""
    data = path.read_bytes()
    with BundleFile(path) as bf:
        trailer = data[bf.payload_end :]
        end = bf.payload_end
    manifest, _ = craft.split(data[:end])
    blobs = craft.stored_blobs(data[:end])
    import zstandard

    name = "cubin/sm_90-fp16-0-g"
    evil = handmade.payloads(handmade.manifest())["cubin/sm_90-fp16-1-g"]
    blobs[name] = zstandard.ZstdCompressor(level=19).compress(evil)
    from loader.format import sha256

    rebuilt = craft.rebuild(manifest, blobs, {name: (len(evil), sha256(evil))})
    path.write_bytes(rebuilt + trailer)


def test_a_self_consistent_rewrite_is_accepted_without_keys_and_refused_with_them(
    fake: FakeLib, tmp_path: Path, ci: KeyPair
) -> None:
    path = signed(tmp_path, ci)
    _rewrite(path)
    with BundleFile(path) as bf:
        bf.verify()  # every hash agrees: nothing but the signature can tell
    assert loader.open(path).kernel_names == ["scale"]
    with pytest.raises(loader.SignatureError, match="does not match the bundle") as e:
        loader.open(path, trusted_keys=[ci.public])
    assert str(path) in str(e.value) and isinstance(e.value, loader.BundleError)
    r = invoke(["verify", str(path), "--key", str(ci.public)])
    assert r.exit_code == 3 and "does not match the bundle" in r.stderr
    # the same rewrite without the trailer: unsigned, also refused
    with BundleFile(path) as bf:
        path.write_bytes(bf.unsigned_bytes())
    with pytest.raises(loader.SignatureError, match="not signed"):
        loader.open(path, trusted_keys=[ci.public])


def test_a_signature_spliced_from_another_bundle_is_refused(tmp_path: Path, ci: KeyPair) -> None:
    a = signed(tmp_path, ci, "a.aotc")
    b = handmade.write(tmp_path / "b.aotc", targets=("sm_90",))
    sign(b, ci.private)
    with BundleFile(a) as fa, BundleFile(b) as fb:
        spliced = fb.unsigned_bytes() + a.read_bytes()[fa.payload_end :]
    b.write_bytes(spliced)
    with BundleFile(b) as bf:
        bf.verify()
        with pytest.raises(SignatureError, match=f"signature by key {ci.key_id} does not match"):
            signature.require(bf, load_public_keys([ci.public]))


def test_a_signature_by_another_key_with_a_forged_key_id_is_refused(
    tmp_path: Path, ci: KeyPair, other: KeyPair
) -> None:
    """The key id is a hint, not the proof: a trailer naming ci's id, signed by another key."""
    path = handmade.write(tmp_path / "x.aotc")
    pem = other.private.read_bytes()
    key = ser.load_pem_private_key(pem, password=None)
    assert isinstance(key, ed25519.Ed25519PrivateKey)
    with BundleFile(path) as bf:
        forged = Signature(ci.key_id, key.sign(signed_message(bf.header, ci.key_id)))
    path.write_bytes(path.read_bytes() + encode_trailer(forged))
    with BundleFile(path) as bf, pytest.raises(SignatureError, match="does not match"):
        signature.require(bf, load_public_keys([ci.public]))


# --- the loader: trusted_keys, the environment, the optional dependency ---------------------


def test_loader_opens_only_bundles_signed_by_a_trusted_key(
    fake: FakeLib, tmp_path: Path, ci: KeyPair, other: KeyPair
) -> None:
    good = signed(tmp_path, ci)
    pem = ci.public.read_bytes()
    for keys in (
        [ci.public],
        [str(ci.public)],
        [pem],
        [pem.decode()],
        ci.public,
        [other.public, pem],
    ):
        b = loader.open(good, trusted_keys=keys)  # type: ignore[arg-type]
        assert b.signed_by == ci.key_id
        b["scale"]  # launches as any bundle
    assert loader.open(good).signed_by is None  # no keys: not checked
    with pytest.raises(loader.SignatureError, match=f"signed by key {ci.key_id}, which is not"):
        loader.open(good, trusted_keys=[other.public])
    unsigned = handmade.write(tmp_path / "u.aotc")
    with pytest.raises(loader.SignatureError, match=r"not signed.*aotc sign") as e:
        loader.open(unsigned, trusted_keys=[ci.public])
    assert str(unsigned) in str(e.value) and ci.key_id in str(e.value)
    assert loader.Bundle(good, trusted_keys=[ci.public]).signed_by == ci.key_id
    with pytest.raises(loader.SignatureError):
        loader.Bundle(unsigned, trusted_keys=[ci.public])
    with pytest.raises(loader.TrustedKeyError, match=r"trusted_keys=\[\] names no key"):
        loader.open(good, trusted_keys=[])  # fails closed, never "check nothing"


def test_a_refused_bundle_never_reaches_the_driver(tmp_path: Path, ci: KeyPair) -> None:
    driver.install(None)  # no driver at all: a check after it would fail differently
    with pytest.raises(loader.SignatureError):
        loader.open(handmade.write(tmp_path / "u.aotc"), trusted_keys=[ci.public])


def test_trusted_keys_from_the_environment(
    fake: FakeLib, tmp_path: Path, ci: KeyPair, other: KeyPair, monkeypatch: pytest.MonkeyPatch
) -> None:
    good = signed(tmp_path, ci)
    unsigned = handmade.write(tmp_path / "u.aotc")
    monkeypatch.setenv("AOTC_TRUSTED_KEYS", f"{other.public}:{ci.public}")
    assert loader.open(good).signed_by == ci.key_id
    with pytest.raises(loader.SignatureError, match="not signed"):
        loader.open(unsigned)
    # an explicit list replaces the environment's
    with pytest.raises(loader.SignatureError, match="not trusted"):
        loader.open(good, trusted_keys=[other.public])
    monkeypatch.setenv("AOTC_TRUSTED_KEYS", f"{tmp_path / 'missing.pub'}")
    with pytest.raises(loader.TrustedKeyError, match=r"missing\.pub: no such key file"):
        loader.open(good)
    monkeypatch.setenv("AOTC_TRUSTED_KEYS", "::")
    with pytest.raises(loader.TrustedKeyError, match="names no key file"):
        loader.open(good)
    monkeypatch.setenv("AOTC_TRUSTED_KEYS", "")  # empty: as if unset
    assert loader.open(unsigned).signed_by is None


def _no_cryptography(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in [m for m in sys.modules if m.split(".")[0] == "cryptography"]:
        monkeypatch.setitem(sys.modules, name, None)
    monkeypatch.setitem(sys.modules, "cryptography", None)


def test_without_cryptography_keys_say_what_to_install(
    fake: FakeLib, tmp_path: Path, ci: KeyPair, monkeypatch: pytest.MonkeyPatch
) -> None:
    good = signed(tmp_path, ci)
    _no_cryptography(monkeypatch)
    assert loader.open(good).signed_by is None  # no keys: the package is not needed
    with pytest.raises(loader.TrustedKeyError, match=r"pip install 'aotc\[sign\]'"):
        loader.open(good, trusted_keys=[ci.public])
    monkeypatch.setenv("AOTC_TRUSTED_KEYS", str(ci.public))
    with pytest.raises(loader.TrustedKeyError, match=r"pip install 'aotc\[sign\]'"):
        loader.open(good)


def test_import_loader_and_open_without_keys_import_no_cryptography(
    tmp_path: Path, ci: KeyPair
) -> None:
    path = signed(tmp_path, ci)
    code = (
        "import sys, loader, loader.signature\n"
        "from loader.format import BundleFile\n"
        f"bf = BundleFile({str(path)!r}); bf.verify(); assert bf.signature is not None\n"
        "from loader import signature\n"
        "assert signature.check(bf, None) is None\n"
        "bad = sorted(m for m in sys.modules\n"
        "             if m.split('.')[0] in ('aot', 'triton', 'torch', 'cryptography'))\n"
        "print(','.join(bad))"
    )
    env = {k: v for k, v in os.environ.items() if k != "AOTC_TRUSTED_KEYS"}
    out = subprocess.run(
        [sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, env=env
    )
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == ""


def test_load_model_honours_the_keys(tmp_path: Path, ci: KeyPair, other: KeyPair) -> None:
    """Checked before anything else (the handmade bundle has no [model], which load_model
    says only once the signature has passed); torch is not reached either way."""
    unsigned = handmade.write(tmp_path / "u.aotc")
    good = signed(tmp_path, ci)
    with pytest.raises(loader.SignatureError, match="not signed"):
        loader.load_model(unsigned, object(), trusted_keys=[ci.public])
    with pytest.raises(loader.SignatureError, match="not trusted"):
        loader.load_model(good, object(), trusted_keys=[other.public])
    with pytest.raises(loader.BundleError, match="has no \\[model\\]"):
        loader.load_model(good, object(), trusted_keys=[ci.public])
    with BundleFile(unsigned) as bf, pytest.raises(loader.SignatureError):
        loader.load_model(bf, object(), trusted_keys=[ci.public])  # an open file is checked too


# --- key files -----------------------------------------------------------------------------


def _pem_public(key: object) -> bytes:
    return key.public_key().public_bytes(  # type: ignore[attr-defined,no-any-return]
        ser.Encoding.PEM, ser.PublicFormat.SubjectPublicKeyInfo
    )


def _pem_private(key: object, password: bytes | None = None) -> bytes:
    enc = ser.BestAvailableEncryption(password) if password else ser.NoEncryption()
    return key.private_bytes(ser.Encoding.PEM, ser.PrivateFormat.PKCS8, enc)  # type: ignore[attr-defined,no-any-return]


BAD_PUBLIC = [
    ("empty", b"", "not a PEM public key"),
    ("junk", b"hello", "not a PEM public key"),
    ("bad base64", b"-----BEGIN PUBLIC KEY-----\nAAAA\n-----END PUBLIC KEY-----\n", "not a PEM"),
    ("ssh", b"ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIA user@host\n", "not a PEM public key"),
    ("private", "ed-private", "is a private key"),
    ("rsa", "rsa", "a RSA key, not Ed25519"),
    ("ec", "ec", "a EC key, not Ed25519"),
    ("huge", b"-" * 70000, "not a PEM key file"),
]


def _key_bytes(what: bytes | str) -> bytes:
    if isinstance(what, bytes):
        return what
    if what == "ed-private":
        return _pem_private(ed25519.Ed25519PrivateKey.generate())
    if what == "rsa":
        return _pem_public(rsa.generate_private_key(public_exponent=65537, key_size=2048))
    return _pem_public(ec.generate_private_key(ec.SECP256R1()))


@pytest.mark.parametrize(
    ("content", "message"), [c[1:] for c in BAD_PUBLIC], ids=[c[0] for c in BAD_PUBLIC]
)
def test_trusted_key_files_that_are_not_keys(
    fake: FakeLib, tmp_path: Path, content: bytes | str, message: str
) -> None:
    key = tmp_path / "k.pub"
    key.write_bytes(_key_bytes(content))
    bundle = handmade.write(tmp_path / "x.aotc")
    with pytest.raises(loader.TrustedKeyError, match=message) as e:
        loader.open(bundle, trusted_keys=[key])
    assert str(key) in str(e.value)
    r = invoke(["verify", str(bundle), "--key", str(key)])
    assert r.exit_code == 2 and message in r.stderr and "Traceback" not in r.output


def test_trusted_keys_that_are_not_files(fake: FakeLib, tmp_path: Path) -> None:
    bundle = handmade.write(tmp_path / "x.aotc")
    cases = [
        (tmp_path / "none.pub", "no such key file"),
        (tmp_path, "not a regular file"),
        (Path("/dev/zero"), "not a regular file"),
        (tmp_path / "fifo", "not a regular file"),
    ]
    os.mkfifo(tmp_path / "fifo")  # would block a plain open()
    for key, message in cases:
        with pytest.raises(loader.TrustedKeyError, match=message):
            loader.open(bundle, trusted_keys=[key])
        assert invoke(["verify", str(bundle), "--key", str(key)]).exit_code == 2
    with pytest.raises(loader.TrustedKeyError, match=r"trusted_keys\[0\]: int"):
        loader.open(bundle, trusted_keys=[5])  # type: ignore[list-item]


BAD_PRIVATE = [
    ("public", "public", "is a public key; aotc sign needs the private key"),
    ("junk", b"junk", "not a PEM private key"),
    ("encrypted", "encrypted", "the private key is encrypted"),
    ("rsa", "rsa", "a RSA key, not Ed25519; aotc signs with Ed25519"),
]


@pytest.mark.parametrize(
    ("content", "message"), [c[1:] for c in BAD_PRIVATE], ids=[c[0] for c in BAD_PRIVATE]
)
def test_signing_keys_that_are_not_ed25519_private_keys(
    tmp_path: Path, ci: KeyPair, content: bytes | str, message: str
) -> None:
    key = tmp_path / "k.key"
    if content == "public":
        key.write_bytes(ci.public.read_bytes())
    elif content == "encrypted":
        key.write_bytes(_pem_private(ed25519.Ed25519PrivateKey.generate(), b"pw"))
    elif content == "rsa":
        key.write_bytes(_pem_private(rsa.generate_private_key(public_exponent=65537,
                                                              key_size=2048)))  # fmt: skip
    else:
        assert isinstance(content, bytes)
        key.write_bytes(content)
    bundle = handmade.write(tmp_path / "x.aotc")
    before = bundle.read_bytes()
    r = invoke(["sign", str(bundle), "--key", str(key)])
    assert r.exit_code == 2 and message in r.stderr and "Traceback" not in r.output
    assert bundle.read_bytes() == before


def test_keygen_writes_a_private_key_only_its_owner_reads(tmp_path: Path) -> None:
    r = invoke(["keygen", "-o", str(tmp_path / "ci")])
    assert r.exit_code == 0, r.output
    key, pub = tmp_path / "ci.key", tmp_path / "ci.pub"
    assert stat.S_IMODE(key.stat().st_mode) == 0o600
    assert key.read_bytes().startswith(b"-----BEGIN PRIVATE KEY-----")
    (trusted,) = load_public_keys([pub])
    assert f"key id {trusted.key_id}" in r.output
    before = key.read_bytes()
    r = invoke(["keygen", "-o", str(tmp_path / "ci")])
    assert r.exit_code == 2 and "never replaces a key" in r.stderr
    assert key.read_bytes() == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["ci.key", "ci.pub"]  # no temp left


# --- the CLI -------------------------------------------------------------------------------


def test_cli_sign_verify_inspect_merge(tmp_path: Path, ci: KeyPair, other: KeyPair) -> None:
    bundle = handmade.write(tmp_path / "x.aotc")
    r = invoke(["verify", str(bundle)])
    assert r.exit_code == 0 and r.output.endswith("\nunsigned\n")
    assert "signature: none" in invoke(["inspect", str(bundle)]).output
    r = invoke(["sign", str(bundle), "--key", str(ci.private)])
    assert r.exit_code == 0 and f"signed {bundle} with key {ci.key_id}" in r.output
    r = invoke(["verify", str(bundle), "--key", str(other.public), "--key", str(ci.public)])
    assert r.exit_code == 0 and f"signature OK: signed by key {ci.key_id} ({ci.public})" in r.output
    r = invoke(["verify", str(bundle)])
    assert r.exit_code == 0 and "(not checked: give --key PUB" in r.output
    assert f"signature: ed25519, key {ci.key_id}" in invoke(["inspect", str(bundle)]).output
    r = invoke(["verify", str(bundle), "--key", str(other.public)])
    assert r.exit_code == 3 and "which is not trusted" in r.stderr
    r = invoke(["verify", str(tmp_path / "none.aotc"), "--key", str(tmp_path / "none.pub")])
    assert r.exit_code == 2 and "no such key file" in r.stderr  # the key first
    r = invoke(["sign", str(tmp_path / "none.aotc"), "--key", str(ci.private)])
    assert r.exit_code == 3 and "no such bundle file" in r.stderr

    merged = tmp_path / "m.aotc"
    r = invoke(["merge", str(bundle), "-o", str(merged)])
    assert r.exit_code == 0 and "1 input was signed; the merged bundle is unsigned" in r.output
    with BundleFile(merged) as bf:
        assert bf.signature is None
    assert merge([merged], tmp_path / "m2.aotc").signed_inputs == ()


def test_verify_refuses_a_signature_with_a_flipped_bit(tmp_path: Path, ci: KeyPair) -> None:
    path = signed(tmp_path, ci)
    with BundleFile(path) as bf:
        assert bf.signature is not None
        sig = bytearray(bf.signature.sig)
        sig[10] ^= 1  # well-formed, wrong
        path.write_bytes(bf.unsigned_bytes() + encode_trailer(Signature(ci.key_id, bytes(sig))))
    r = invoke(["verify", str(path), "--key", str(ci.public)])
    assert r.exit_code == 3 and "does not match the bundle" in r.stderr
    assert r.output.startswith("OK ")  # the integrity line came first: the entries are fine
    with pytest.raises(BadBundle, match="does not match"):
        check(path, load_public_keys([ci.public]))


def test_cli_without_cryptography_says_what_to_install(
    tmp_path: Path, ci: KeyPair, monkeypatch: pytest.MonkeyPatch
) -> None:
    bundle = handmade.write(tmp_path / "x.aotc")
    _no_cryptography(monkeypatch)
    for args in (
        ["keygen", "-o", str(tmp_path / "k")],
        ["sign", str(bundle), "--key", str(ci.private)],
        ["verify", str(bundle), "--key", str(ci.public)],
    ):
        r = invoke(args)
        assert r.exit_code == 2 and "pip install 'aotc[sign]'" in r.stderr, args
    assert invoke(["verify", str(bundle)]).exit_code == 0  # no key: not needed
