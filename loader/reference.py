"""Registry references: ``oci://HOST[:PORT]/REPOSITORY:TAG``, ``...@sha256:HEX`` or both."""

from __future__ import annotations

import ipaddress
import re
from dataclasses import dataclass

from .errors import BadReference

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
