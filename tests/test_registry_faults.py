"""Network faults: bodies cut short, connections reset, racing pushes, stalled servers,
plus the progress line and the one retry helper. Each succeeds after a retry or ends in
a registry error (exit 4) within about timeout × attempts, never as "corrupted" (exit 3).

Against the real registry through ``ociserve.proxy`` (which cuts bodies short, resets
connections and refuses manifests), and ``tests/ociscripted.py`` for stalls.
"""

from __future__ import annotations

import hashlib
import io
import random
import socket
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path

import pytest

from aot import errors
from aot.env import VARIABLES, from_environ
from aot.pull import pull
from aot.push import push
from loader import oci
from loader.errors import RegistryError
from loader.format import encode, write_atomic
from loader.registry import Client, RegistryConfig
from tests import handmade, ociserve
from tests.ociscripted import Reply, artifact, scripted, serving

FAST = RegistryConfig(backoff=0.01, max_backoff=0.05, connect_timeout=5, read_timeout=5)


@pytest.fixture(scope="module")
def reg(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ociserve.Registry]:
    with ociserve.registry(tmp_path_factory.mktemp("registry")) as r:
        yield r


@pytest.fixture(autouse=True)
def clean_env(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    monkeypatch.setenv("DOCKER_CONFIG", str(tmp_path / "docker"))
    monkeypatch.setenv("AOTC_BUNDLE_CACHE", str(tmp_path / "bundles"))
    for var in ("AOTC_REGISTRY_USER", "AOTC_REGISTRY_PASSWORD", "AOTC_REGISTRY_INSECURE"):
        monkeypatch.delenv(var, raising=False)


def big_bundle(path: Path, entry_bytes: int, seed: int = 0) -> Path:
    """A valid bundle of incompressible payloads, about 12 × ``entry_bytes`` long."""
    m = handmade.manifest()
    rng = random.Random(seed)
    payloads = {name: rng.randbytes(entry_bytes) for name in handmade.payloads(m)}
    write_atomic(path, encode(m.to_json(), payloads))
    return path


def sha(data: bytes) -> str:
    return "sha256:" + hashlib.sha256(data).hexdigest()


# -- short reads and resets (the real registry behind the fault proxy) ----------------------


def pushed(reg: ociserve.Registry, tmp_path: Path, repo: str) -> tuple[Path, str]:
    bundle = big_bundle(tmp_path / "b.aotc", 20_000, seed=len(repo))
    push(bundle, f"oci://{reg.address}/aotc/{repo}:1", FAST)
    return bundle, f"aotc/{repo}:1"


def test_short_read_resumes_with_a_range_request(reg: ociserve.Registry, tmp_path: Path) -> None:
    bundle, repo = pushed(reg, tmp_path, "short")
    with ociserve.proxy(reg.address) as px:
        px.faults = [ociserve.Fault("GET", "/blobs/sha256", "short")]
        path = oci.fetch(f"oci://{px.address}/{repo}", cache_dir=tmp_path / "c", config=FAST)
        blob_gets = [s for m, p, s in px.log if m == "GET" and "/blobs/sha256" in p]
    assert path.read_bytes() == bundle.read_bytes()
    assert blob_gets == [200, 206]  # the second asked only for the missing half


def test_reset_mid_body_resumes(reg: ociserve.Registry, tmp_path: Path) -> None:
    bundle, repo = pushed(reg, tmp_path, "reset")
    with ociserve.proxy(reg.address) as px:
        px.faults = [ociserve.Fault("GET", "/blobs/sha256", "reset")]
        out = tmp_path / "out.aotc"
        pull(f"oci://{px.address}/{repo}", out, FAST, tmp_path)
        # An RST discards what the client had not read yet: a resume, or a fresh start.
        assert [s for m, p, s in px.log if "/blobs/sha256" in p] in ([200, 206], [200, 200])
    assert out.read_bytes() == bundle.read_bytes()


def test_short_read_starts_over_where_range_is_ignored(
    reg: ociserve.Registry, tmp_path: Path
) -> None:
    bundle, repo = pushed(reg, tmp_path, "norange")
    with ociserve.proxy(reg.address) as px:
        px.strip_range = True
        px.faults = [ociserve.Fault("GET", "/blobs/sha256", "short")]
        out = tmp_path / "out.aotc"
        pull(f"oci://{px.address}/{repo}", out, FAST, tmp_path)
        assert [s for m, p, s in px.log if "/blobs/sha256" in p] == [200, 200]
    assert out.read_bytes() == bundle.read_bytes()


def test_short_reads_past_the_retries_are_a_registry_error_not_corruption(
    reg: ociserve.Registry, tmp_path: Path
) -> None:
    _bundle, repo = pushed(reg, tmp_path, "cut")
    out = tmp_path / "out"
    out.mkdir()
    with ociserve.proxy(reg.address) as px:
        px.faults = [ociserve.Fault("GET", "/blobs/sha256", "short", times=10)]
        with pytest.raises(errors.RegistryError) as e:
            pull(f"oci://{px.address}/{repo}", out / "x.aotc", FAST, tmp_path)
        assert px.count("GET", "/blobs/sha256") == FAST.attempts
        with pytest.raises(RegistryError, match="stopped after"):
            oci.fetch(f"oci://{px.address}/{repo}", cache_dir=tmp_path / "c", config=FAST)
    assert e.value.exit_code == 4 and not isinstance(e.value, errors.BadBundle)
    assert "stopped after" in str(e.value) and "gave up after 4 attempts" in str(e.value)
    assert list(out.iterdir()) == []


def test_a_manifest_cut_short_is_retried(reg: ociserve.Registry, tmp_path: Path) -> None:
    bundle, repo = pushed(reg, tmp_path, "mshort")
    with ociserve.proxy(reg.address) as px:
        px.faults = [ociserve.Fault("GET", "/manifests/", "short")]
        out = tmp_path / "out.aotc"
        pull(f"oci://{px.address}/{repo}", out, FAST, tmp_path)
        assert px.count("GET", "/manifests/") == 2
    assert out.read_bytes() == bundle.read_bytes()


# -- racing pushes ------------------------------------------------------------------------------


def test_concurrent_pushes_to_one_tag_all_succeed(
    reg: ociserve.Registry,
    tmp_path: Path,
    in_threads: Callable[[int, Callable[[int], None]], None],
) -> None:
    """70 pushes of one bundle to one new tag at once. Distribution 2.x rewrites a blob's
    link file in place on every upload commit; a HEAD or manifest PUT reading it meanwhile
    gets 500, or 400 DIGEST_INVALID + MANIFEST_BLOB_UNKNOWN: both are retried."""
    bundle = handmade.write(tmp_path / "race.aotc")
    ref = f"oci://{reg.address}/aotc/race:1"
    failures: list[str] = []
    digests: set[str] = set()

    def one(_k: int) -> None:
        try:
            digests.add(push(bundle, ref, FAST).manifest_digest)
        except Exception as exc:
            failures.append(f"{type(exc).__name__}: {exc}")

    in_threads(70, one)
    assert failures == [] and len(digests) == 1
    out = tmp_path / "back.aotc"
    pull(ref, out, FAST, tmp_path)
    assert out.read_bytes() == bundle.read_bytes()


def test_manifest_refused_over_an_unseen_blob_is_retried(
    reg: ociserve.Registry, tmp_path: Path
) -> None:
    bundle = handmade.write(tmp_path / "h.aotc")
    with ociserve.proxy(reg.address) as px:
        px.faults = [ociserve.Fault("PUT", "/manifests/", "blob-unknown")]
        push(bundle, f"oci://{px.address}/aotc/unseen:1", FAST)
        assert [s for m, p, s in px.log if m == "PUT" and "/manifests/" in p] == [400, 201]
        assert px.count("HEAD", "/blobs/") >= 4  # the blobs were checked again before the PUT


def test_manifest_refused_for_good_is_reported(reg: ociserve.Registry, tmp_path: Path) -> None:
    bundle = handmade.write(tmp_path / "h.aotc")
    with ociserve.proxy(reg.address) as px:
        px.faults = [ociserve.Fault("PUT", "/manifests/", "blob-unknown", times=10)]
        with pytest.raises(errors.RegistryError, match="MANIFEST_BLOB_UNKNOWN") as e:
            push(bundle, f"oci://{px.address}/aotc/unseen2:1", FAST)
    assert e.value.exit_code == 4 and "gave up after 4 attempts" in str(e.value)


# -- timeouts -------------------------------------------------------------------------------------


def test_a_stalled_registry_fails_within_the_read_timeout(tmp_path: Path) -> None:
    cfg = RegistryConfig(attempts=3, backoff=0.01, read_timeout=0.3, docker_config=None)
    with scripted(lambda m, p, h: Reply(mode="stall")) as srv:
        with pytest.raises(RegistryError) as e:
            oci.fetch(f"oci://{srv.address}/a/b:1", cache_dir=tmp_path / "c", config=cfg)
        assert len(srv.requests) == 3
    msg = str(e.value)
    assert srv.address in msg and "read timeout of 0.3 s" in msg, msg
    assert "gave up after 3 attempts" in msg and "AOTC_REGISTRY_READ_TIMEOUT" in msg, msg


def test_a_stalled_download_fails_within_the_read_timeout(tmp_path: Path) -> None:
    blob = b"x" * 1000
    manifest = artifact(blob)

    def respond(method: str, path: str, headers: Mapping[str, str]) -> Reply:
        if "/blobs/" in path:
            return Reply(mode="stall")
        return Reply(200, {"Content-Type": oci.MANIFEST_TYPE}, manifest)

    cfg = RegistryConfig(attempts=2, backoff=0.01, read_timeout=0.3, docker_config=None)
    with (
        scripted(respond) as srv,
        pytest.raises(errors.RegistryError, match=r"read timeout of 0\.3 s") as e,
    ):
        pull(f"oci://{srv.address}/a/b:1", tmp_path / "x.aotc", cfg, tmp_path)
    assert e.value.exit_code == 4
    assert not list(tmp_path.iterdir())


def test_connect_timeout(tmp_path: Path) -> None:
    """A listener whose backlog is full never completes a connection."""
    with socket.socket() as srv, socket.socket() as filler:
        srv.bind(("127.0.0.1", 0))
        srv.listen(0)
        filler.connect(srv.getsockname())
        port = srv.getsockname()[1]
        cfg = RegistryConfig(attempts=2, backoff=0.01, connect_timeout=0.2, docker_config=None)
        with pytest.raises(RegistryError) as e:
            Client(f"127.0.0.1:{port}", cfg).request("GET", "/v2/", scope="registry:catalog:*")
    msg = str(e.value)
    assert f"127.0.0.1:{port}" in msg and "connect timeout of 0.2 s" in msg, msg
    assert "AOTC_REGISTRY_CONNECT_TIMEOUT" in msg and "gave up after 2 attempts" in msg


def test_timeouts_from_the_environment() -> None:
    assert {"AOTC_REGISTRY_CONNECT_TIMEOUT", "AOTC_REGISTRY_READ_TIMEOUT"} <= set(VARIABLES)
    env = {"AOTC_REGISTRY_CONNECT_TIMEOUT": "2.5", "AOTC_REGISTRY_READ_TIMEOUT": "300"}
    cfg = RegistryConfig.from_environ(env)
    assert (cfg.connect_timeout, cfg.read_timeout) == (2.5, 300.0)
    assert RegistryConfig.from_environ({}).read_timeout == RegistryConfig().read_timeout
    for bad in ("abc", "0", "-1", "inf", "nan"):
        with pytest.raises(errors.UsageError, match=f"AOTC_REGISTRY_READ_TIMEOUT='{bad}'"):
            from_environ({"AOTC_REGISTRY_READ_TIMEOUT": bad, "HOME": "/nonexistent"})


# -- progress -------------------------------------------------------------------------------------


def test_progress_lines_for_long_transfers(
    reg: ociserve.Registry, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    bundle = big_bundle(tmp_path / "long.aotc", 100_000, seed=9)
    mib = f"{bundle.stat().st_size / (1 << 20):.1f}"
    ref = f"oci://{reg.address}/aotc/long:1"
    push(bundle, ref, FAST, chunk_size=512 * 1024, progress=True)
    err = capsys.readouterr().err
    assert f"push long.aotc: 0.0/{mib} MiB" in err and f"long.aotc: {mib}/{mib} MiB" in err, err
    push(bundle, ref, FAST, progress=True)  # already there: nothing to draw
    assert capsys.readouterr().err == ""
    pull(ref, tmp_path / "back.aotc", FAST, tmp_path, progress=True)
    err = capsys.readouterr().err
    assert f"pull back.aotc: {mib}/{mib} MiB" in err, err
    pull(ref, tmp_path / "quiet.aotc", FAST, tmp_path)  # off unless asked
    assert capsys.readouterr().err == ""
    seen: list[tuple[int, int]] = []
    oci.fetch(ref, cache_dir=tmp_path / "c", config=FAST, progress=lambda d, t: seen.append((d, t)))
    assert seen[-1] == (bundle.stat().st_size, bundle.stat().st_size)
    assert capsys.readouterr().err == ""  # the loader prints nothing


def test_retries_are_noted_when_progress_is_on(
    reg: ociserve.Registry, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    bundle = handmade.write(tmp_path / "h.aotc")
    with ociserve.proxy(reg.address) as px:
        px.faults = [ociserve.Fault("HEAD", "/blobs/", "503")]
        push(bundle, f"oci://{px.address}/aotc/noted:1", FAST, progress=True)
    err = capsys.readouterr().err
    assert "HTTP 503; retrying in" in err and "(attempt 2 of 4)" in err, err


# -- the retry helper ------------------------------------------------------------------------------


def test_retry_policy_in_one_place() -> None:
    from loader.retry import Retryable, RetryPolicy, retry

    slept: list[float] = []
    notes: list[str] = []
    calls: list[int] = []

    def flaky(n: int) -> str:
        calls.append(n)
        if n < 3:
            raise Retryable("down", after=7.0 if n == 1 else None)
        return "up"

    policy = RetryPolicy(attempts=3, backoff=1.0, max_backoff=5.0)
    assert retry(flaky, policy, sleep=slept.append, note=notes.append) == "up"
    assert calls == [1, 2, 3] and slept[0] == 5.0 and 2.0 <= slept[1] <= 2.2  # capped, 2^n
    assert "attempt 2 of 3" in notes[0]

    def hopeless(n: int) -> None:
        raise Retryable("still down", advice="try later")

    with pytest.raises(RegistryError, match=r"still down \(gave up after 3 attempts\); try later"):
        retry(hopeless, policy, sleep=slept.append)

    def refused(n: int) -> None:
        calls.append(n)
        raise RegistryError("no")

    calls.clear()
    with pytest.raises(RegistryError, match=r"^no$"):
        retry(refused, policy, sleep=slept.append)
    assert calls == [1]


def test_only_the_network_is_retried_not_the_disk(tmp_path: Path) -> None:
    """A write that fails (disk full) is not taken for a dropped connection."""
    blob = b"x" * 100

    class Full(io.BytesIO):
        def write(self, data: object) -> int:
            raise OSError(28, "No space left on device")

    with scripted(serving(artifact(blob), Reply(200, body=blob))) as srv:
        client = Client(srv.address, FAST)
        with pytest.raises(OSError, match="No space left"):
            from loader.download import download

            download(client, "a/b", sha(blob), len(blob), Full())
        assert len([r for r in srv.requests if "/blobs/" in r[1]]) == 1
