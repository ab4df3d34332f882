"""A small OCI distribution client on the standard library alone.

The loader pulls bundles with it; the builder's push (``aot/push.py``) uses it as its
transport. It speaks the parts of the OCI distribution spec aotc needs:

- References: ``oci://HOST[:PORT]/REPOSITORY:TAG``, ``...@sha256:HEX`` or both.
- Transport: https; plain http only for loopback hosts (localhost, 127.0.0.0/8, ::1) or
  when ``insecure`` is set (``--insecure``, ``AOTC_REGISTRY_INSECURE=1``). Certificates
  are checked against the system's CAs (``SSL_CERT_FILE`` / ``SSL_CERT_DIR`` apply).
- Authentication, answered only when the registry asks (401 + WWW-Authenticate): Basic
  with the credentials found, or Bearer by fetching a token from the challenge's realm
  for its service and scope (with the credentials, or anonymously). Credentials come from
  ``AOTC_REGISTRY_USER`` / ``AOTC_REGISTRY_PASSWORD``, else the Docker config file
  (``$DOCKER_CONFIG/config.json`` or ``~/.docker/config.json``: ``auths`` entries and
  ``credHelpers`` / ``credsStore`` helpers).
- Retries: connection errors, 408, 429 and 5xx (but 501 and 505) are retried with
  exponential backoff, honouring Retry-After, ``attempts`` times in all.
- Redirects (blob downloads are often sent to object storage) are followed for GET and
  HEAD; the Authorization header never goes to another host.
"""

from __future__ import annotations

import base64
import email.utils
import hashlib
import http.client
import ipaddress
import json
import os
import random
import re
import ssl
import subprocess
import time
import urllib.parse
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO

from .errors import BadReference, RegistryAuthError, RegistryError

SCHEME = "oci://"
_COMPONENT = r"[a-z0-9]+(?:(?:\.|_|__|-+)[a-z0-9]+)*"
_REF = re.compile(
    r"(?P<registry>(?:\[[0-9A-Fa-f:.]+\]|[A-Za-z0-9](?:[A-Za-z0-9.-]*[A-Za-z0-9])?)"
    r"(?::[0-9]{1,5})?)"
    rf"/(?P<repository>{_COMPONENT}(?:/{_COMPONENT})*)"
    r"(?::(?P<tag>[A-Za-z0-9_][A-Za-z0-9_.-]{0,127}))?"
    r"(?:@(?P<digest>[A-Za-z0-9_+.-]+:[A-Za-z0-9=_-]+))?"
)
DIGEST = re.compile(r"sha256:[0-9a-f]{64}")
MAX_MANIFEST = 4 * 1024 * 1024  # the distribution spec's recommended limit
MANIFEST_ACCEPT = ", ".join(
    [
        "application/vnd.oci.image.manifest.v1+json",
        "application/vnd.oci.image.index.v1+json",
        "application/vnd.docker.distribution.manifest.v2+json",
        "application/vnd.docker.distribution.manifest.list.v2+json",
    ]
)
_TRANSIENT = frozenset({408, 429, 500, 502, 503, 504})
_REDIRECTS = frozenset({301, 302, 303, 307, 308})
_IO_CHUNK = 1024 * 1024


def check_digest(digest: str, what: str) -> str:
    if not DIGEST.fullmatch(digest):
        raise BadReference(
            f"{what}: {digest!r} is not a digest; expected sha256: and 64 hex digits"
        )
    return digest


@dataclass(frozen=True)
class Reference:
    """Where an artifact lives: registry host[:port], repository, and a tag and/or digest."""

    registry: str
    repository: str
    tag: str | None = None
    digest: str | None = None  # of the OCI manifest, as in ``docker pull repo@sha256:...``

    @staticmethod
    def parse(text: str) -> Reference:
        usage = "expected oci://HOST[:PORT]/REPOSITORY:TAG or oci://HOST/REPOSITORY@sha256:DIGEST"
        if not text.startswith(SCHEME):
            raise BadReference(f"{text!r}: not a registry reference; {usage}")
        m = _REF.fullmatch(text[len(SCHEME) :])
        if m is None:
            hint = ""
            rest = text[len(SCHEME) :]
            if "/" not in rest:
                hint = " (no repository after the host)"
            elif (
                rest.split("/", 1)[1].split(":", 1)[0].lower()
                != rest.split("/", 1)[1].split(":", 1)[0]
            ):
                hint = " (repository names are lowercase)"
            raise BadReference(f"{text!r}: not a valid reference{hint}; {usage}")
        tag, digest = m["tag"], m["digest"]
        if digest is not None:
            check_digest(digest, text)
        if tag is None and digest is None:
            raise BadReference(f"{text!r}: names no tag or digest; add :TAG or @sha256:DIGEST")
        return Reference(m["registry"], m["repository"], tag, digest)

    @property
    def host(self) -> str:
        if self.registry.startswith("["):
            return self.registry[1 : self.registry.index("]")]
        return self.registry.rsplit(":", 1)[0] if ":" in self.registry else self.registry

    @property
    def is_loopback(self) -> bool:
        return is_loopback(self.host)

    def manifest_ref(self) -> str:
        """What to put after ``/manifests/``: the digest when there is one, else the tag."""
        ref = self.digest or self.tag
        assert ref is not None
        return ref

    def __str__(self) -> str:
        tag = f":{self.tag}" if self.tag else ""
        digest = f"@{self.digest}" if self.digest else ""
        return f"{SCHEME}{self.registry}/{self.repository}{tag}{digest}"


def is_loopback(host: str) -> bool:
    if host == "localhost" or host.endswith(".localhost"):
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


@dataclass(frozen=True)
class RegistryConfig:
    """How to talk to registries. ``from_environ`` reads the AOTC_REGISTRY_* variables."""

    username: str | None = None
    password: str | None = None
    docker_config: Path | None = None  # the folder holding config.json
    insecure: bool = False
    attempts: int = 5
    backoff: float = 0.5  # seconds before the first retry; doubled after each
    max_backoff: float = 30.0
    timeout: float = 60.0

    @staticmethod
    def from_environ(environ: Mapping[str, str]) -> RegistryConfig:
        home = environ.get("HOME") or str(Path.home())
        docker = environ.get("DOCKER_CONFIG") or str(Path(home) / ".docker")
        return RegistryConfig(
            username=environ.get("AOTC_REGISTRY_USER") or None,
            password=environ.get("AOTC_REGISTRY_PASSWORD"),
            docker_config=Path(docker),
            insecure=environ.get("AOTC_REGISTRY_INSECURE", "") in ("1", "true", "yes"),
        )


@dataclass(frozen=True)
class Credentials:
    username: str
    password: str
    source: str  # where they came from, named in error messages

    @property
    def basic(self) -> str:
        pair = f"{self.username}:{self.password}".encode()
        return "Basic " + base64.b64encode(pair).decode()


def _config_key(key: str) -> str:
    """A Docker config ``auths`` key as host[:port]: strips a scheme and any path."""
    key = key.split("://", 1)[-1].split("/", 1)[0]
    return "docker.io" if key in ("index.docker.io", "registry-1.docker.io") else key


def find_credentials(registry: str, config: RegistryConfig) -> Credentials | None:
    """Credentials for ``registry``: the environment first, then the Docker config file."""
    if config.username is not None:
        source = "AOTC_REGISTRY_USER/AOTC_REGISTRY_PASSWORD"
        return Credentials(config.username, config.password or "", source)
    if config.docker_config is None:
        return None
    path = config.docker_config / "config.json"
    try:
        doc = json.loads(path.read_text())
    except FileNotFoundError:
        return None
    except (OSError, ValueError) as exc:
        raise RegistryAuthError(f"{path}: cannot read the Docker config ({exc})") from None
    if not isinstance(doc, dict):
        raise RegistryAuthError(f"{path}: not a Docker config (expected a JSON object)")
    want = _config_key(registry)
    helpers = doc.get("credHelpers") or {}
    if isinstance(helpers, dict) and isinstance(helpers.get(registry), str):
        return _helper(helpers[registry], registry, path)
    for key, entry in (doc.get("auths") or {}).items():
        if _config_key(key) != want or not isinstance(entry, dict):
            continue
        if entry.get("auth"):
            try:
                user, _, password = base64.b64decode(entry["auth"]).decode().partition(":")
            except (ValueError, UnicodeDecodeError):
                raise RegistryAuthError(
                    f"{path}: auths.{key}.auth is not base64 of user:password; "
                    f"log in again (docker login {registry})"
                ) from None
            return Credentials(user, password, f"{path} (auths.{key})")
        if entry.get("username"):
            return Credentials(
                entry["username"], entry.get("password", ""), f"{path} (auths.{key})"
            )
    store = doc.get("credsStore")
    if isinstance(store, str) and store:
        return _helper(store, registry, path)
    return None


def _helper(name: str, registry: str, config_path: Path) -> Credentials | None:
    program = f"docker-credential-{name}"
    try:
        out = subprocess.run(
            [program, "get"], input=registry, capture_output=True, text=True, timeout=60
        )
    except FileNotFoundError:
        raise RegistryAuthError(
            f"{config_path} names the credential helper {program!r}, which is not installed"
        ) from None
    except subprocess.TimeoutExpired:
        raise RegistryAuthError(f"credential helper {program} did not answer in 60 s") from None
    if out.returncode != 0:
        return None  # the helper has nothing for this registry
    try:
        doc = json.loads(out.stdout)
        return Credentials(str(doc["Username"]), str(doc["Secret"]), f"{program} ({config_path})")
    except (ValueError, KeyError, TypeError):
        raise RegistryAuthError(f"credential helper {program} gave an unreadable answer") from None


def parse_challenge(header: str) -> tuple[str, dict[str, str]]:
    """``Bearer realm="…",service="…",scope="…"`` → ("bearer", {realm, service, scope})."""
    scheme, _, rest = header.strip().partition(" ")
    params = {
        k.lower(): v
        for k, v in re.findall(r'([A-Za-z_]+)\s*=\s*"((?:[^"\\]|\\.)*)"', rest)
        + re.findall(r'([A-Za-z_]+)\s*=\s*([^",\s]+)', rest)
    }
    return scheme.lower(), params


def retry_after(value: str | None, now: float | None = None) -> float | None:
    """Seconds to wait from a Retry-After header: delta-seconds or an HTTP date."""
    if not value:
        return None
    value = value.strip()
    if value.isdigit():
        return float(value)
    try:
        when = email.utils.parsedate_to_datetime(value).timestamp()
    except (TypeError, ValueError):
        return None
    return max(0.0, when - (time.time() if now is None else now))


@dataclass(frozen=True)
class FileSlice:
    """A request body read from a file: replayable, so a retry can send it again."""

    path: Path
    offset: int
    length: int


Body = bytes | FileSlice | None


class _SliceReader:
    def __init__(self, f: BinaryIO, length: int):
        self.f = f
        self.left = length

    def read(self, n: int = -1) -> bytes:
        if self.left <= 0:
            return b""
        n = self.left if n < 0 else min(n, self.left)
        data = self.f.read(n)
        self.left -= len(data)
        return data


class Response:
    """A response whose body is read (``body``) or left open for streaming (``stream``)."""

    def __init__(self, url: str, raw: http.client.HTTPResponse, conn: http.client.HTTPConnection):
        self.url = url
        self.status = raw.status
        self.headers = raw.headers
        self.raw = raw
        self._conn = conn
        self.body = b""

    def header(self, name: str) -> str | None:
        return self.headers.get(name)

    def read_all(self, limit: int = MAX_MANIFEST) -> bytes:
        try:
            self.body = self.raw.read(limit + 1)
        finally:
            self.close()
        if len(self.body) > limit:
            raise RegistryError(f"{self.url}: response larger than {limit} bytes")
        return self.body

    def close(self) -> None:
        self.raw.close()
        self._conn.close()

    def explain(self) -> str:
        """The registry's own error text (OCI error JSON) if the body has one."""
        try:
            doc = json.loads(self.body or b"{}")
            errors = doc.get("errors") or []
            text = "; ".join(f"{e.get('code')}: {e.get('message')}" for e in errors)
        except (ValueError, AttributeError):
            text = ""
        return f"HTTP {self.status}" + (f" ({text})" if text else "")


class Transient(RegistryError):
    """A connection failed after the request may have reached the server (not retried)."""


class Client:
    """One registry's API. Requests name the scope they need (``repository:NAME:pull``)."""

    def __init__(
        self,
        registry: str,
        config: RegistryConfig,
        *,
        insecure: bool | None = None,
        sleep: Callable[[float], None] = time.sleep,
    ):
        self.registry = registry
        self.config = config
        plain = config.insecure if insecure is None else insecure
        host = Reference(registry, "x", "x").host
        self.scheme = "http" if plain or is_loopback(host) else "https"
        self.base = f"{self.scheme}://{registry}"
        self.sleep = sleep
        self._tokens: dict[str, str] = {}
        self._basic = False  # the registry asked for Basic auth
        self._creds: Credentials | None = None
        self._creds_looked_up = False
        self._ssl = ssl.create_default_context()

    # -- helpers the callers use ---------------------------------------------------------

    def url(self, path: str) -> str:
        return urllib.parse.urljoin(self.base + "/", path)

    def backoff(self, attempt: int, hint: float | None = None) -> None:
        """Sleep before retry number ``attempt`` (1-based): Retry-After, else 2^n backoff."""
        delay = self.config.backoff * 2 ** (attempt - 1)
        delay = hint if hint is not None else delay + random.uniform(0, delay / 10)
        self.sleep(min(delay, self.config.max_backoff))

    def where(self) -> str:
        return f"registry {self.registry}"

    # -- the request loop ----------------------------------------------------------------

    def request(
        self,
        method: str,
        url: str,
        *,
        scope: str,
        headers: Mapping[str, str] | None = None,
        body: Body = None,
        stream: bool = False,
        retry_connection: bool = True,
    ) -> Response:
        """Send with auth and retries. Returns any final status; 401/403 raise auth errors.

        ``retry_connection=False`` raises :class:`Transient` on a connection failure
        instead of resending: for requests that must not be applied twice (upload chunks).
        """
        url = self.url(url)
        attempt = 0
        reauthenticated = False
        while True:
            attempt += 1
            hdrs = dict(headers or {})
            auth = self._auth_header(scope)
            if auth:
                hdrs["Authorization"] = auth
            try:
                resp = self._send(method, url, hdrs, body)
            except ssl.SSLCertVerificationError as exc:
                raise RegistryError(
                    f"{self.where()}: TLS certificate not trusted ({exc.verify_message}); "
                    "install its CA (SSL_CERT_FILE) or, for a test registry, use --insecure"
                ) from None
            except (OSError, http.client.HTTPException) as exc:
                what = f"{method} {_redact(url)}: {type(exc).__name__}: {exc}"
                if not retry_connection:
                    raise Transient(what) from None
                if attempt >= self.config.attempts:
                    raise RegistryError(
                        f"{self.where()} unreachable after {attempt} attempts: {what}"
                    ) from None
                self.backoff(attempt)
                continue
            if resp.status == 401:
                challenge = resp.header("WWW-Authenticate") or ""
                resp.read_all()
                if reauthenticated:
                    raise self._refused(scope)
                self._authenticate(challenge, scope)
                reauthenticated = True
                attempt -= 1  # answering a challenge is not a failed attempt
                continue
            if resp.status == 403:
                resp.read_all()
                creds = self._credentials()
                who = f"the credentials from {creds.source}" if creds else "anonymous access"
                raise RegistryAuthError(
                    f"{self.where()} denied {method} on {scope.split(':')[1]} to {who} "
                    f"({resp.explain()}); check the account's permissions"
                )
            if resp.status in _TRANSIENT and attempt < self.config.attempts:
                hint = retry_after(resp.header("Retry-After"))
                resp.read_all()
                self.backoff(attempt, hint)
                continue
            if not stream:
                resp.read_all()
            return resp

    def _send(self, method: str, url: str, headers: dict[str, str], body: Body) -> Response:
        origin = urllib.parse.urlsplit(url).netloc
        for _ in range(10):
            parts = urllib.parse.urlsplit(url)
            conn: http.client.HTTPConnection
            if parts.scheme == "https":
                conn = http.client.HTTPSConnection(
                    parts.netloc, timeout=self.config.timeout, context=self._ssl
                )
            elif parts.scheme == "http":
                conn = http.client.HTTPConnection(parts.netloc, timeout=self.config.timeout)
            else:
                raise RegistryError(f"{self.where()}: cannot follow a redirect to {url}")
            conn.blocksize = _IO_CHUNK
            target = parts.path + (f"?{parts.query}" if parts.query else "")
            hdrs = {"User-Agent": "aotc", **headers}
            if parts.netloc != origin:
                hdrs.pop("Authorization", None)  # never hand our token to object storage
            try:
                if isinstance(body, FileSlice):
                    hdrs["Content-Length"] = str(body.length)
                    with body.path.open("rb") as f:
                        f.seek(body.offset)
                        conn.request(
                            method, target, body=_SliceReader(f, body.length), headers=hdrs
                        )
                else:
                    if body is not None or method in ("PUT", "POST", "PATCH"):
                        hdrs["Content-Length"] = str(len(body or b""))
                    conn.request(method, target, body=body, headers=hdrs)
                raw = conn.getresponse()
            except BaseException:
                conn.close()
                raise
            resp = Response(url, raw, conn)
            if resp.status in _REDIRECTS and method in ("GET", "HEAD"):
                location = resp.header("Location")
                resp.read_all()
                if not location:
                    return resp
                url = urllib.parse.urljoin(url, location)
                continue
            return resp
        raise RegistryError(f"{self.where()}: too many redirects for {method} {_redact(url)}")

    # -- authentication ------------------------------------------------------------------

    def _credentials(self) -> Credentials | None:
        if not self._creds_looked_up:
            self._creds = find_credentials(self.registry, self.config)
            self._creds_looked_up = True
        return self._creds

    def _auth_header(self, scope: str) -> str | None:
        token = self._tokens.get(scope)
        if token:
            return f"Bearer {token}"
        creds = self._credentials() if self._basic else None
        return creds.basic if creds else None

    def _refused(self, scope: str) -> RegistryAuthError:
        creds = self._credentials()
        if creds is None:
            return RegistryAuthError(
                f"{self.where()} requires authentication for {scope}; set "
                "AOTC_REGISTRY_USER and AOTC_REGISTRY_PASSWORD, or log in with "
                f"`docker login {self.registry}` (or `oras login`)"
            )
        return RegistryAuthError(
            f"{self.where()} refused the credentials from {creds.source} (user "
            f"{creds.username!r}) for {scope}; check the user name and password or token"
        )

    def _authenticate(self, challenge: str, scope: str) -> None:
        kind, params = parse_challenge(challenge)
        if kind == "basic":
            if self._credentials() is None:
                raise self._refused(scope)
            self._basic = True
        elif kind == "bearer" and "realm" in params:
            self._tokens[scope] = self._fetch_token(params, scope)
        else:
            raise RegistryAuthError(
                f"{self.where()} asked for unsupported authentication {challenge!r}"
            )

    def _fetch_token(self, params: Mapping[str, str], scope: str) -> str:
        realm = params["realm"]
        query = {k: v for k, v in (("service", params.get("service")), ("scope", scope)) if v}
        url = realm + ("&" if "?" in realm else "?") + urllib.parse.urlencode(query)
        headers: dict[str, str] = {}
        creds = self._credentials()
        if creds is not None:
            split = urllib.parse.urlsplit(realm)
            if split.scheme != "https" and not (
                self.config.insecure or is_loopback(split.hostname or "")
            ):
                raise RegistryAuthError(
                    f"{self.where()}: token realm {realm} is not https; refusing to send "
                    "credentials over plain http (use --insecure to allow)"
                )
            headers["Authorization"] = creds.basic
        for attempt in range(1, self.config.attempts + 1):
            try:
                resp = self._send("GET", url, headers, None)
                resp.read_all()
            except (OSError, http.client.HTTPException) as exc:
                if attempt == self.config.attempts:
                    raise RegistryError(f"token server {realm} unreachable: {exc}") from None
                self.backoff(attempt)
                continue
            if resp.status in _TRANSIENT and attempt < self.config.attempts:
                self.backoff(attempt, retry_after(resp.header("Retry-After")))
                continue
            break
        if resp.status in (401, 403):
            if creds is None:
                raise self._refused(scope)
            raise RegistryAuthError(
                f"token server {realm} refused the credentials from {creds.source} (user "
                f"{creds.username!r}) for {scope}; check the user name and password or token"
            )
        if resp.status != 200:
            raise RegistryError(f"token server {realm}: {resp.explain()}")
        try:
            doc = json.loads(resp.body)
            token = doc.get("token") or doc.get("access_token")
        except (ValueError, AttributeError):
            token = None
        if not isinstance(token, str) or not token:
            raise RegistryError(f"token server {realm} answered without a token")
        return token

    # -- the calls aotc makes --------------------------------------------------------------

    def get_manifest(self, ref: Reference) -> tuple[bytes, str, str]:
        """The manifest's bytes, media type and digest (checked against a pinned digest)."""
        scope = f"repository:{ref.repository}:pull"
        resp = self.request(
            "GET",
            f"/v2/{ref.repository}/manifests/{ref.manifest_ref()}",
            scope=scope,
            headers={"Accept": MANIFEST_ACCEPT},
        )
        if resp.status == 404:
            raise RegistryError(f"{ref}: not found in {self.where()} ({resp.explain()})")
        if resp.status != 200:
            raise RegistryError(f"{ref}: cannot read the manifest: {resp.explain()}")
        digest = "sha256:" + hashlib.sha256(resp.body).hexdigest()
        if ref.digest is not None and digest != ref.digest:
            raise RegistryError(
                f"{ref}: the registry sent a manifest whose digest is {digest}; refusing it"
            )
        media = (resp.header("Content-Type") or "").split(";")[0].strip()
        return resp.body, media, digest

    def blob_exists(self, repository: str, digest: str, scope: str) -> bool:
        resp = self.request("HEAD", f"/v2/{repository}/blobs/{digest}", scope=scope)
        if resp.status == 200:
            return True
        if resp.status == 404:
            return False
        raise RegistryError(f"{self.where()}: HEAD blob {digest}: {resp.explain()}")

    def download(self, repository: str, digest: str, size: int, out: BinaryIO) -> str:
        """Write blob ``digest`` to ``out`` (from its current position, rewound on retries);
        returns the ``sha256:`` digest of what was written. The caller compares."""
        scope = f"repository:{repository}:pull"
        start = out.tell()
        for attempt in range(1, self.config.attempts + 1):
            out.seek(start)
            out.truncate()
            h = hashlib.sha256()
            resp = self.request("GET", f"/v2/{repository}/blobs/{digest}", scope=scope, stream=True)
            if resp.status != 200:
                resp.read_all()
                raise RegistryError(
                    f"{self.where()}: blob {digest} of {repository}: {resp.explain()}"
                )
            got = 0
            try:
                while True:
                    data = resp.raw.read(_IO_CHUNK)
                    if not data:
                        break
                    got += len(data)
                    if got > size:
                        raise RegistryError(
                            f"{self.where()}: blob {digest} is larger than its {size} bytes"
                        )
                    h.update(data)
                    out.write(data)
            except (OSError, http.client.HTTPException) as exc:
                if attempt == self.config.attempts:
                    raise RegistryError(
                        f"{self.where()}: download of {digest} failed {attempt} times: {exc}"
                    ) from None
                self.backoff(attempt)
                continue
            finally:
                resp.close()
            return "sha256:" + h.hexdigest()
        raise AssertionError("unreachable")


def _redact(url: str) -> str:
    """A URL for messages: no query string (upload state, presigned signatures)."""
    return url.split("?", 1)[0]


def environ_config() -> RegistryConfig:
    return RegistryConfig.from_environ(os.environ)
