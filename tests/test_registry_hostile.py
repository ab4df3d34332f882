"""A hostile registry (``tests/ociscripted.py``, every answer chosen by the test): lies
about lengths, endless bodies, deep or malformed manifests, redirect loops and redirects
to other hosts, malformed challenges and token answers, hostile layer titles and ``-o``
paths, terminal escapes. Each ends in a clear error with its exit code, writing nothing
outside the chosen folder."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path

import pytest

from aot import errors
from aot.pull import pull
from aot.remote import describe
from loader import oci
from loader.errors import BundleError, RegistryAuthError, RegistryError
from loader.registry import RegistryConfig
from tests import handmade
from tests.ociscripted import Reply, Respond, artifact, scripted, serving

FAST = RegistryConfig(
    backoff=0.01, max_backoff=0.05, connect_timeout=5, read_timeout=5, docker_config=None
)


@pytest.fixture(autouse=True)
def clean_env(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    monkeypatch.setenv("AOTC_BUNDLE_CACHE", str(tmp_path / "bundles"))


def fetch_from(respond: Respond, tmp_path: Path) -> Path:
    with scripted(respond) as srv:
        return oci.fetch(f"oci://{srv.address}/a/b:1", cache_dir=tmp_path / "c", config=FAST)


def test_a_content_length_of_ten_to_the_twenty(tmp_path: Path) -> None:
    blob = b"x" * 100
    lie = Reply(200, body=blob, length=10**20)
    with pytest.raises(RegistryError, match=r"announced as 100000000000000000000 bytes"):
        fetch_from(serving(artifact(blob), lie), tmp_path)
    respond = serving(artifact(blob), Reply(200, body=blob))
    huge = Reply(200, {}, b"{}", length=10**20)
    with pytest.raises(RegistryError, match="refusing an answer over 4194304 bytes"):
        fetch_from(lambda m, p, h: huge if "/manifests/" in p else respond(m, p, h), tmp_path)


def test_endless_chunked_answers_are_cut_off(tmp_path: Path) -> None:
    blob = b"x" * 100_000
    with pytest.raises(RegistryError, match="larger than its 100000 bytes"):
        fetch_from(
            serving(artifact(blob), Reply(200, mode="endless")),
            tmp_path,
        )
    endless = Reply(200, mode="endless")
    with pytest.raises(RegistryError, match="sent more than 4194304 bytes"):
        fetch_from(lambda m, p, h: endless, tmp_path)


def test_a_trickling_manifest_is_cut_off_at_the_read_timeout(tmp_path: Path) -> None:
    """A byte every 50 ms never trips a per-read timeout; the whole answer has one."""
    cfg = RegistryConfig(attempts=2, backoff=0.01, read_timeout=0.5, docker_config=None)
    slow = Reply(200, {"Content-Type": oci.MANIFEST_TYPE}, artifact(b"x"), mode="trickle")
    with scripted(lambda m, p, h: slow) as srv, pytest.raises(RegistryError) as e:
        oci.fetch(f"oci://{srv.address}/a/b:1", cache_dir=tmp_path / "c", config=cfg)
    assert "read timeout of 0.5 s" in str(e.value) and "gave up after 2 attempts" in str(e.value)


def test_a_header_bomb_is_refused(tmp_path: Path) -> None:
    bomb = Reply(200, {f"X-{i}": "y" * 100 for i in range(500)})
    with scripted(lambda m, p, h: bomb) as srv, pytest.raises(RegistryError, match="headers"):
        oci.fetch(f"oci://{srv.address}/a/b:1", cache_dir=tmp_path / "c", config=FAST)


def test_a_manifest_nested_too_deep_is_refused(tmp_path: Path) -> None:
    deep = b"[" * 200_000 + b"]" * 200_000
    with pytest.raises(RegistryError, match="the manifest is not JSON"):
        fetch_from(serving(deep, Reply(404)), tmp_path)


@pytest.mark.parametrize(
    ("layer", "message"),
    [
        ({"size": -1}, "no valid digest and size"),
        ({"size": True}, "no valid digest and size"),
        ({"size": 1e30}, "no valid digest and size"),
        ({"digest": "sha256:../../etc"}, "is not a digest"),
        ({"mediaType": "application/vnd.oci.image.layer.v1.tar+gzip"}, "expected one layer"),
    ],
)
def test_bad_layer_descriptors(tmp_path: Path, layer: dict[str, object], message: str) -> None:
    with pytest.raises(RegistryError, match=message):
        fetch_from(
            serving(artifact(b"x", **layer), Reply(404)),
            tmp_path,
        )


def test_a_layer_larger_than_the_disk(tmp_path: Path) -> None:
    manifest = artifact(b"x", size=10**20)
    with pytest.raises(BundleError, match=r"cannot write the bundle cache.*are free"):
        fetch_from(serving(manifest, Reply(200, body=b"x")), tmp_path)
    with scripted(serving(manifest, Reply(200, body=b"x"))) as srv:
        with pytest.raises(errors.UsageError, match="are free") as e:
            pull(f"oci://{srv.address}/a/b:1", tmp_path / "o" / "x.aotc", FAST, tmp_path)
        assert len([r for r in srv.requests if "/blobs/" in r[1]]) == 0
    assert e.value.exit_code == 2 and not (tmp_path / "o").exists()


def test_a_redirect_loop_is_refused(tmp_path: Path) -> None:
    blob = b"x" * 10
    loop = Reply(307, {"Location": "/v2/a/b/blobs/again"})
    with pytest.raises(RegistryError, match="more than 10 redirects"):
        fetch_from(serving(artifact(blob), loop), tmp_path)
    elsewhere = Reply(302, {"Location": "file:///etc/passwd"})
    with pytest.raises(RegistryError, match="refusing to follow a redirect to file:"):
        fetch_from(serving(artifact(blob), elsewhere), tmp_path)


def test_credentials_never_follow_a_redirect_to_another_host(tmp_path: Path) -> None:
    bundle = handmade.write(tmp_path / "h.aotc").read_bytes()
    manifest = artifact(bundle)
    cfg = RegistryConfig(username="u", password="secret", backoff=0.01, docker_config=None)
    with scripted(lambda m, p, h: Reply(200, body=bundle)) as storage:
        where = f"http://{storage.address}/bucket/blob"

        def respond(method: str, path: str, headers: Mapping[str, str]) -> Reply:
            if "Authorization" not in headers:
                return Reply(401, {"WWW-Authenticate": 'Basic realm="r"'})
            if "/blobs/" in path:
                return Reply(307, {"Location": where})
            return Reply(200, {"Content-Type": oci.MANIFEST_TYPE}, manifest)

        with scripted(respond) as srv:
            oci.fetch(f"oci://{srv.address}/a/b:1", cache_dir=tmp_path / "c", config=cfg)
            assert all("Authorization" in h for _m, _p, h in srv.requests[1:])
        assert [p for _m, p, _h in storage.requests] == ["/bucket/blob"]
        assert "Authorization" not in storage.requests[0][2]


@pytest.mark.parametrize(
    ("challenge", "message"),
    [
        ("", "without saying how to authenticate"),
        ("Bearer", "unsupported or malformed authentication 'Bearer'"),
        ('Bearer realm="unterminated', "unsupported or malformed"),
        ("Negotiate abc", "unsupported or malformed"),
        ('Bearer realm="ftp://127.0.0.1/token"', "is not an http(s) URL"),
        ('Bearer realm="http://127.0.0.1:1/to ken"', "is not an http(s) URL"),
        ('Bearer realm="http:///token"', "is not an http(s) URL"),
        ("Basic " + "x" * 10_000, "requires authentication"),  # and no credentials
    ],
)
def test_malformed_challenges(tmp_path: Path, challenge: str, message: str) -> None:
    reply = Reply(401, {"WWW-Authenticate": challenge} if challenge else {})
    cfg = RegistryConfig(backoff=0.01, docker_config=None)
    with scripted(lambda m, p, h: reply) as srv:
        with pytest.raises(
            RegistryAuthError, match=message.replace("(", r"\(").replace(")", r"\)")
        ):
            oci.fetch(f"oci://{srv.address}/a/b:1", cache_dir=tmp_path / "c", config=cfg)
        assert len(srv.requests) == 1


def test_a_token_server_answering_nonsense(tmp_path: Path) -> None:
    answers = iter([b"[]", b'{"token": "a\\r\\nInjected: 1"}', b"x" * (5 << 20)])
    with scripted(lambda m, p, h: Reply(200, body=next(answers))) as tokens:
        realm = f'Bearer realm="http://{tokens.address}/token",service="s"'
        reply = Reply(401, {"WWW-Authenticate": realm})
        with scripted(lambda m, p, h: reply) as srv:
            for message in (
                "without a usable token",
                "without a usable token",
                "refusing an answer over",
            ):
                with pytest.raises(RegistryError, match=message):
                    oci.fetch(f"oci://{srv.address}/a/b:1", cache_dir=tmp_path / "c", config=FAST)


def test_challenge_parameters_cannot_be_smuggled() -> None:
    from loader.credentials import parse_challenge

    _kind, params = parse_challenge(
        'Bearer realm="https://auth.example/token",service="realm=http://evil/x",scope="a,b"'
    )
    assert params == {
        "realm": "https://auth.example/token",
        "service": "realm=http://evil/x",
        "scope": "a,b",
    }
    assert parse_challenge('Bearer realm="a\\"b", realm="second"')[1] == {"realm": 'a"b'}


# -- hostile titles and -o paths ------------------------------------------------------------------


@pytest.fixture
def titled(tmp_path: Path) -> Iterator[Callable[[object], str]]:
    """A scripted registry serving a real bundle under the layer title a test sets."""
    bundle = handmade.write(tmp_path / "src.aotc").read_bytes()
    state: dict[str, object] = {"title": "x.aotc"}

    def respond(method: str, path: str, headers: Mapping[str, str]) -> Reply:
        if "/manifests/" in path:
            manifest = artifact(bundle, annotations={oci.TITLE: state["title"]})
            return Reply(200, {"Content-Type": oci.MANIFEST_TYPE}, manifest)
        return Reply(200, body=bundle)

    with scripted(respond) as srv:

        def serve(title: object) -> str:
            state["title"] = title
            return f"oci://{srv.address}/aotc/titled:1"

        yield serve


@pytest.mark.parametrize(
    ("title", "problem"),
    [
        ("../evil.aotc", "is a path"),
        ("sub/evil.aotc", "is a path"),
        ("..\\evil.aotc", "is a path"),
        ("/etc/evil.aotc", "is a path"),
        ("x\x00.aotc", "control or invisible characters"),
        ("x\n.aotc", "control or invisible characters"),
        ("\u202eexe.aotc", "control or invisible characters"),
        ("\x1b[2Jx.aotc", "control or invisible characters"),
        ("a" * 300 + ".aotc", "longer than 200 bytes"),
        (".bashrc", "names a hidden file"),
        ("..", "names a hidden file"),
        ("Makefile", "does not end in .aotc"),
        ("sitecustomize.py", "does not end in .aotc"),
    ],
)
def test_hostile_titles_are_refused(
    titled: Callable[[object], str], tmp_path: Path, title: str, problem: str
) -> None:
    ref = titled(title)
    folder = tmp_path / "out"
    folder.mkdir()
    with pytest.raises(errors.RegistryError, match=problem) as e:
        pull(ref, folder, FAST, tmp_path)
    assert e.value.exit_code == 4 and "Pass -o FILE" in str(e.value)
    assert "\x00" not in str(e.value) and "\x1b" not in str(e.value)
    assert list(folder.iterdir()) == []
    pull(ref, folder / "named.aotc", FAST, tmp_path)  # -o FILE does not use the title
    assert [p.name for p in folder.iterdir()] == ["named.aotc"]


def test_odd_but_harmless_titles(titled: Callable[[object], str], tmp_path: Path) -> None:
    assert pull(titled("-rf é.aotc"), None, FAST, tmp_path).path == tmp_path / "-rf é.aotc"
    assert pull(titled(""), None, FAST, tmp_path).path == tmp_path / "titled-1.aotc"
    assert pull(titled(5), None, FAST, tmp_path).path == tmp_path / "titled-1.aotc"


def test_pull_into_a_missing_folder_creates_it(
    titled: Callable[[object], str], tmp_path: Path
) -> None:
    ref = titled("x.aotc")
    assert pull(ref, "new/deeper/", FAST, tmp_path).path == tmp_path / "new/deeper/x.aotc"
    assert pull(ref, "other/y.aotc", FAST, tmp_path).path == tmp_path / "other/y.aotc"
    assert pull(ref, tmp_path / "new", FAST, tmp_path).path == tmp_path / "new/x.aotc"


def test_pull_into_a_file_posing_as_a_folder(
    titled: Callable[[object], str], tmp_path: Path
) -> None:
    ref = titled("x.aotc")
    (tmp_path / "afile").write_text("keep me")
    for output in ("afile/", "afile/x.aotc", "afile/sub/x.aotc"):
        with pytest.raises(errors.UsageError, match=f"-o {output}: cannot write") as e:
            pull(ref, output, FAST, tmp_path)
        assert e.value.exit_code == 2
    assert (tmp_path / "afile").read_text() == "keep me"
    with pytest.raises(errors.UsageError, match="File name too long"):
        pull(ref, "n" * 300 + ".aotc", FAST, tmp_path)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["afile", "src.aotc"]


def test_a_failed_pull_removes_the_folders_it_made(tmp_path: Path) -> None:
    blob = b"x" * 100
    with (
        scripted(serving(artifact(blob), Reply(404))) as srv,
        pytest.raises(errors.RegistryError, match="HTTP 404"),
    ):
        pull(f"oci://{srv.address}/a/b:1", "made/here/", FAST, tmp_path)
    assert not (tmp_path / "made").exists()


def test_registry_words_are_escaped_before_printing(
    titled: Callable[[object], str], tmp_path: Path
) -> None:
    text = describe(titled("\x1b]0;pwned\x07x.aotc"), FAST)
    assert "\x1b" not in text and "\x07" not in text and "\\x1b]0;pwned" in text
    error = json.dumps({"errors": [{"code": "X", "message": "\x1b[31mred"}]}).encode()
    with (
        scripted(lambda m, p, h: Reply(400, body=error)) as srv,
        pytest.raises(RegistryError) as e,
    ):
        oci.fetch(f"oci://{srv.address}/a/b:1", cache_dir=tmp_path / "c", config=FAST)
    assert "\x1b" not in str(e.value) and "\\x1b[31mred" in str(e.value)
