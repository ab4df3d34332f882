"""Real registries on loopback for the tests: the CNCF distribution registry (Debian's
``docker-registry``) started on a free port, optionally behind htpasswd (Basic) or token
(Bearer) authentication, plus a small forwarding proxy that counts requests and injects
faults (dropped connections, bodies cut short or reset, 503/429, slow responses, refused
manifests). ``tests/ociscripted.py`` has a server whose every answer a test chooses."""

from __future__ import annotations

import base64
import http.client
import http.server
import json
import os
import shutil
import socket
import struct
import subprocess
import threading
import time
import urllib.parse
import uuid
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from dataclasses import dataclass, field
from pathlib import Path

import pytest

BINARY = shutil.which("docker-registry") or shutil.which("registry")
SKIP_REASON = (
    "needs the CNCF distribution registry: `apt-get install docker-registry` (.ci/run installs it)"
)


def require_binary() -> str:
    if BINARY is None:
        if os.environ.get("AOTC_TEST_REQUIRE_REGISTRY"):
            pytest.fail(SKIP_REASON + "; AOTC_TEST_REQUIRE_REGISTRY is set")
        pytest.skip(SKIP_REASON)
    return BINARY


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


def htpasswd_line(user: str, password: str) -> str | None:
    """A bcrypt htpasswd line: apache2-utils' htpasswd, else the bcrypt module, else None."""
    tool = shutil.which("htpasswd")
    if tool:
        out = subprocess.run(
            [tool, "-Bbn", user, password], capture_output=True, text=True, check=True
        )
        return out.stdout.strip()
    try:
        import bcrypt  # type: ignore[import-not-found]
    except ImportError:
        return None
    hashed = bcrypt.hashpw(password.encode(), bcrypt.gensalt(rounds=5)).decode()
    return f"{user}:{hashed}"


@dataclass
class Registry:
    root: Path
    port: int
    proc: subprocess.Popen[bytes] | None = None

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self.port}"

    def blob_file(self, digest: str) -> Path:
        hex_ = digest.removeprefix("sha256:")
        return self.root / "data/docker/registry/v2/blobs/sha256" / hex_[:2] / hex_ / "data"

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()


def start_registry(root: Path, auth: str = "") -> Registry:
    """Start a registry storing under ``root``; ``auth`` is a YAML ``auth:`` block or ''."""
    binary = require_binary()
    root.mkdir(parents=True, exist_ok=True)
    port = free_port()
    config = root / "config.yml"
    config.write_text(
        f"""version: 0.1
log:
  level: error
  accesslog:
    disabled: true
storage:
  filesystem:
    rootdirectory: {root / "data"}
  delete:
    enabled: true
  maintenance:
    uploadpurging:
      enabled: false
http:
  addr: 127.0.0.1:{port}
  secret: {uuid.uuid4().hex}
{auth}"""
    )
    log = (root / "registry.log").open("wb")
    proc = subprocess.Popen([binary, "serve", str(config)], stdout=log, stderr=log)
    reg = Registry(root, port, proc)
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"registry exited: {(root / 'registry.log').read_text()[-2000:]}")
        try:
            conn = http.client.HTTPConnection("127.0.0.1", port, timeout=2)
            conn.request("GET", "/v2/")
            conn.getresponse().read()
            conn.close()
            return reg
        except OSError:
            time.sleep(0.05)
    reg.stop()
    raise RuntimeError("registry did not start in 20 s")


@contextmanager
def registry(root: Path, auth: str = "") -> Iterator[Registry]:
    reg = start_registry(root, auth)
    try:
        yield reg
    finally:
        reg.stop()


def htpasswd_auth(root: Path, user: str, password: str) -> str:
    line = htpasswd_line(user, password)
    if line is None:
        pytest.skip("needs htpasswd (apt-get install apache2-utils) or the bcrypt module")
    path = root / "htpasswd"
    root.mkdir(parents=True, exist_ok=True)
    path.write_text(line + "\n")
    return f"auth:\n  htpasswd:\n    realm: aotc-test\n    path: {path}\n"


# -- a forwarding proxy with faults ----------------------------------------------------------


@dataclass
class Fault:
    method: str
    path_part: str  # a substring of the request path
    # "drop" | "drop-after-forward" | "503" | "429" | "slow" | "short" (the upstream's
    # headers, half its body, then a clean close) | "reset" (the same, then a TCP RST) |
    # "blob-unknown" (a manifest PUT answered 400 MANIFEST_BLOB_UNKNOWN, not forwarded)
    action: str
    times: int = 1
    retry_after: str = "0"


@dataclass
class Proxy:
    upstream: str
    port: int = 0
    log: list[tuple[str, str, int]] = field(default_factory=list)  # method, path, status
    faults: list[Fault] = field(default_factory=list)
    strip_range: bool = False  # act as a registry that ignores Range (answers 200)
    server: http.server.ThreadingHTTPServer | None = None
    lock: threading.Lock = field(default_factory=threading.Lock)

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self.port}"

    def take(self, method: str, path: str) -> Fault | None:
        with self.lock:
            for f in self.faults:
                if f.times > 0 and f.method == method and f.path_part in path:
                    f.times -= 1
                    return f
        return None

    def count(self, method: str, path_part: str) -> int:
        return sum(1 for m, p, _ in self.log if m == method and path_part in p)


class _Handler(http.server.BaseHTTPRequestHandler):
    """Forwards each request to ``proxy.upstream``, applying the proxy's faults."""

    proxy: Proxy
    protocol_version = "HTTP/1.1"

    def log_message(self, *args: object) -> None:
        pass

    def _drop(self) -> None:
        self.close_connection = True
        with suppress(OSError):
            self.connection.shutdown(socket.SHUT_RDWR)

    def _forward(self) -> None:
        length = int(self.headers.get("Content-Length") or 0)
        body = self.rfile.read(length) if length else b""
        fault = self.proxy.take(self.command, self.path)
        if fault is not None and fault.action == "drop":
            self.proxy.log.append((self.command, self.path, 0))
            return self._drop()
        if fault is not None and fault.action in ("503", "429"):
            self.proxy.log.append((self.command, self.path, int(fault.action)))
            self.send_response(int(fault.action))
            self.send_header("Retry-After", fault.retry_after)
            self.send_header("Content-Length", "0")
            self.end_headers()
            return None
        if fault is not None and fault.action == "blob-unknown":
            self.proxy.log.append((self.command, self.path, 400))
            return self._blob_unknown()
        if fault is not None and fault.action == "slow":
            time.sleep(float(fault.retry_after))
        skip = ("connection", "range") if self.proxy.strip_range else ("connection",)
        headers = {k: v for k, v in self.headers.items() if k.lower() not in skip}
        conn = http.client.HTTPConnection(self.proxy.upstream, timeout=60)
        conn.request(self.command, self.path, body=body or None, headers=headers)
        resp = conn.getresponse()
        data = resp.read()
        conn.close()
        self.proxy.log.append((self.command, self.path, resp.status))
        if fault is not None and fault.action == "drop-after-forward":
            return self._drop()
        self.send_response(resp.status)
        for k, v in resp.getheaders():
            if k.lower() not in ("transfer-encoding", "connection", "date", "server"):
                self.send_header(k, v)
        if resp.getheader("Content-Length") is None:
            self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        if fault is not None and fault.action in ("short", "reset"):
            self.wfile.write(data[: len(data) // 2])
            self.wfile.flush()
            return self._reset() if fault.action == "reset" else self._drop()
        if self.command != "HEAD":
            self.wfile.write(data)
        return None

    def _reset(self) -> None:
        self.close_connection = True
        with suppress(OSError):
            self.connection.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
            self.connection.close()

    def _blob_unknown(self) -> None:
        body = json.dumps(
            {"errors": [{"code": "MANIFEST_BLOB_UNKNOWN", "message": "blob unknown"}]}
        ).encode()
        self.send_response(400)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    do_GET = do_HEAD = do_PUT = do_PATCH = do_POST = do_DELETE = _forward


def _handler(proxy: Proxy) -> type[http.server.BaseHTTPRequestHandler]:
    return type("Handler", (_Handler,), {"proxy": proxy})


@contextmanager
def proxy(upstream: str) -> Iterator[Proxy]:
    p = Proxy(upstream)
    with serving(_handler(p)) as server:
        p.server = server
        p.port = server.server_address[1]
        yield p


@contextmanager
def serving(
    handler: type[http.server.BaseHTTPRequestHandler],
) -> Iterator[http.server.ThreadingHTTPServer]:
    """An HTTP server on a free loopback port, served from a thread until the block ends."""
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    server.daemon_threads = True
    thread = threading.Thread(target=server.serve_forever, args=(0.05,), daemon=True)
    thread.start()
    try:
        yield server
    finally:
        server.shutdown()
        server.server_close()


# -- a token server for the Bearer flow -------------------------------------------------------

SERVICE = "aotc-test-registry"
ISSUER = "aotc-test-issuer"


def _b64url(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


@dataclass
class TokenServer:
    root: Path
    user: str
    password: str
    port: int = 0
    issued: list[str] = field(default_factory=list)  # scopes granted

    def auth_block(self) -> str:
        return (
            "auth:\n  token:\n"
            f"    realm: http://127.0.0.1:{self.port}/token\n"
            f"    service: {SERVICE}\n    issuer: {ISSUER}\n"
            f"    rootcertbundle: {self.root / 'cert.pem'}\n"
        )

    def sign(self, scopes: list[str], subject: str) -> str:
        der = subprocess.run(
            ["openssl", "x509", "-in", str(self.root / "cert.pem"), "-outform", "DER"],
            capture_output=True,
            check=True,
        ).stdout
        header = {"typ": "JWT", "alg": "RS256", "x5c": [base64.b64encode(der).decode()]}
        now = int(time.time())
        access = []
        for scope in scopes:
            kind, name, actions = scope.split(":")
            access.append({"type": kind, "name": name, "actions": actions.split(",")})
        claims = {
            "iss": ISSUER,
            "sub": subject,
            "aud": SERVICE,
            "exp": now + 300,
            "nbf": now - 10,
            "iat": now - 10,
            "jti": uuid.uuid4().hex,
            "access": access,
        }
        signing_input = (
            _b64url(json.dumps(header).encode()) + "." + _b64url(json.dumps(claims).encode())
        )
        sig = subprocess.run(
            ["openssl", "dgst", "-sha256", "-sign", str(self.root / "key.pem")],
            input=signing_input.encode(),
            capture_output=True,
            check=True,
        ).stdout
        return signing_input + "." + _b64url(sig)


@contextmanager
def token_server(root: Path, user: str, password: str) -> Iterator[TokenServer]:
    if shutil.which("openssl") is None:
        pytest.skip("needs openssl to sign registry tokens")
    root.mkdir(parents=True, exist_ok=True)
    subprocess.run(
        [
            *("openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "2"),
            *("-keyout", str(root / "key.pem"), "-out", str(root / "cert.pem")),
            *("-subj", "/CN=aotc-test-token"),
        ],
        capture_output=True,
        check=True,
    )
    ts = TokenServer(root, user, password)
    expected = "Basic " + base64.b64encode(f"{user}:{password}".encode()).decode()

    class Handler(http.server.BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, *args: object) -> None:
            pass

        def do_GET(self) -> None:
            query = urllib.parse.parse_qs(urllib.parse.urlsplit(self.path).query)
            if self.headers.get("Authorization") != expected:
                body = b'{"errors":[{"code":"UNAUTHORIZED","message":"bad credentials"}]}'
                self.send_response(401)
            else:
                scopes = query.get("scope", [])
                ts.issued.extend(scopes)
                token = ts.sign(scopes, user)
                body = json.dumps({"token": token, "expires_in": 300}).encode()
                self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

    with serving(Handler) as server:
        ts.port = server.server_address[1]
        yield ts
