"""One HTTP exchange with a registry: connect and read timeouts, redirects, replayable
request bodies, bounded response bodies, and every connection failure turned into a
:class:`~loader.retry.Retryable` whose message names the host and what to change.

``http.client`` returns a short body without raising when a connection closes early
(``read(n)`` gives ``b""``), so the Content-Length a response promised is kept
(``Response.promised``) and callers compare it with what arrived.
"""

from __future__ import annotations

import http.client
import json
import socket
import ssl
import time
import urllib.parse
from collections.abc import Callable, Iterator, Mapping
from contextlib import AbstractContextManager, contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import BinaryIO

from .errors import RegistryError
from .retry import Retryable, is_transient

MAX_MANIFEST = 4 * 1024 * 1024  # the distribution spec's recommended limit
MAX_ERROR_BODY = 64 * 1024  # of an error answer, only its message is wanted
MAX_REDIRECTS = 10
IO_CHUNK = 1024 * 1024
REDIRECTS = frozenset({301, 302, 303, 307, 308})
CONNECT_ADVICE = "set AOTC_REGISTRY_CONNECT_TIMEOUT=SECONDS to wait longer"
READ_ADVICE = "set AOTC_REGISTRY_READ_TIMEOUT=SECONDS to wait longer"


@dataclass(frozen=True)
class Timeouts:
    connect: float
    read: float  # the longest wait for any one read or write once connected


@dataclass(frozen=True)
class FileSlice:
    """A request body read from a file: replayable, so a retry can send it again.
    ``on_read`` hears the file offset reached as the body is sent (for a progress line)."""

    path: Path
    offset: int
    length: int
    on_read: Callable[[int], None] | None = field(default=None, compare=False)


Body = bytes | FileSlice | None


class _SliceReader:
    def __init__(self, f: BinaryIO, body: FileSlice):
        self.f = f
        self.body = body
        self.left = body.length

    def read(self, n: int = -1) -> bytes:
        if self.left <= 0:
            return b""
        n = self.left if n < 0 else min(n, self.left)
        data = self.f.read(n)
        self.left -= len(data)
        if self.body.on_read is not None:
            self.body.on_read(self.body.offset + self.body.length - self.left)
        return data


def printable(text: str, limit: int) -> str:
    """``text`` from a registry, safe to print: control and format characters escaped (no
    terminal escape sequences), at most ``limit`` characters."""
    out = "".join(c if c.isprintable() else ascii(c)[1:-1] for c in text[:limit])
    return out + ("…" if len(text) > limit else "")


def redact(url: str) -> str:
    """A URL for messages: no query string (upload state, presigned signatures)."""
    return url.split("?", 1)[0]


@contextmanager
def failures_retryable(where: str, what: str, timeouts: Timeouts) -> Iterator[None]:
    """Connection failures inside the block as :class:`Retryable` naming ``what``."""
    try:
        yield
    except TimeoutError:
        raise Retryable(
            f"{where}: no answer within the read timeout of {timeouts.read:g} s ({what})",
            advice=READ_ADVICE,
        ) from None
    except ssl.SSLCertVerificationError as exc:
        raise RegistryError(
            f"{where}: TLS certificate not trusted ({exc.verify_message}); "
            "install its CA (SSL_CERT_FILE) or, for a test registry, use --insecure"
        ) from None
    except (OSError, http.client.HTTPException) as exc:
        if not is_transient(exc):
            raise RegistryError(f"{where}: {what}: {type(exc).__name__}: {exc}") from None
        detail = str(exc) or "connection closed"
        raise Retryable(f"{where}: {what}: {type(exc).__name__}: {detail}") from None


class Response:
    """A response whose body is read (``read_all``) or left open for streaming (``raw``)."""

    def __init__(
        self,
        method: str,
        url: str,
        raw: http.client.HTTPResponse,
        conn: http.client.HTTPConnection,
        where: str,
        timeouts: Timeouts,
        sock: socket.socket | None = None,
    ):
        self.method = method
        self.url = url
        self.status = raw.status
        self.headers = raw.headers
        self.raw = raw
        self._conn = conn
        self._sock = sock  # http.client drops conn.sock once the response owns the socket
        self.where = where
        self.timeouts = timeouts
        self.body = b""
        bodiless = method == "HEAD" or raw.status in (204, 304)
        # http.client has parsed Content-Length (None when absent, chunked or invalid).
        self.promised: int | None = 0 if bodiless else raw.length

    def header(self, name: str) -> str | None:
        return self.headers.get(name)

    def reading(self) -> AbstractContextManager[None]:
        return failures_retryable(self.where, f"reading {redact(self.url)}", self.timeouts)

    def read_all(self, limit: int = MAX_MANIFEST) -> bytes:
        """The whole body, at most ``limit`` bytes; a body cut short is :class:`Retryable`."""
        try:
            if self.promised is not None and self.promised > limit:
                raise RegistryError(
                    f"{self.where}: {redact(self.url)} announces {self.promised} bytes; "
                    f"refusing an answer over {limit} bytes"
                )
            self.body = self._read_within(limit + 1)
        finally:
            self.close()
        if len(self.body) > limit:
            raise RegistryError(
                f"{self.where}: {redact(self.url)} sent more than {limit} bytes; refusing it"
            )
        if self.promised is not None and len(self.body) < self.promised:
            raise Retryable(
                f"{self.where}: connection closed after {len(self.body)} of the "
                f"{self.promised} bytes of {redact(self.url)}"
            )
        return self.body

    def _read_within(self, n: int) -> bytes:
        """Up to ``n`` bytes, all within one read timeout: a server trickling a byte at a
        time cannot hold a small answer (manifest, token, error) open for ever."""
        deadline = time.monotonic() + self.timeouts.read
        parts: list[bytes] = []
        got = 0
        with self.reading():
            while got < n:
                left = deadline - time.monotonic()
                if left <= 0:
                    raise TimeoutError
                if self._sock is not None:
                    self._sock.settimeout(left)
                data = self.raw.read1(min(n - got, IO_CHUNK))
                if not data:
                    break
                parts.append(data)
                got += len(data)
        return b"".join(parts)

    def discard(self) -> None:
        """Read what there is of an error answer (for ``explain``), never failing."""
        try:
            self.body = self.raw.read(MAX_ERROR_BODY)
        except (OSError, http.client.HTTPException):
            self.body = b""
        finally:
            self.close()

    def close(self) -> None:
        self.raw.close()
        self._conn.close()

    def codes(self) -> set[str]:
        """The OCI error codes in the body (``{"errors": [{"code": ...}]}``)."""
        return {str(e.get("code")) for e in self._errors()}

    def _errors(self) -> list[dict[str, object]]:
        try:
            doc = json.loads(self.body or b"{}")
            errors = doc.get("errors") if isinstance(doc, dict) else None
        except ValueError:
            return []
        return [e for e in errors if isinstance(e, dict)] if isinstance(errors, list) else []

    def explain(self) -> str:
        """The status and the registry's own error text (OCI error JSON) if it has one."""
        text = "; ".join(f"{e.get('code')}: {e.get('message')}" for e in self._errors())
        return f"HTTP {self.status}" + (f" ({printable(text, 500)})" if text else "")


def _connect(
    parts: urllib.parse.SplitResult, timeouts: Timeouts, context: ssl.SSLContext, where: str
) -> http.client.HTTPConnection:
    conn: http.client.HTTPConnection
    if parts.scheme == "https":
        conn = http.client.HTTPSConnection(parts.netloc, timeout=timeouts.connect, context=context)
    else:
        conn = http.client.HTTPConnection(parts.netloc, timeout=timeouts.connect)
    conn.blocksize = IO_CHUNK
    try:
        conn.connect()
    except TimeoutError:
        conn.close()
        raise Retryable(
            f"{where}: could not connect to {parts.netloc} within the connect timeout of "
            f"{timeouts.connect:g} s",
            advice=CONNECT_ADVICE,
        ) from None
    except BaseException:
        conn.close()
        raise
    assert conn.sock is not None
    conn.sock.settimeout(timeouts.read)
    return conn


def _exchange(
    method: str,
    url: str,
    headers: dict[str, str],
    body: Body,
    timeouts: Timeouts,
    context: ssl.SSLContext,
    where: str,
) -> Response:
    parts = urllib.parse.urlsplit(url)
    what = f"{method} {redact(url)}"
    with failures_retryable(where, what, timeouts):
        try:
            conn = _connect(parts, timeouts, context, where)
        except (OSError, http.client.HTTPException) as exc:
            if isinstance(exc, ssl.SSLCertVerificationError) or not is_transient(exc):
                raise
            raise Retryable(f"{where} unreachable: {what}: {type(exc).__name__}: {exc}") from None
        target = parts.path + (f"?{parts.query}" if parts.query else "")
        try:
            if isinstance(body, FileSlice):
                headers["Content-Length"] = str(body.length)
                with body.path.open("rb") as f:
                    f.seek(body.offset)
                    conn.request(method, target, body=_SliceReader(f, body), headers=headers)
            else:
                if body is not None or method in ("PUT", "POST", "PATCH"):
                    headers["Content-Length"] = str(len(body or b""))
                conn.request(method, target, body=body, headers=headers)
            sock = conn.sock
            raw = conn.getresponse()
        except BaseException:
            conn.close()
            raise
    return Response(method, url, raw, conn, where, timeouts, sock)


def send(
    method: str,
    url: str,
    headers: Mapping[str, str],
    body: Body,
    *,
    timeouts: Timeouts,
    context: ssl.SSLContext,
    where: str,
    insecure: bool,
) -> Response:
    """One request, following redirects for GET and HEAD. The Authorization header never
    leaves the origin host, a redirect never downgrades https to http (unless ``insecure``),
    and a chain longer than MAX_REDIRECTS is refused."""
    origin = urllib.parse.urlsplit(url)
    for _ in range(MAX_REDIRECTS + 1):
        parts = urllib.parse.urlsplit(url)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise RegistryError(f"{where}: refusing to follow a redirect to {redact(url)}")
        if origin.scheme == "https" and parts.scheme == "http" and not insecure:
            raise RegistryError(
                f"{where}: refusing a redirect from https to plain http ({redact(url)}); "
                "use --insecure to allow it"
            )
        hdrs = {"User-Agent": "aotc", **headers}
        if parts.netloc != origin.netloc:
            hdrs.pop("Authorization", None)  # never hand our token to object storage
        resp = _exchange(method, url, hdrs, body, timeouts, context, where)
        if resp.status not in REDIRECTS or method not in ("GET", "HEAD"):
            return resp
        location = resp.header("Location")
        resp.discard()
        if not location:
            return resp
        url = urllib.parse.urljoin(url, location)
    raise RegistryError(
        f"{where}: more than {MAX_REDIRECTS} redirects for {method} {redact(url)}; refusing"
    )
