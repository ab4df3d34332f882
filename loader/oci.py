"""aotc bundles as OCI artifacts: the artifact's layout, pulling one, and the local cache.

An aotc bundle in a registry is an OCI image manifest (image-spec 1.1, as ORAS writes
artifacts)::

    mediaType     application/vnd.oci.image.manifest.v1+json
    artifactType  application/vnd.aotc.bundle.v1
    config        the empty descriptor: application/vnd.oci.empty.v1+json, "{}"
    layers        one: application/vnd.aotc.bundle.layer.v1, the .aotc file as is, with
                  org.opencontainers.image.title = its file name (so `oras pull` writes it)
    annotations   the bundle's compatibility facts (ANNOTATIONS below), readable with one
                  manifest GET, before downloading anything

``loader.open("oci://HOST/REPO:TAG")`` pulls the bundle once into a content-addressed
cache, then opens it from there (:func:`locate`). Cache layout, under
``$AOTC_BUNDLE_CACHE`` (default ``~/.cache/aotc/bundles``)::

    sha256/<hex>                   bundle files, named by their sha256 (verified)
    manifests/sha256/<hex>         OCI manifests, named by their digest
    refs/<registry>/<repo>/<tag>   the manifest digest a tag resolved to
    locks/<hex>.lock               flock()ed while a bundle is downloaded

A tag is resolved once and remembered: later opens of the same reference read only the
cache and never touch the network (pass ``refresh=True`` to resolve a moving tag again,
or pin a digest). Downloads go to a temporary file beside their final name and are
renamed into place after the digest and :meth:`BundleFile.verify` pass, under a per-bundle
lock, so processes that pull at once download once and never see a partial file.
"""

from __future__ import annotations

import base64
import errno
import hashlib
import json
import os
import shutil
import tempfile
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .download import download
from .errors import BundleError, RegistryError
from .format import FORMAT_VERSION, BundleFile, write_atomic
from .reference import SCHEME, Reference, check_digest
from .registry import Client, RegistryConfig

ARTIFACT_TYPE = "application/vnd.aotc.bundle.v1"
LAYER_TYPE = "application/vnd.aotc.bundle.layer.v1"
MANIFEST_TYPE = "application/vnd.oci.image.manifest.v1+json"
EMPTY_TYPE = "application/vnd.oci.empty.v1+json"
EMPTY_DATA = b"{}"
EMPTY_DIGEST = "sha256:" + hashlib.sha256(EMPTY_DATA).hexdigest()
TITLE = "org.opencontainers.image.title"

# Manifest annotations (all strings). A service can read them with one manifest GET and
# decide whether the bundle suits it before downloading it.
FORMAT = "dev.aotc.format.version"  # bundle container version ("1"); see loader/format.py
NAME = "dev.aotc.bundle.name"
VERSION = "dev.aotc.bundle.version"
BUNDLE_DIGEST = "dev.aotc.bundle.digest"  # "sha256:<hex>" of the .aotc file (= the layer)
TARGETS = "dev.aotc.targets"  # "A100:sm_80,H100:sm_90": target names and their archs
ARCHS = "dev.aotc.archs"  # "sm_80,sm_90": the distinct archs, sorted
KERNELS = "dev.aotc.kernels"  # "matmul,rmsnorm"
TRITON = "dev.aotc.triton.version"
AOTC = "dev.aotc.aotc.version"  # the aotc that built the bundle
RECIPE = "dev.aotc.recipe.sha256"
ANNOTATIONS = (FORMAT, NAME, VERSION, BUNDLE_DIGEST, TARGETS, ARCHS, KERNELS, TRITON, AOTC, RECIPE)


@dataclass(frozen=True)
class Artifact:
    """What an OCI manifest says about an aotc bundle (validated)."""

    manifest_digest: str
    layer_digest: str
    size: int
    title: str | None
    annotations: Mapping[str, str]

    @staticmethod
    def parse(body: bytes, digest: str, where: str) -> Artifact:
        try:
            doc = json.loads(body)
        except (ValueError, RecursionError):
            raise RegistryError(f"{where}: the manifest is not JSON") from None
        if not isinstance(doc, dict):
            raise RegistryError(f"{where}: the manifest is not a JSON object")
        media = doc.get("mediaType")
        if media != MANIFEST_TYPE:
            raise RegistryError(
                f"{where}: not an aotc bundle: the manifest is {media or 'untyped'}, "
                f"not an OCI image manifest with artifactType {ARTIFACT_TYPE}"
            )
        config = doc.get("config")
        config = config if isinstance(config, dict) else {}
        kind = doc.get("artifactType") or config.get("mediaType")  # ORAS before 1.1: config
        if kind != ARTIFACT_TYPE:
            raise RegistryError(
                f"{where}: not an aotc bundle: artifact type {kind!r}, expected {ARTIFACT_TYPE}"
            )
        layers = [
            x
            for x in doc.get("layers") or []
            if isinstance(x, dict) and x.get("mediaType") == LAYER_TYPE
        ]
        if len(layers) != 1:
            raise RegistryError(
                f"{where}: expected one layer of type {LAYER_TYPE}, found {len(layers)}"
            )
        layer = layers[0]
        layer_digest = layer.get("digest")
        size = layer.get("size")
        if not isinstance(layer_digest, str) or type(size) is not int or size < 0:
            raise RegistryError(f"{where}: the bundle layer has no valid digest and size")
        try:
            check_digest(layer_digest, f"{where}: layer")
        except ValueError as exc:
            raise RegistryError(str(exc)) from None
        notes = doc.get("annotations") or {}
        layer_notes = layer.get("annotations") or {}
        title = layer_notes.get(TITLE) if isinstance(layer_notes, dict) else None
        return Artifact(
            manifest_digest=digest,
            layer_digest=layer_digest,
            size=size,
            title=title if isinstance(title, str) else None,
            annotations={k: v for k, v in notes.items() if isinstance(v, str)}
            if isinstance(notes, dict)
            else {},
        )

    def check_format(self, where: str) -> None:
        """Refuse, before downloading, a bundle format this loader cannot read."""
        declared = self.annotations.get(FORMAT)
        if declared is not None and declared != str(FORMAT_VERSION):
            raise BundleError(
                f"{where}: bundle format version {declared}; this loader reads version "
                f"{FORMAT_VERSION}. Upgrade aotc, or pull a bundle built for it."
            )


def empty_descriptor() -> dict[str, Any]:
    return {
        "mediaType": EMPTY_TYPE,
        "digest": EMPTY_DIGEST,
        "size": len(EMPTY_DATA),
        "data": base64.b64encode(EMPTY_DATA).decode(),
    }


def resolve(ref: Reference, client: Client) -> Artifact:
    """One manifest GET: the artifact's layer and annotations, nothing downloaded."""
    body, _media, digest = client.get_manifest(ref)
    return Artifact.parse(body, digest, str(ref))


def download_verified(
    client: Client,
    ref: Reference,
    art: Artifact,
    dest: Path,
    progress: Callable[[int], None] | None = None,
) -> None:
    """Download the bundle to ``dest`` atomically: written to a temporary file beside it,
    checked (sha256 = the layer's digest, size, then every entry of the bundle), renamed.
    On any failure nothing is left at ``dest`` (an existing file there is kept). A folder
    without room for the bundle raises ENOSPC before anything is downloaded."""
    dest.parent.mkdir(parents=True, exist_ok=True)
    free = shutil.disk_usage(dest.parent).free
    if art.size > free:
        raise OSError(
            errno.ENOSPC, f"the bundle is {art.size} bytes and {free} are free", str(dest.parent)
        )
    # A short fixed name: the destination's own may be near the file-name limit already.
    fd, tmp = tempfile.mkstemp(prefix=".aotc-", suffix=".part", dir=dest.parent)
    try:
        with os.fdopen(fd, "w+b") as f:
            got = download(client, ref.repository, art.layer_digest, art.size, f, progress)
            size = f.tell()
            f.flush()
            os.fsync(f.fileno())
        if got != art.layer_digest or size != art.size:
            raise BundleError(
                f"{ref}: download corrupted: got {size} bytes with digest {got}, the manifest "
                f"says {art.size} bytes with digest {art.layer_digest}; nothing was written"
            )
        try:
            with BundleFile(tmp) as bf:
                bf.verify()
        except BundleError as exc:
            raise BundleError(f"{ref}: the pulled bundle is damaged: {exc}") from None
        os.chmod(tmp, 0o644)
        os.replace(tmp, dest)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def default_cache(environ: Mapping[str, str]) -> Path:
    explicit = environ.get("AOTC_BUNDLE_CACHE")
    if explicit:
        return Path(explicit)
    base = environ.get("XDG_CACHE_HOME") or str(Path(environ.get("HOME") or Path.home()) / ".cache")
    return Path(base) / "aotc" / "bundles"


class Cache:
    """The content-addressed bundle cache described in the module docstring."""

    def __init__(self, root: Path):
        self.root = root

    def bundle(self, digest: str) -> Path:
        return self.root / "sha256" / digest.removeprefix("sha256:")

    def _manifest(self, digest: str) -> Path:
        return self.root / "manifests" / "sha256" / digest.removeprefix("sha256:")

    def _ref(self, ref: Reference) -> Path:
        assert ref.tag is not None
        return self.root / "refs" / ref.registry / ref.repository / ref.tag

    def lookup(self, ref: Reference) -> Artifact | None:
        """The artifact ``ref`` resolved to before, from the cache alone (no network)."""
        digest = ref.digest
        if digest is None:
            try:
                digest = self._ref(ref).read_text().strip()
            except OSError:
                return None
        try:
            body = self._manifest(digest).read_bytes()
        except OSError:
            return None
        if "sha256:" + hashlib.sha256(body).hexdigest() != digest:
            return None  # a damaged cache entry is a miss
        try:
            return Artifact.parse(body, digest, str(ref))
        except RegistryError:
            return None

    def remember(self, ref: Reference, art: Artifact, body: bytes) -> None:
        write_atomic(self._manifest(art.manifest_digest), body)
        if ref.tag is not None:
            write_atomic(self._ref(ref), art.manifest_digest.encode())

    @contextmanager
    def lock(self, digest: str) -> Iterator[None]:
        import fcntl  # Unix only, like the CUDA driver this loader binds

        path = self.root / "locks" / f"{digest.removeprefix('sha256:')}.lock"
        path.parent.mkdir(parents=True, exist_ok=True)
        with path.open("a") as f:
            fcntl.flock(f.fileno(), fcntl.LOCK_EX)
            try:
                yield
            finally:
                fcntl.flock(f.fileno(), fcntl.LOCK_UN)


def fetch(
    reference: str,
    *,
    digest: str | None = None,
    cache_dir: str | os.PathLike[str] | None = None,
    config: RegistryConfig | None = None,
    refresh: bool = False,
    progress: Callable[[int, int], None] | None = None,
) -> Path:
    """The cached path of the bundle at ``reference``, pulling it first if needed.

    ``digest`` (``sha256:<hex>`` of the .aotc file) pins the exact bundle: a cached copy is
    used without any lookup, and a registry that serves anything else raises BundleError.
    The loader prints nothing: ``progress(done, total)`` hears the bytes of a download.
    """
    ref = Reference.parse(reference)
    pin = check_digest(digest, "digest=") if digest is not None else None
    cache = Cache(Path(cache_dir) if cache_dir is not None else default_cache(os.environ))
    if pin is not None and cache.bundle(pin).is_file():
        return cache.bundle(pin)
    known = None if refresh else cache.lookup(ref)
    if known is not None and (pin is None or known.layer_digest == pin):
        path = cache.bundle(known.layer_digest)
        if path.is_file():
            return path
    client = Client(ref.registry, config or RegistryConfig.from_environ(os.environ))
    body, _media, mdigest = client.get_manifest(ref)
    art = Artifact.parse(body, mdigest, str(ref))
    art.check_format(str(ref))
    if pin is not None and art.layer_digest != pin:
        raise BundleError(
            f"{ref}: pinned digest mismatch: expected bundle {pin}, the registry has "
            f"{art.layer_digest} (manifest {art.manifest_digest}); nothing was downloaded. "
            "Pin the new digest if the change is intended."
        )
    path = cache.bundle(art.layer_digest)
    try:
        with cache.lock(art.layer_digest):
            if not path.is_file():
                report = None if progress is None else (lambda n: progress(n, art.size))
                download_verified(client, ref, art, path, report)
        cache.remember(ref, art, body)
    except OSError as exc:
        raise BundleError(
            f"{ref}: cannot write the bundle cache {cache.root} ({exc}); pass cache_dir= or "
            "set AOTC_BUNDLE_CACHE to a writable folder"
        ) from None
    return path


def locate(
    path: str | os.PathLike[str],
    *,
    digest: str | None = None,
    cache_dir: str | os.PathLike[str] | None = None,
) -> Path:
    """``loader.open``'s hook: a local path for ``path``, which may be an oci:// reference;
    with ``digest``, the file's sha256 must match it."""
    if isinstance(path, str) and path.startswith(SCHEME):
        return fetch(path, digest=digest, cache_dir=cache_dir)
    local = Path(path)
    if digest is not None:
        check_digest(digest, "digest=")
        h = hashlib.sha256()
        try:
            with local.open("rb") as f:
                while chunk := f.read(1 << 20):
                    h.update(chunk)
        except OSError as exc:
            raise BundleError(f"{local}: cannot read the bundle ({exc})") from None
        if "sha256:" + h.hexdigest() != digest:
            raise BundleError(
                f"{local}: pinned digest mismatch: expected {digest}, the file is "
                f"sha256:{h.hexdigest()}"
            )
    return local
