"""Push and pull against a real registry on loopback (the CNCF distribution registry).

Skipped with a reason where ``docker-registry`` is not installed; ``.ci/run`` installs it
and sets AOTC_TEST_REQUIRE_REGISTRY so that CI fails instead of skipping.
"""

from __future__ import annotations

import base64
import hashlib
import http.client
import json
import random
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

import loader
from aot import errors
from aot.cli import main
from aot.push import push
from loader import manifest as mf
from loader import oci
from loader.errors import BundleError, RegistryError
from loader.format import encode, write_atomic
from loader.registry import Client, RegistryConfig
from tests import handmade, ociserve
from tests.fakecuda import FakeLib

ROOT = Path(__file__).resolve().parents[1]
FAST = RegistryConfig(backoff=0.01, max_backoff=0.05)


@pytest.fixture(scope="module")
def reg(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ociserve.Registry]:
    with ociserve.registry(tmp_path_factory.mktemp("registry")) as r:
        yield r


@pytest.fixture(autouse=True)
def clean_env(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """No real credentials or caches: HOME, DOCKER_CONFIG and the cache point into tmp."""
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    monkeypatch.setenv("DOCKER_CONFIG", str(tmp_path / "docker"))
    monkeypatch.setenv("AOTC_BUNDLE_CACHE", str(tmp_path / "bundles"))
    for var in ("AOTC_REGISTRY_USER", "AOTC_REGISTRY_PASSWORD", "AOTC_REGISTRY_INSECURE"):
        monkeypatch.delenv(var, raising=False)


def big_bundle(path: Path, entry_bytes: int, seed: int = 0) -> Path:
    """A valid bundle whose payloads are incompressible, so the file is about 12 ×
    ``entry_bytes`` long."""
    m = handmade.manifest()
    rng = random.Random(seed)
    payloads = {name: rng.randbytes(entry_bytes) for name in handmade.payloads(m)}
    write_atomic(path, encode(m.to_json(), payloads))
    return path


def manifest_get(address: str, repo: str, ref: str) -> dict[str, object]:
    """What a service does to decide before downloading: one plain manifest GET."""
    conn = http.client.HTTPConnection(address, timeout=10)
    conn.request(
        "GET",
        f"/v2/{repo}/manifests/{ref}",
        headers={"Accept": "application/vnd.oci.image.manifest.v1+json"},
    )
    resp = conn.getresponse()
    body = resp.read()
    conn.close()
    assert resp.status == 200, body
    doc: dict[str, object] = json.loads(body)
    return doc


def test_push_pull_round_trip_and_annotations(
    reg: ociserve.Registry, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    bundle = handmade.write(tmp_path / "handmade-1.aotc")
    ref = f"oci://{reg.address}/aotc/handmade:1"
    assert main(["push", str(bundle), ref]) == 0
    out = capsys.readouterr().out
    digest = "sha256:" + hashlib.sha256(bundle.read_bytes()).hexdigest()
    assert f"pushed {ref}@sha256:" in out and digest.split(":")[1] in out

    doc = manifest_get(reg.address, "aotc/handmade", "1")
    assert doc["artifactType"] == "application/vnd.aotc.bundle.v1"
    assert doc["config"] == oci.empty_descriptor()
    (layer,) = doc["layers"]  # type: ignore[misc]
    assert layer["digest"] == digest and layer["size"] == bundle.stat().st_size
    assert layer["annotations"] == {"org.opencontainers.image.title": "handmade-1.aotc"}
    notes = doc["annotations"]
    assert notes == {
        "dev.aotc.format.version": "1",
        "dev.aotc.bundle.name": "handmade",
        "dev.aotc.bundle.version": "1",
        "dev.aotc.bundle.digest": digest,
        "dev.aotc.targets": "sm_90:sm_90,sm_80:sm_80",
        "dev.aotc.archs": "sm_80,sm_90",
        "dev.aotc.kernels": "scale",
        "dev.aotc.triton.version": "none",
        "dev.aotc.aotc.version": "test",
        "org.opencontainers.image.version": "1",
        "org.opencontainers.image.description": "aotc bundle handmade 1 for sm_80, sm_90",
    }

    # inspect oci:// reads the manifest only; pull writes the exact bytes, verified.
    assert main(["inspect", ref]) == 0
    assert "dev.aotc.archs" in capsys.readouterr().out
    out_path = tmp_path / "pulled" / "x.aotc"
    out_path.parent.mkdir()
    assert main(["pull", ref, "-o", str(out_path)]) == 0
    assert out_path.read_bytes() == bundle.read_bytes()
    assert main(["pull", ref, "-o", str(out_path.parent)]) == 0  # a folder: the title
    assert (out_path.parent / "handmade-1.aotc").read_bytes() == bundle.read_bytes()
    assert sorted(p.name for p in out_path.parent.iterdir()) == ["handmade-1.aotc", "x.aotc"]

    # Pushing again sends nothing new and yields the same manifest digest.
    capsys.readouterr()
    assert main(["push", str(bundle), ref]) == 0
    again = capsys.readouterr().out
    assert "already there" in again and out.split()[1] == again.split()[1]


def test_inspect_remote_reads_no_blob(reg: ociserve.Registry, tmp_path: Path) -> None:
    bundle = handmade.write(tmp_path / "h.aotc")
    push(bundle, f"oci://{reg.address}/aotc/peek:1", FAST)
    with ociserve.proxy(reg.address) as px:
        assert main(["inspect", f"oci://{px.address}/aotc/peek:1"]) == 0
        assert px.count("GET", "/manifests/") == 1 and px.count("GET", "/blobs/") == 0


def test_corrupted_blob_is_detected_and_nothing_is_written(tmp_path: Path) -> None:
    bundle = handmade.write(tmp_path / "h.aotc")
    with ociserve.registry(tmp_path / "reg") as r:
        ref = f"oci://{r.address}/aotc/tamper:1"
        result = push(bundle, ref, FAST)
        blob = r.blob_file(result.bundle_digest)
        data = bytearray(blob.read_bytes())
        data[-5] ^= 0xFF
        blob.write_bytes(bytes(data))
        out = tmp_path / "out"
        out.mkdir()
        r_ = subprocess.run(
            [sys.executable, "-m", "aot.cli", "pull", ref, "-o", str(out / "x.aotc")],
            capture_output=True,
            text=True,
            cwd=ROOT,
        )
        assert r_.returncode == 3, r_.stderr
        assert "download corrupted" in r_.stderr and result.bundle_digest in r_.stderr
        assert list(out.iterdir()) == []  # no file, no temporary left behind
        cache = tmp_path / "cache"
        with pytest.raises(BundleError, match="download corrupted"):
            oci.fetch(ref, cache_dir=cache, config=FAST)
        assert not (cache / "sha256" / result.bundle_digest[7:]).exists()
        assert [p.name for p in (cache / "sha256").iterdir()] == []


def test_chunked_upload_of_a_bundle_larger_than_the_chunk(
    reg: ociserve.Registry, tmp_path: Path
) -> None:
    bundle = big_bundle(tmp_path / "big.aotc", 40_000, seed=1)
    size = bundle.stat().st_size
    chunk = 64 * 1024
    with ociserve.proxy(reg.address) as px:
        result = push(bundle, f"oci://{px.address}/aotc/big:1", FAST, chunk_size=chunk)
        patches = px.count("PATCH", "/blobs/uploads/")
    assert patches == -(-size // chunk) and result.requests == patches + 1
    out = tmp_path / "back.aotc"
    assert main(["pull", f"oci://{reg.address}/aotc/big:1", "-o", str(out)]) == 0
    assert out.read_bytes() == bundle.read_bytes()


def test_interrupted_upload_is_retried(reg: ociserve.Registry, tmp_path: Path) -> None:
    bundle = big_bundle(tmp_path / "flaky.aotc", 20_000, seed=2)
    with ociserve.proxy(reg.address) as px:
        px.faults = [
            ociserve.Fault("POST", "/blobs/uploads/", "503"),  # refused before starting
            ociserve.Fault("PATCH", "/blobs/uploads/", "drop"),  # lost before the registry
            # the registry took this chunk but the answer never came back: resume from
            # the upload's status rather than sending the chunk twice
            ociserve.Fault("PATCH", "/blobs/uploads/", "drop-after-forward"),
            ociserve.Fault("PUT", "digest=", "503"),
            ociserve.Fault("PUT", "/manifests/", "429"),
            ociserve.Fault("HEAD", "/blobs/", "drop"),
        ]
        result = push(bundle, f"oci://{px.address}/aotc/flaky:1", FAST, chunk_size=32 * 1024)
        assert all(f.times == 0 for f in px.faults)
        calls = [(m, s) for m, p, s in px.log if "/blobs/uploads/" in p]
    # After the plain drop the upload's status (204) said where to resume; after the
    # drop-after-forward, distribution cancels the upload (its state token is stale: 404),
    # so the blob was uploaded again from a new POST.
    assert ("GET", 204) in calls and ("GET", 404) in calls, calls
    # POSTs: the config blob's (refused once, resent), the bundle's, the bundle's restart.
    posts = [s for m, s in calls if m == "POST"]
    assert posts == [503, 202, 202, 202], calls
    out = tmp_path / "back.aotc"
    assert main(["pull", f"oci://{reg.address}/aotc/flaky:1", "-o", str(out)]) == 0
    assert out.read_bytes() == bundle.read_bytes()
    assert result.reference.endswith(result.manifest_digest)


def test_pull_retries_a_dropped_download(reg: ociserve.Registry, tmp_path: Path) -> None:
    bundle = handmade.write(tmp_path / "h.aotc")
    push(bundle, f"oci://{reg.address}/aotc/dl:1", FAST)
    with ociserve.proxy(reg.address) as px:
        px.faults = [
            ociserve.Fault("GET", "/manifests/", "503", retry_after="0"),
            ociserve.Fault("GET", "/blobs/sha256", "drop"),
        ]
        path = oci.fetch(f"oci://{px.address}/aotc/dl:1", cache_dir=tmp_path / "c", config=FAST)
        assert path.read_bytes() == bundle.read_bytes()
        assert px.count("GET", "/blobs/sha256") == 2


def test_unreachable_registry_exit_4(tmp_path: Path) -> None:
    port = ociserve.free_port()
    bundle = handmade.write(tmp_path / "h.aotc")
    with pytest.raises(errors.RegistryError, match=r"unreachable.*gave up after 4 attempts") as e:
        push(bundle, f"oci://127.0.0.1:{port}/a/b:1", FAST)
    assert e.value.exit_code == 4


def test_basic_auth_right_and_wrong_credentials(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    auth = ociserve.htpasswd_auth(tmp_path / "reg", "alice", "s3cret")
    bundle = handmade.write(tmp_path / "h.aotc")
    with ociserve.registry(tmp_path / "reg", auth) as r:
        ref = f"oci://{r.address}/aotc/private:1"
        assert main(["push", str(bundle), ref]) == 5
        assert "requires authentication" in capsys.readouterr().err

        monkeypatch.setenv("AOTC_REGISTRY_USER", "alice")
        monkeypatch.setenv("AOTC_REGISTRY_PASSWORD", "wrong")
        assert main(["push", str(bundle), ref]) == 5
        err = capsys.readouterr().err
        assert "refused the credentials from AOTC_REGISTRY_USER" in err and "'alice'" in err

        monkeypatch.setenv("AOTC_REGISTRY_PASSWORD", "s3cret")
        assert main(["push", str(bundle), ref]) == 0
        assert main(["pull", ref, "-o", str(tmp_path / "a.aotc")]) == 0

        # The Docker config file, as `docker login` writes it.
        monkeypatch.delenv("AOTC_REGISTRY_USER")
        monkeypatch.delenv("AOTC_REGISTRY_PASSWORD")
        docker = tmp_path / "docker"
        docker.mkdir()
        token = base64.b64encode(b"alice:s3cret").decode()
        (docker / "config.json").write_text(json.dumps({"auths": {r.address: {"auth": token}}}))
        assert main(["pull", ref, "-o", str(tmp_path / "b.aotc")]) == 0
        assert (tmp_path / "b.aotc").read_bytes() == bundle.read_bytes()


def test_bearer_token_flow(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    ociserve.require_binary()
    bundle = handmade.write(tmp_path / "h.aotc")
    with (
        ociserve.token_server(tmp_path / "token", "bob", "tok3n") as ts,
        ociserve.registry(tmp_path / "reg", ts.auth_block()) as r,
    ):
        ref = f"oci://{r.address}/aotc/bearer:1"
        monkeypatch.setenv("AOTC_REGISTRY_USER", "bob")
        monkeypatch.setenv("AOTC_REGISTRY_PASSWORD", "nope")
        assert main(["push", str(bundle), ref]) == 5
        assert "token server" in capsys.readouterr().err
        monkeypatch.setenv("AOTC_REGISTRY_PASSWORD", "tok3n")
        assert main(["push", str(bundle), ref]) == 0
        assert main(["pull", ref, "-o", str(tmp_path / "a.aotc")]) == 0
        assert (tmp_path / "a.aotc").read_bytes() == bundle.read_bytes()
        assert "repository:aotc/bearer:pull,push" in ts.issued
        assert "repository:aotc/bearer:pull" in ts.issued


def test_loader_open_pulls_once_then_opens_from_cache(tmp_path: Path, fake: FakeLib) -> None:
    bundle = handmade.write(tmp_path / "h.aotc")
    cache = tmp_path / "cache"
    with ociserve.registry(tmp_path / "reg") as r:
        ref = f"oci://{r.address}/aotc/served:1"
        pushed = push(bundle, ref, FAST)
        with loader.open(ref, cache_dir=cache) as b:
            assert b.kernel_names == ["scale"] and b.target.name == "sm_90"
        cached = cache / "sha256" / pushed.bundle_digest.removeprefix("sha256:")
        assert cached.read_bytes() == bundle.read_bytes()
    # The registry is gone: the same reference, and the pinned digest, open from the cache.
    start = time.monotonic()
    with loader.open(ref, cache_dir=cache) as b:
        assert b.file.path == cached
    with loader.open(ref, cache_dir=cache, digest=pushed.bundle_digest) as b:
        assert b.file.path == cached
    pinned = ref.replace(":1", ":1@" + pushed.manifest_digest)
    with loader.open(pinned, cache_dir=cache) as b:
        assert b.file.path == cached
    assert time.monotonic() - start < 1.0  # no connection attempts, no backoff


def test_two_processes_pull_at_once(reg: ociserve.Registry, tmp_path: Path) -> None:
    bundle = big_bundle(tmp_path / "shared.aotc", 30_000, seed=3)
    push(bundle, f"oci://{reg.address}/aotc/shared:1", FAST)
    cache = tmp_path / "cache"
    code = (
        "import sys; from loader import oci\nprint(oci.fetch(sys.argv[1], cache_dir=sys.argv[2]))\n"
    )
    with ociserve.proxy(reg.address) as px:
        px.faults = [ociserve.Fault("GET", "/blobs/sha256", "slow", times=2, retry_after="1")]
        ref = f"oci://{px.address}/aotc/shared:1"
        procs = [
            subprocess.Popen(
                [sys.executable, "-c", code, ref, str(cache)],
                cwd=ROOT,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                text=True,
            )
            for _ in range(2)
        ]
        outs = [p.communicate(timeout=60) for p in procs]
        assert all(p.returncode == 0 for p in procs), outs
        assert px.count("GET", "/manifests/") == 2
        assert px.count("GET", "/blobs/sha256") == 1  # one downloaded; the other waited
    paths = {o[0].strip() for o in outs}
    assert len(paths) == 1 and Path(paths.pop()).read_bytes() == bundle.read_bytes()
    digest = "sha256:" + hashlib.sha256(bundle.read_bytes()).hexdigest()
    assert [p.name for p in (cache / "sha256").iterdir()] == [oci.Cache(cache).bundle(digest).name]


def test_pinned_digest_mismatch(reg: ociserve.Registry, tmp_path: Path) -> None:
    bundle = handmade.write(tmp_path / "h.aotc")
    ref = f"oci://{reg.address}/aotc/pinned:1"
    pushed = push(bundle, ref, FAST)
    cache = tmp_path / "cache"
    wrong = "sha256:" + "0" * 64
    with pytest.raises(BundleError, match="pinned digest mismatch") as e:
        loader.open(ref, cache_dir=cache, digest=wrong)
    assert wrong in str(e.value) and pushed.bundle_digest in str(e.value)
    assert not (cache / "sha256").exists()
    with pytest.raises(RegistryError, match="not found"):
        oci.fetch(f"oci://{reg.address}/aotc/pinned@{wrong}", cache_dir=cache, config=FAST)
    with pytest.raises(BundleError, match="pinned digest mismatch"):
        loader.open(bundle, digest=wrong)  # a local file can be pinned too


def test_partial_bundle_is_refused_by_push(reg: ociserve.Registry, tmp_path: Path) -> None:
    m = handmade.manifest()
    m = mf.Manifest(**{**m.__dict__, "build": {"shard": {"index": 1, "count": 2}}})
    path = tmp_path / "part.aotc"
    write_atomic(path, encode(m.to_json(), handmade.payloads(m)))
    assert main(["push", str(path), f"oci://{reg.address}/aotc/part:1"]) == 2


def test_retry_after_is_honoured(reg: ociserve.Registry) -> None:
    slept: list[float] = []
    cfg = RegistryConfig(backoff=0.25, max_backoff=30.0)
    with ociserve.proxy(reg.address) as px:
        px.faults = [
            ociserve.Fault("GET", "/v2/", "429", retry_after="3"),
            ociserve.Fault("GET", "/v2/", "503"),  # no Retry-After: exponential backoff
        ]
        px.faults[1].retry_after = ""
        client = Client(px.address, cfg, sleep=slept.append)
        assert client.request("GET", "/v2/", scope="registry:catalog:*").status == 200
    assert slept[0] == 3.0 and 0.5 <= slept[1] <= 0.55  # the second retry: 0.25 × 2 + jitter


def test_unwritable_cache_is_a_clear_error(reg: ociserve.Registry, tmp_path: Path) -> None:
    push(handmade.write(tmp_path / "h.aotc"), f"oci://{reg.address}/aotc/ro:1", FAST)
    cache = tmp_path / "not-a-folder"
    cache.write_text("")  # unwritable as a folder, even for root
    with pytest.raises(BundleError, match="cannot write the bundle cache"):
        oci.fetch(f"oci://{reg.address}/aotc/ro:1", cache_dir=cache, config=FAST)
