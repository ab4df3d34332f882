"""Registry credentials and challenges: where the user name and password come from, and
what a registry's ``WWW-Authenticate`` header asks for.

Credentials come from ``AOTC_REGISTRY_USER`` / ``AOTC_REGISTRY_PASSWORD`` (through
:class:`~loader.registry.RegistryConfig`), else the Docker config file
(``$DOCKER_CONFIG/config.json`` or ``~/.docker/config.json``: ``auths`` entries and
``credHelpers`` / ``credsStore`` helpers).
"""

from __future__ import annotations

import base64
import json
import re
import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from .errors import RegistryAuthError

if TYPE_CHECKING:
    from .registry import RegistryConfig


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


# One ``key=value`` or ``key="quoted value"`` parameter of a challenge, and the comma after.
_PARAM = re.compile(
    r'\s*([A-Za-z_][A-Za-z0-9_-]*)\s*=\s*(?:"((?:[^"\\]|\\.)*)"|([^",\s]*))\s*(?:,|$)'
)


def parse_challenge(header: str) -> tuple[str, dict[str, str]]:
    """``Bearer realm="…",service="…",scope="…"`` → ("bearer", {realm, service, scope}).
    The first value of a repeated parameter wins; text that is not a parameter is skipped."""
    scheme, _, rest = header.strip().partition(" ")
    params: dict[str, str] = {}
    pos = 0
    while pos < len(rest):
        m = _PARAM.match(rest, pos)
        if m is None or m.end() == pos:
            comma = rest.find(",", pos)
            pos = len(rest) if comma < 0 else comma + 1
            continue
        quoted, plain = m.group(2), m.group(3)
        value = re.sub(r"\\(.)", r"\1", quoted) if quoted is not None else plain or ""
        params.setdefault(m.group(1).lower(), value)
        pos = m.end()
    return scheme.lower(), params
