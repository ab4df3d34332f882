"""Signed bundles through a registry: push and pull carry the signature unchanged (it is part
of the layer blob), and ``loader.open("oci://…", trusted_keys=…)`` checks the cached file
every time it opens it. Skipped without ``docker-registry``, as tests/test_registry.py."""

from __future__ import annotations

import hashlib
from pathlib import Path

import pytest

import loader
from aot.cli import main
from aot.sign import KeyPair, keygen, sign
from loader import signature
from loader.format import BundleFile, canonical_json
from tests import craft, handmade, ociserve
from tests.fakecuda import FakeLib


@pytest.fixture(autouse=True)
def clean_env(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    monkeypatch.setenv("DOCKER_CONFIG", str(tmp_path / "docker"))
    monkeypatch.setenv("AOTC_BUNDLE_CACHE", str(tmp_path / "bundles"))
    monkeypatch.setenv("AOTC_NO_PROGRESS", "1")
    for var in ("AOTC_REGISTRY_USER", "AOTC_REGISTRY_PASSWORD", signature.ENV):
        monkeypatch.delenv(var, raising=False)


@pytest.fixture
def ci(tmp_path: Path) -> KeyPair:
    return keygen(tmp_path / "keys" / "ci")


def test_a_signed_bundle_pulled_back_still_verifies(
    fake: FakeLib, tmp_path: Path, ci: KeyPair, monkeypatch: pytest.MonkeyPatch
) -> None:
    other = keygen(tmp_path / "keys" / "other")
    bundle = handmade.write(tmp_path / "handmade-1.aotc")
    sign(bundle, ci.private)
    with ociserve.registry(tmp_path / "reg") as reg:
        ref = f"oci://{reg.address}/aotc/signed:1"
        assert main(["push", str(bundle), ref]) == 0
        out = tmp_path / "pulled" / "x.aotc"
        assert main(["pull", ref, "-o", str(out)]) == 0
        assert out.read_bytes() == bundle.read_bytes()  # the trailer travelled in the blob
        assert main(["verify", str(out), "--key", str(ci.public)]) == 0
        assert main(["verify", str(out), "--key", str(other.public)]) == 3

        b = loader.open(ref, trusted_keys=[ci.public])  # pulled into the cache, then checked
        assert b.signed_by == ci.key_id
        with pytest.raises(loader.SignatureError, match="not trusted"):
            loader.open(ref, trusted_keys=[other.public])
        monkeypatch.setenv("AOTC_TRUSTED_KEYS", str(ci.public))
        assert loader.open(ref).signed_by == ci.key_id

        unsigned = handmade.write(tmp_path / "handmade-2.aotc")
        ref2 = f"oci://{reg.address}/aotc/unsigned:2"
        assert main(["push", str(unsigned), ref2]) == 0
        with pytest.raises(loader.SignatureError, match="not signed"):
            loader.open(ref2)  # the environment's key applies to oci:// too


def test_a_cached_bundle_rewritten_in_place_is_refused_at_open(
    fake: FakeLib, tmp_path: Path, ci: KeyPair
) -> None:
    """The cache is trusted for its digest at download only; the signature is checked at
    every open, so a cache file rewritten afterwards (self-consistently) is refused."""
    bundle = handmade.write(tmp_path / "h.aotc")
    sign(bundle, ci.private)
    digest = hashlib.sha256(bundle.read_bytes()).hexdigest()
    with ociserve.registry(tmp_path / "reg") as reg:
        ref = f"oci://{reg.address}/aotc/cached:1"
        assert main(["push", str(bundle), ref]) == 0
        assert loader.open(ref, trusted_keys=[ci.public]).signed_by == ci.key_id
    cached = tmp_path / "bundles" / "sha256" / digest
    data = cached.read_bytes()
    with BundleFile(cached) as bf:
        end = bf.payload_end
    manifest, payload = craft.split(data[:end])
    manifest["bundle"]["version"] = "2"  # any change, every hash recomputed
    cached.write_bytes(craft.join(canonical_json(manifest), payload) + data[end:])
    assert loader.open(ref).manifest.version == "2"  # from the cache: registry is gone
    with pytest.raises(loader.SignatureError, match="does not match the bundle"):
        loader.open(ref, trusted_keys=[ci.public])


def test_a_bad_key_fails_before_anything_is_pulled(tmp_path: Path) -> None:
    bad = tmp_path / "bad.pub"
    bad.write_bytes(b"not a key")
    # port 9 on loopback: nothing listens there, so a pull would be a RegistryError
    with pytest.raises(loader.TrustedKeyError, match="not a PEM public key"):
        loader.open("oci://127.0.0.1:9/aotc/x:1", trusted_keys=[bad])
    with pytest.raises(loader.TrustedKeyError, match="not a PEM public key"):
        loader.load_model("oci://127.0.0.1:9/aotc/x:1", object(), trusted_keys=[bad])
