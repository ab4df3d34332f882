"""A scripted registry for the tests: a server on loopback whose every answer the test
chooses (stalls, lies about lengths, endless bodies, redirects, malformed challenges,
hostile manifests), and helpers to serve an aotc artifact from it."""

from __future__ import annotations

import hashlib
import http.server
import json
import threading
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager, suppress
from dataclasses import dataclass, field

from loader import oci
from tests import ociserve


@dataclass
class Reply:
    status: int = 200
    headers: dict[str, str] = field(default_factory=dict)
    body: bytes = b""
    # "" (as given) | "stall" (read the request, never answer) | "short" (announce the whole
    # body, send half, close) | "endless" (a chunked body that never ends) | "trickle" (the
    # body a byte every 50 ms)
    mode: str = ""
    length: int | None = None  # the Content-Length to announce; default len(body)


Respond = Callable[[str, str, Mapping[str, str]], Reply]


@dataclass
class Scripted:
    port: int = 0
    requests: list[tuple[str, str, dict[str, str]]] = field(default_factory=list)
    stop: threading.Event = field(default_factory=threading.Event)

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self.port}"


def _scripted_handler(
    state: Scripted, respond: Respond
) -> type[http.server.BaseHTTPRequestHandler]:
    class Handler(http.server.BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, *args: object) -> None:
            pass

        def _answer(self) -> None:
            length = int(self.headers.get("Content-Length") or 0)
            if length:
                self.rfile.read(length)
            headers = {k: v for k, v in self.headers.items()}
            state.requests.append((self.command, self.path, headers))
            reply = respond(self.command, self.path, headers)
            self.close_connection = True
            if reply.mode == "stall":
                state.stop.wait(30)
                return
            self.send_response(reply.status)
            for k, v in reply.headers.items():
                self.send_header(k, v)
            if reply.mode == "endless":
                self.send_header("Transfer-Encoding", "chunked")
                self.end_headers()
                chunk = b"x" * 65536
                with suppress(OSError):
                    while not state.stop.is_set():
                        self.wfile.write(b"%x\r\n%s\r\n" % (len(chunk), chunk))
                return
            announced = len(reply.body) if reply.length is None else reply.length
            self.send_header("Content-Length", str(announced))
            self.end_headers()
            if self.command == "HEAD":
                return
            body = reply.body[: len(reply.body) // 2] if reply.mode == "short" else reply.body
            with suppress(OSError):
                if reply.mode != "trickle":
                    self.wfile.write(body)
                for i in range(len(body) if reply.mode == "trickle" else 0):
                    if state.stop.wait(0.05):
                        break
                    self.wfile.write(body[i : i + 1])
                    self.wfile.flush()

        do_GET = do_HEAD = do_PUT = do_PATCH = do_POST = _answer

    return Handler


@contextmanager
def scripted(respond: Respond) -> Iterator[Scripted]:
    """A server on loopback answering each request with ``respond(method, path, headers)``."""
    state = Scripted()
    with ociserve.serving(_scripted_handler(state, respond)) as server:
        state.port = server.server_address[1]
        try:
            yield state
        finally:
            state.stop.set()


def artifact(blob: bytes, **layer: object) -> bytes:
    """An aotc artifact manifest for ``blob`` (title x.aotc); ``layer`` overrides fields."""
    doc = {
        "schemaVersion": 2,
        "mediaType": oci.MANIFEST_TYPE,
        "artifactType": oci.ARTIFACT_TYPE,
        "config": oci.empty_descriptor(),
        "layers": [
            {
                "mediaType": oci.LAYER_TYPE,
                "digest": "sha256:" + hashlib.sha256(blob).hexdigest(),
                "size": len(blob),
                "annotations": {oci.TITLE: "x.aotc"},
                **layer,
            }
        ],
    }
    return json.dumps(doc).encode()


def serving(manifest: bytes, blob: Reply) -> Respond:
    """Answers: ``manifest`` for any manifest, ``blob`` for any blob, 200 for the rest."""

    def respond(method: str, path: str, headers: Mapping[str, str]) -> Reply:
        if "/manifests/" in path:
            return Reply(200, {"Content-Type": oci.MANIFEST_TYPE}, manifest)
        if "/blobs/" in path:
            return blob
        return Reply(200)

    return respond
