"""The registry client's pieces without a registry: references, challenges, Retry-After,
credentials, transport choice, artifact validation, and every AOTC_* variable declared."""

from __future__ import annotations

import base64
import json
import re
import stat
from pathlib import Path

import pytest

from aot.env import VARIABLES, from_environ
from loader import oci
from loader.credentials import find_credentials, parse_challenge
from loader.errors import BadReference, BundleError, RegistryAuthError, RegistryError
from loader.registry import Client, Reference, RegistryConfig
from loader.retry import retry_after

ROOT = Path(__file__).resolve().parents[1]
D = "sha256:" + "ab" * 32


@pytest.mark.parametrize(
    ("text", "registry", "repo", "tag", "digest"),
    [
        ("oci://ghcr.io/org/bundles:1.0", "ghcr.io", "org/bundles", "1.0", None),
        ("oci://localhost:5000/a:latest", "localhost:5000", "a", "latest", None),
        (f"oci://127.0.0.1:5000/a/b/c@{D}", "127.0.0.1:5000", "a/b/c", None, D),
        (f"oci://[::1]:5000/x:t@{D}", "[::1]:5000", "x", "t", D),
        (
            "oci://reg.example.com/a__b/c-d.e:V_1.2-rc",
            "reg.example.com",
            "a__b/c-d.e",
            "V_1.2-rc",
            None,
        ),
    ],
)
def test_reference_parse(
    text: str, registry: str, repo: str, tag: str | None, digest: str | None
) -> None:
    ref = Reference.parse(text)
    assert (ref.registry, ref.repository, ref.tag, ref.digest) == (registry, repo, tag, digest)
    assert str(ref) == text


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("ghcr.io/org/b:1", "not a registry reference"),
        ("oci://ghcr.io/org/b", "names no tag or digest"),
        ("oci://ghcr.io/Org/b:1", "repository names are lowercase"),
        ("oci://ghcr.io:1", "no repository"),
        ("oci://ghcr.io/b@sha256:xyz", "is not a digest"),
        ("oci://ghcr.io/b@md5:" + "a" * 32, "is not a digest"),
        ("oci://ghcr.io/b:bad tag", "not a valid reference"),
    ],
)
def test_reference_errors(text: str, message: str) -> None:
    with pytest.raises(BadReference, match=message):
        Reference.parse(text)


def test_transport_https_unless_loopback_or_insecure() -> None:
    cfg = RegistryConfig()
    assert Client("ghcr.io", cfg).base == "https://ghcr.io"
    assert Client("registry.local:5000", cfg).base == "https://registry.local:5000"
    assert Client("localhost:5000", cfg).base == "http://localhost:5000"
    assert Client("127.0.0.1:5000", cfg).base == "http://127.0.0.1:5000"
    assert Client("[::1]:5000", cfg).base == "http://[::1]:5000"
    assert Client("registry.local:5000", RegistryConfig(insecure=True)).scheme == "http"
    env = from_environ({"AOTC_REGISTRY_INSECURE": "1", "HOME": "/nonexistent"})
    assert env.registry.insecure and Client("r.local", env.registry).scheme == "http"


def test_parse_challenge() -> None:
    kind, params = parse_challenge(
        'Bearer realm="https://auth.example.com/token",service="reg",'
        'scope="repository:a/b:pull,push"'
    )
    assert kind == "bearer"
    assert params == {
        "realm": "https://auth.example.com/token",
        "service": "reg",
        "scope": "repository:a/b:pull,push",
    }
    assert parse_challenge('Basic realm="x"') == ("basic", {"realm": "x"})


def test_retry_after() -> None:
    assert retry_after("7") == 7.0
    assert retry_after(None) is None and retry_after("soon") is None
    assert retry_after("Wed, 21 Oct 2015 07:28:00 GMT", now=1445412470.0) == 10.0


def test_credentials_from_environment_first(tmp_path: Path) -> None:
    env = {"AOTC_REGISTRY_USER": "u", "AOTC_REGISTRY_PASSWORD": "p", "DOCKER_CONFIG": str(tmp_path)}
    creds = find_credentials("ghcr.io", RegistryConfig.from_environ(env))
    assert creds is not None and (creds.username, creds.password) == ("u", "p")
    assert creds.basic == "Basic " + base64.b64encode(b"u:p").decode()


def test_credentials_from_docker_config(tmp_path: Path) -> None:
    auth = base64.b64encode(b"alice:pw:with:colons").decode()
    (tmp_path / "config.json").write_text(
        json.dumps(
            {
                "auths": {
                    "https://ghcr.io": {"auth": auth},
                    "https://index.docker.io/v1/": {"username": "bob", "password": "x"},
                }
            }
        )
    )
    cfg = RegistryConfig.from_environ({"DOCKER_CONFIG": str(tmp_path)})
    creds = find_credentials("ghcr.io", cfg)
    assert creds is not None and (creds.username, creds.password) == ("alice", "pw:with:colons")
    assert str(tmp_path / "config.json") in creds.source
    hub = find_credentials("docker.io", cfg)
    assert hub is not None and hub.username == "bob"
    assert find_credentials("quay.io", cfg) is None
    # Default location: $HOME/.docker/config.json
    home = tmp_path / "home"
    (home / ".docker").mkdir(parents=True)
    (home / ".docker" / "config.json").write_text(json.dumps({"auths": {"r:1": {"auth": auth}}}))
    assert find_credentials("r:1", RegistryConfig.from_environ({"HOME": str(home)})) is not None


def test_credential_helper(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    helper = tmp_path / "bin" / "docker-credential-fake"
    helper.parent.mkdir()
    helper.write_text(
        "#!/bin/sh\nread server\n"
        'echo "{\\"ServerURL\\": \\"$server\\", '
        '\\"Username\\": \\"h\\", \\"Secret\\": \\"s-$server\\"}"\n'
    )
    helper.chmod(helper.stat().st_mode | stat.S_IEXEC)
    monkeypatch.setenv("PATH", f"{helper.parent}:/usr/bin:/bin")
    (tmp_path / "config.json").write_text(json.dumps({"credHelpers": {"ecr.example": "fake"}}))
    cfg = RegistryConfig.from_environ({"DOCKER_CONFIG": str(tmp_path)})
    creds = find_credentials("ecr.example", cfg)
    assert creds is not None and (creds.username, creds.password) == ("h", "s-ecr.example")
    (tmp_path / "config.json").write_text(json.dumps({"credsStore": "missing"}))
    with pytest.raises(RegistryAuthError, match=r"docker-credential-missing.*not installed"):
        find_credentials("x.example", cfg)


def test_bad_docker_config(tmp_path: Path) -> None:
    (tmp_path / "config.json").write_text("{not json")
    with pytest.raises(RegistryAuthError, match=r"config\.json: cannot read the Docker config"):
        find_credentials("r", RegistryConfig(docker_config=tmp_path))


def manifest(**changes: object) -> bytes:
    doc: dict[str, object] = {
        "schemaVersion": 2,
        "mediaType": oci.MANIFEST_TYPE,
        "artifactType": oci.ARTIFACT_TYPE,
        "config": oci.empty_descriptor(),
        "layers": [
            {
                "mediaType": oci.LAYER_TYPE,
                "digest": D,
                "size": 10,
                "annotations": {oci.TITLE: "x.aotc"},
            }
        ],
        "annotations": {oci.FORMAT: "1"},
    }
    doc.update(changes)
    return json.dumps(doc).encode()


def test_artifact_parse_and_refusals() -> None:
    art = oci.Artifact.parse(manifest(), "m", "where")
    assert (art.layer_digest, art.size, art.title) == (D, 10, "x.aotc")
    art.check_format("where")
    # ORAS before image-spec 1.1 put the artifact type in the config's media type.
    legacy = manifest(
        artifactType=None, config={**oci.empty_descriptor(), "mediaType": oci.ARTIFACT_TYPE}
    )
    assert oci.Artifact.parse(legacy, "m", "w").layer_digest == D
    cases = [
        (manifest(mediaType="application/vnd.oci.image.index.v1+json"), "not an aotc bundle"),
        (manifest(artifactType="application/vnd.other"), "artifact type 'application/vnd.other'"),
        (manifest(layers=[]), "expected one layer"),
        (b"[]", "not a JSON object"),
    ]
    for body, message in cases:
        with pytest.raises(RegistryError, match=message):
            oci.Artifact.parse(body, "m", "where")
    newer = oci.Artifact.parse(manifest(annotations={oci.FORMAT: "2"}), "m", "where")
    with pytest.raises(BundleError, match="bundle format version 2; this loader reads version 1"):
        newer.check_format("where")


def test_every_aotc_variable_is_declared() -> None:
    used: set[str] = set()
    for folder in ("aot", "loader"):
        for path in (ROOT / folder).glob("*.py"):
            used |= set(re.findall(r"\bAOTC_[A-Z]+(?:_[A-Z]+)*\b(?!_\*)", path.read_text()))
    assert used <= set(VARIABLES), sorted(used - set(VARIABLES))


def test_default_bundle_cache() -> None:
    assert oci.default_cache({"AOTC_BUNDLE_CACHE": "/c"}) == Path("/c")
    assert oci.default_cache({"XDG_CACHE_HOME": "/x"}) == Path("/x/aotc/bundles")
    assert oci.default_cache({"HOME": "/h"}) == Path("/h/.cache/aotc/bundles")
