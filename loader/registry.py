"""A small OCI distribution client on the standard library alone.

The loader pulls bundles with it; the builder's push (``aot/push.py``) uses it as its
transport. It speaks the parts of the OCI distribution spec aotc needs:

- References: ``oci://HOST[:PORT]/REPOSITORY:TAG``, ``...@sha256:HEX`` or both.
- Transport (``loader/transport.py``): https; plain http only for loopback hosts
  (localhost, 127.0.0.0/8, ::1) or when ``insecure`` is set (``--insecure``,
  ``AOTC_REGISTRY_INSECURE=1``). Certificates are checked against the system's CAs
  (``SSL_CERT_FILE`` / ``SSL_CERT_DIR`` apply). Connect and read timeouts are separate
  (``AOTC_REGISTRY_CONNECT_TIMEOUT``, ``AOTC_REGISTRY_READ_TIMEOUT``).
- Authentication (``loader/credentials.py``), answered only when the registry asks (401 +
  WWW-Authenticate): Basic with the credentials found, or Bearer by fetching a token from
  the challenge's realm for its service and scope (with the credentials, or anonymously).
- Retries (``loader/retry.py``, one policy for every call): dropped and reset connections,
  short bodies, timeouts, 408, 429 and 5xx (but 501 and 505), with exponential backoff
  honouring Retry-After, ``attempts`` times in all. A blob download cut short resumes
  with a Range request where the registry allows it, else starts over.
- Redirects (blob downloads are often sent to object storage) are followed for GET and
  HEAD; the Authorization header never goes to another host.
"""

from __future__ import annotations

import hashlib
import json
import math
import ssl
import time
import urllib.parse
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TypeVar

from .credentials import Credentials, find_credentials, parse_challenge
from .errors import RegistryAuthError, RegistryError
from .reference import Reference as Reference
from .reference import is_loopback
from .retry import TRANSIENT_STATUS, Retryable, RetryPolicy, retry, retry_after
from .transport import Body, Response, Timeouts, redact, send

T = TypeVar("T")

MANIFEST_ACCEPT = ", ".join(
    [
        "application/vnd.oci.image.manifest.v1+json",
        "application/vnd.oci.image.index.v1+json",
        "application/vnd.docker.distribution.manifest.v2+json",
        "application/vnd.docker.distribution.manifest.list.v2+json",
    ]
)


def _seconds(environ: Mapping[str, str], name: str, default: float) -> float:
    text = environ.get(name, "").strip()
    if not text:
        return default
    try:
        value = float(text)
    except ValueError:
        value = math.nan
    if not (math.isfinite(value) and value > 0):
        raise RegistryError(
            f"{name}={text!r}: expected a number of seconds above 0, e.g. {default:g}"
        )
    return value


@dataclass(frozen=True)
class RegistryConfig:
    """How to talk to registries. ``from_environ`` reads the AOTC_REGISTRY_* variables."""

    username: str | None = None
    password: str | None = None
    docker_config: Path | None = None  # the folder holding config.json
    insecure: bool = False
    attempts: int = 4  # per request, download or upload, the first included
    backoff: float = 0.5  # seconds before the first retry; doubled after each
    max_backoff: float = 30.0
    connect_timeout: float = 10.0  # seconds to establish a connection (and TLS)
    read_timeout: float = 60.0  # seconds any one read or write may wait once connected

    @staticmethod
    def from_environ(environ: Mapping[str, str]) -> RegistryConfig:
        home = environ.get("HOME") or str(Path.home())
        docker = environ.get("DOCKER_CONFIG") or str(Path(home) / ".docker")
        return RegistryConfig(
            username=environ.get("AOTC_REGISTRY_USER") or None,
            password=environ.get("AOTC_REGISTRY_PASSWORD"),
            docker_config=Path(docker),
            insecure=environ.get("AOTC_REGISTRY_INSECURE", "") in ("1", "true", "yes"),
            connect_timeout=_seconds(environ, "AOTC_REGISTRY_CONNECT_TIMEOUT", 10.0),
            read_timeout=_seconds(environ, "AOTC_REGISTRY_READ_TIMEOUT", 60.0),
        )

    @property
    def policy(self) -> RetryPolicy:
        return RetryPolicy(self.attempts, self.backoff, self.max_backoff)

    @property
    def timeouts(self) -> Timeouts:
        return Timeouts(self.connect_timeout, self.read_timeout)


class Client:
    """One registry's API. Requests name the scope they need (``repository:NAME:pull``).
    ``note`` hears of each retry (the CLI prints them; the loader passes none)."""

    def __init__(
        self,
        registry: str,
        config: RegistryConfig,
        *,
        insecure: bool | None = None,
        sleep: Callable[[float], None] = time.sleep,
        note: Callable[[str], None] | None = None,
    ):
        self.registry = registry
        self.config = config
        self.insecure = config.insecure if insecure is None else insecure
        host = Reference(registry, "x", "x").host
        self.scheme = "http" if self.insecure or is_loopback(host) else "https"
        self.base = f"{self.scheme}://{registry}"
        self.sleep = sleep
        self.note = note
        self._tokens: dict[str, str] = {}
        self._basic = False  # the registry asked for Basic auth
        self._creds: Credentials | None = None
        self._creds_looked_up = False
        self._ssl = ssl.create_default_context()

    # -- helpers the callers use ---------------------------------------------------------

    def url(self, path: str) -> str:
        return urllib.parse.urljoin(self.base + "/", path)

    def where(self) -> str:
        return f"registry {self.registry}"

    def retry(self, attempt: Callable[[int], T]) -> T:
        """``attempt`` under the configured retry policy (``loader/retry.py``)."""
        return retry(attempt, self.config.policy, sleep=self.sleep, note=self.note)

    # -- requests ------------------------------------------------------------------------

    def request(
        self,
        method: str,
        url: str,
        *,
        scope: str,
        headers: Mapping[str, str] | None = None,
        body: Body = None,
        stream: bool = False,
        retry: bool = True,
    ) -> Response:
        """Send with auth and retries. Returns any final status but the transient ones;
        401/403 raise auth errors. ``retry=False`` makes one attempt and raises its
        :class:`Retryable`: for requests that must not be applied twice (upload chunks)."""
        url = self.url(url)

        def once(_n: int) -> Response:
            return self.exchange(
                method, url, scope=scope, headers=headers, body=body, stream=stream
            )

        return self.retry(once) if retry else once(1)

    def exchange(
        self,
        method: str,
        url: str,
        *,
        scope: str,
        headers: Mapping[str, str] | None = None,
        body: Body = None,
        stream: bool = False,
    ) -> Response:
        """One attempt: the request, and again after answering one auth challenge.
        Transient failures and statuses raise :class:`Retryable`."""
        for challenged in (False, True):
            hdrs = dict(headers or {})
            auth = self._auth_header(scope)
            if auth:
                hdrs["Authorization"] = auth
            resp = self._send(method, self.url(url), hdrs, body)
            if resp.status == 401:
                challenge = resp.header("WWW-Authenticate") or ""
                resp.discard()
                if challenged:
                    raise self._refused(scope)
                self._authenticate(challenge, scope)
                continue
            if resp.status == 403:
                resp.discard()
                creds = self._credentials()
                who = f"the credentials from {creds.source}" if creds else "anonymous access"
                raise RegistryAuthError(
                    f"{self.where()} denied {method} on {scope.split(':')[1]} to {who} "
                    f"({resp.explain()}); check the account's permissions"
                )
            if resp.status in TRANSIENT_STATUS:
                hint = retry_after(resp.header("Retry-After"))
                resp.discard()
                raise Retryable(
                    f"{self.where()}: {method} {redact(url)}: {resp.explain()}", after=hint
                )
            if not stream:
                resp.read_all()
            return resp
        raise AssertionError("unreachable")

    def _send(self, method: str, url: str, headers: Mapping[str, str], body: Body) -> Response:
        return send(
            method,
            url,
            headers,
            body,
            timeouts=self.config.timeouts,
            context=self._ssl,
            where=self.where(),
            insecure=self.insecure,
        )

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
        elif kind == "bearer" and params.get("realm"):
            self._tokens[scope] = self._fetch_token(params, scope)
        elif not challenge.strip():
            raise RegistryAuthError(
                f"{self.where()} answered 401 without saying how to authenticate (no "
                "WWW-Authenticate header)"
            )
        else:
            shown = challenge if len(challenge) <= 200 else challenge[:200] + "…"
            raise RegistryAuthError(
                f"{self.where()} asked for unsupported or malformed authentication {shown!r}"
            )

    def _check_realm(self, realm: str, creds: Credentials | None) -> None:
        split = urllib.parse.urlsplit(realm)
        if (
            split.scheme not in ("http", "https")
            or not split.hostname
            or any(c.isspace() or ord(c) < 32 or ord(c) == 127 for c in realm)
        ):
            raise RegistryAuthError(
                f"{self.where()}: the token realm {realm[:200]!r} is not an http(s) URL"
            )
        if (
            creds is not None
            and split.scheme != "https"
            and not (self.config.insecure or is_loopback(split.hostname))
        ):
            raise RegistryAuthError(
                f"{self.where()}: token realm {realm} is not https; refusing to send "
                "credentials over plain http (use --insecure to allow)"
            )

    def _fetch_token(self, params: Mapping[str, str], scope: str) -> str:
        realm = params["realm"]
        creds = self._credentials()
        self._check_realm(realm, creds)
        query = {k: v for k, v in (("service", params.get("service")), ("scope", scope)) if v}
        url = realm + ("&" if "?" in realm else "?") + urllib.parse.urlencode(query)
        headers = {"Authorization": creds.basic} if creds is not None else {}

        def once(_n: int) -> Response:
            resp = self._send("GET", url, headers, None)
            if resp.status in TRANSIENT_STATUS:
                hint = retry_after(resp.header("Retry-After"))
                resp.discard()
                raise Retryable(f"token server {redact(realm)}: {resp.explain()}", after=hint)
            if resp.status == 200:
                resp.read_all()
            else:
                resp.discard()
            return resp

        resp = self.retry(once)
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
        if not isinstance(token, str) or not token or not token.isprintable():
            raise RegistryError(f"token server {realm} answered without a usable token")
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
