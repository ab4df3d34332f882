"""Pull: an aotc bundle from an OCI registry to a file, verified before it appears there.

The manifest is read first (artifact type, bundle format version, layer digest and size);
the bundle goes to a temporary file beside the output, is checked (sha256 equals the
layer's digest, then ``BundleFile.verify()``), and only then renamed to the output path.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path

from loader import oci
from loader.registry import Client, Reference, RegistryConfig

from .errors import RegistryError
from .registry import mapped_errors


@dataclass(frozen=True)
class PullResult:
    path: Path
    reference: str  # with the manifest digest
    bundle_digest: str
    size: int
    seconds: float


def pull(reference: str, output: Path | None, config: RegistryConfig, cwd: Path) -> PullResult:
    """Write the bundle at ``reference`` to ``output`` (default: its file name, in ``cwd``)."""
    start = time.monotonic()
    with mapped_errors():
        ref = Reference.parse(reference)
        client = Client(ref.registry, config)
        art = oci.resolve(ref, client)
        art.check_format(str(ref))
        dest = output if output is not None else cwd
        if dest.is_dir():
            dest = dest / _file_name(art, ref)
        oci.download_verified(client, ref, art, dest)
    pinned = Reference(ref.registry, ref.repository, ref.tag, art.manifest_digest)
    return PullResult(dest, str(pinned), art.layer_digest, art.size, time.monotonic() - start)


def _file_name(art: oci.Artifact, ref: Reference) -> str:
    """The layer's title, if it is a plain file name (never a path); else repo-tag.aotc."""
    title = art.title or ""
    if title and "/" not in title and "\\" not in title and title not in (".", ".."):
        return title
    if title:
        raise RegistryError(
            f"{ref}: the layer's title {title!r} is not a plain file name; pass -o PATH"
        )
    tag = ref.tag or art.layer_digest.removeprefix("sha256:")[:12]
    return f"{ref.repository.rsplit('/', 1)[-1]}-{tag}.aotc"
