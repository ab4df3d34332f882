"""Push: a bundle to an OCI registry as an artifact (layout and annotations: loader/oci.py).

Blobs are uploaded with POST then PUT (monolithic) when they fit in one chunk, else with
PATCH requests of ``chunk_size`` bytes (``Content-Range: start-end``) and a final PUT
with the digest. A blob the registry already has is not sent again. Every retry follows
the one policy of ``loader/retry.py``:

- a request that failed transiently is sent again (``Client.request``);
- a chunk whose connection broke is not blindly resent: the upload's status (GET on its
  location) says how much the registry took, and the chunk resumes from there;
- an upload the registry lost or refused to commit starts over from a new POST, unless
  the blob turned up meanwhile (the failure came after the registry had committed it);
- a manifest PUT refused because the registry did not see a blob it references
  (``MANIFEST_BLOB_UNKNOWN``, with ``DIGEST_INVALID``) is retried after checking, and if
  need be re-uploading, the blobs. Concurrent pushes of the same blobs cause this in the
  CNCF distribution registry 2.x: every upload commit rewrites the repository's link file
  for the blob in place (truncate, then write), and a manifest PUT that reads the link in
  between finds it empty. Distribution 3 writes link files atomically.

The manifest is canonical JSON with no timestamps, so pushing the same bundle twice gives
the same manifest digest.
"""

from __future__ import annotations

import functools
import hashlib
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from loader import errors as loader_errors
from loader import manifest as mf
from loader import oci
from loader.format import FORMAT_VERSION, BundleFile, canonical_json
from loader.registry import Client, Reference, RegistryConfig
from loader.retry import Retryable
from loader.transport import FileSlice, Response

from .errors import BadBundle, UsageError
from .remote import Reporter, mapped_errors

DEFAULT_CHUNK = 16 * 1024 * 1024


@dataclass(frozen=True)
class PushResult:
    reference: str  # with the manifest digest: what to pin
    manifest_digest: str
    bundle_digest: str
    size: int
    requests: int  # upload requests for the bundle: 1 monolithic, chunks + 1 chunked, 0 present
    seconds: float


def artifact_annotations(m: mf.Manifest, digest: str) -> dict[str, str]:
    """The manifest annotations: the bundle's compatibility facts (keys in loader/oci.py)."""
    p = m.provenance
    archs = sorted({t.arch for t in m.targets})
    notes = {
        oci.FORMAT: str(FORMAT_VERSION),
        oci.NAME: m.name,
        oci.VERSION: m.version,
        oci.BUNDLE_DIGEST: digest,
        oci.TARGETS: ",".join(f"{t.name}:{t.arch}" for t in m.targets),
        oci.ARCHS: ",".join(archs),
        oci.KERNELS: ",".join(k.name for k in m.kernels),
        oci.TRITON: str(p.get("triton", "")),
        oci.AOTC: str(p.get("aotc", "")),
        oci.RECIPE: str(p.get("recipe_sha256", "")),
        "org.opencontainers.image.version": m.version,
        "org.opencontainers.image.description": (
            f"aotc bundle {m.name} {m.version} for {', '.join(archs)}"
        ),
    }
    return {k: v for k, v in notes.items() if v}


def artifact_manifest(m: mf.Manifest, digest: str, size: int, file_name: str) -> bytes:
    layer = {
        "mediaType": oci.LAYER_TYPE,
        "digest": digest,
        "size": size,
        "annotations": {oci.TITLE: file_name},
    }
    return canonical_json(
        {
            "schemaVersion": 2,
            "mediaType": oci.MANIFEST_TYPE,
            "artifactType": oci.ARTIFACT_TYPE,
            "config": oci.empty_descriptor(),
            "layers": [layer],
            "annotations": artifact_annotations(m, digest),
        }
    )


def push(
    path: Path,
    reference: str,
    config: RegistryConfig,
    *,
    chunk_size: int = DEFAULT_CHUNK,
    progress: bool = False,
) -> PushResult:
    """Push the bundle at ``path`` to ``reference`` (which needs a tag). ``progress``: a
    progress line for the upload and a note for each retry, on stderr."""
    start = time.monotonic()
    with mapped_errors():
        ref = Reference.parse(reference)
    if ref.tag is None:
        raise UsageError(f"{reference}: push needs a tag, e.g. {reference.split('@')[0]}:1.0")
    if chunk_size < 1:
        raise UsageError(f"--chunk-size {chunk_size}: must be a positive number of bytes")
    manifest, digest, size = _checked_bundle(path)
    body = artifact_manifest(manifest, digest, size, path.name)
    report = Reporter(progress)
    client = report.client(ref.registry, config)
    scope = f"repository:{ref.repository}:pull,push"
    with mapped_errors(), report.transfer(f"push {path.name}", size) as sent:
        upload_blob(client, ref.repository, oci.EMPTY_DATA, oci.EMPTY_DIGEST, scope, chunk_size)
        requests = upload_blob(client, ref.repository, path, digest, scope, chunk_size, size, sent)

        def blobs() -> None:
            upload_blob(client, ref.repository, oci.EMPTY_DATA, oci.EMPTY_DIGEST, scope, chunk_size)
            upload_blob(client, ref.repository, path, digest, scope, chunk_size, size, sent)

        put_manifest(client, ref, body, scope, blobs)
    mdigest = "sha256:" + hashlib.sha256(body).hexdigest()
    pinned = Reference(ref.registry, ref.repository, ref.tag, mdigest)
    return PushResult(str(pinned), mdigest, digest, size, requests, time.monotonic() - start)


# A manifest PUT refused with these codes names a blob the registry did not see: retried.
BLOB_NOT_SEEN = frozenset({"MANIFEST_BLOB_UNKNOWN", "BLOB_UNKNOWN", "DIGEST_INVALID"})


def put_manifest(
    client: Client, ref: Reference, body: bytes, scope: str, blobs: Callable[[], None]
) -> None:
    """PUT the manifest under ``ref.tag``; a refusal over a blob the registry did not see
    (see the module docstring) is retried after ``blobs()`` makes sure they are there."""

    def attempt(n: int) -> None:
        if n > 1:
            blobs()
        resp = client.request(
            "PUT",
            f"/v2/{ref.repository}/manifests/{ref.tag}",
            scope=scope,
            headers={"Content-Type": oci.MANIFEST_TYPE},
            body=body,
        )
        if resp.status == 201:
            return
        refused = f"{ref}: the registry refused the manifest: {resp.explain()}"
        if resp.status == 400 and resp.codes() & BLOB_NOT_SEEN:
            raise Retryable(refused)
        raise loader_errors.RegistryError(refused)

    client.retry(attempt)


def _checked_bundle(path: Path) -> tuple[mf.Manifest, str, int]:
    """The bundle's manifest, digest and size, after a full verify; partial bundles refused."""
    try:
        with BundleFile(path) as bf:
            manifest = mf.Manifest.from_json(bf.manifest)
            bf.verify()
    except loader_errors.BundleError as exc:
        raise BadBundle(f"{path}: {exc}" if str(path) not in str(exc) else str(exc)) from None
    if manifest.shard is not None:
        raise UsageError(
            f"{path}: a partial bundle ({mf.describe_shard(manifest.shard)}); merge the parts "
            "with `aotc merge` and push the result"
        )
    h = hashlib.sha256()
    with path.open("rb") as f:
        while chunk := f.read(1 << 20):
            h.update(chunk)
    return manifest, "sha256:" + h.hexdigest(), path.stat().st_size


class UploadLost(loader_errors.RegistryError):
    """The registry no longer knows an upload: it must start again from a new POST."""


def upload_blob(
    client: Client,
    repository: str,
    source: bytes | Path,
    digest: str,
    scope: str,
    chunk_size: int,
    size: int | None = None,
    sent: Callable[[int], None] | None = None,
) -> int:
    """Upload one blob unless the registry has it. Returns the upload requests it took.
    ``sent`` hears the bytes of ``source`` sent so far."""
    size = len(source) if isinstance(source, bytes) else (size or source.stat().st_size)
    if client.blob_exists(repository, digest, scope):
        return 0

    def attempt(n: int) -> int:
        if n > 1 and client.blob_exists(repository, digest, scope):
            return 1  # the last failure came after the registry had committed the blob
        upload = _Upload(client, repository, source, digest, scope, size, sent)
        try:
            return upload.run(chunk_size)
        except UploadLost as exc:
            raise Retryable(str(exc)) from None

    return client.retry(attempt)


def _location(client: Client, resp: Response) -> str:
    loc = resp.header("Location")
    if not loc:
        raise loader_errors.RegistryError(f"{client.where()}: upload response without a Location")
    return client.url(loc)


def _with_digest(location: str, digest: str) -> str:
    return location + ("&" if "?" in location else "?") + f"digest={digest}"


def _received(resp: Response, default: int) -> int:
    """Bytes the registry holds, from a ``Range: 0-<last>`` header."""
    text = resp.header("Range") or ""
    try:
        last = int(text.rsplit("-", 1)[1])
    except (IndexError, ValueError):
        return default
    return last + 1 if last > 0 else 0  # distribution writes "0-0" for an empty upload


# A commit refused with these (or 404) means the upload's bytes or state were lost.
_UPLOAD_LOST = frozenset({"BLOB_UPLOAD_UNKNOWN", "BLOB_UPLOAD_INVALID", "DIGEST_INVALID"})


class _Upload:
    """One upload session: POST, then one PUT or PATCH chunks and a PUT."""

    def __init__(
        self,
        client: Client,
        repository: str,
        source: bytes | Path,
        digest: str,
        scope: str,
        size: int,
        sent: Callable[[int], None] | None,
    ):
        self.client = client
        self.repository = repository
        self.source = source
        self.digest = digest
        self.scope = scope
        self.size = size
        self.sent = sent
        self.loc = ""

    def body(self, offset: int, length: int) -> bytes | FileSlice:
        if isinstance(self.source, bytes):
            return self.source[offset : offset + length]
        return FileSlice(self.source, offset, length, self.sent)

    def run(self, chunk_size: int) -> int:
        """Upload the blob; returns the requests it took after the POST."""
        client = self.client
        resp = client.request("POST", f"/v2/{self.repository}/blobs/uploads/", scope=self.scope)
        if resp.status != 202:
            raise loader_errors.RegistryError(
                f"{client.where()}: cannot start an upload: {resp.explain()}"
            )
        self.loc = _location(client, resp)
        chunk = max(chunk_size, _int(resp.header("OCI-Chunk-Min-Length")))
        if self.size <= chunk:
            self.commit(self.body(0, self.size))
            return 1
        offset, requests = 0, 0
        while offset < self.size:
            n = min(chunk, self.size - offset)
            offset = client.retry(functools.partial(self.patch, offset, n))
            requests += 1
        self.commit(b"")
        return requests + 1

    def patch(self, offset: int, n: int, attempt: int) -> int:
        """Send the chunk at ``offset`` (after a failure, from where the registry stands);
        returns the offset the registry reached."""
        if attempt > 1:
            offset = self.status()
            if offset >= self.size:
                return offset
            n = min(n, self.size - offset)
        headers = {"Content-Type": "application/octet-stream"}
        headers["Content-Range"] = f"{offset}-{offset + n - 1}"
        body = self.body(offset, n)
        # Not resent blindly: the registry may have taken part of it (see ``status``).
        resp = self.client.request(
            "PATCH", self.loc, scope=self.scope, headers=headers, body=body, retry=False
        )
        if resp.status == 202:
            self.loc = _location(self.client, resp)
            return _received(resp, offset + n)
        what = f"{self.client.where()}: chunk {offset}-{offset + n - 1} of {self.digest}"
        if resp.status == 404 or resp.codes() & {"BLOB_UPLOAD_UNKNOWN"}:
            raise UploadLost(f"{what}: the upload was lost: {resp.explain()}")
        if resp.status == 416 or resp.status >= 500:
            raise Retryable(f"{what}: {resp.explain()}")
        raise loader_errors.RegistryError(f"{what}: {resp.explain()}")

    def status(self) -> int:
        """Where the upload stands: the bytes the registry holds (GET on its location)."""
        resp = self.client.request("GET", self.loc, scope=self.scope)
        if resp.status != 204:
            raise UploadLost(
                f"{self.client.where()}: upload of {self.digest} lost: {resp.explain()}"
            )
        self.loc = _location(self.client, resp)
        return _received(resp, 0)

    def commit(self, body: bytes | FileSlice) -> None:
        headers = {"Content-Type": "application/octet-stream"}
        url = _with_digest(self.loc, self.digest)
        resp = self.client.request("PUT", url, scope=self.scope, headers=headers, body=body)
        if resp.status == 201:
            return
        what = f"{self.client.where()}: upload of {self.digest}: {resp.explain()}"
        if resp.status == 404 or resp.codes() & _UPLOAD_LOST:
            raise UploadLost(what)
        raise loader_errors.RegistryError(what)


def _int(text: str | None) -> int:
    try:
        return max(0, int(text or 0))
    except ValueError:
        return 0
