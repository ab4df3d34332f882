"""Push: a bundle to an OCI registry as an artifact (layout and annotations: loader/oci.py).

Blobs are uploaded with POST then PUT (monolithic) when they fit in one chunk, else with
PATCH requests of ``chunk_size`` bytes (``Content-Range: start-end``) and a final PUT
with the digest. A blob the registry already has is not sent again. Transient failures
are retried with backoff (``loader/registry.py``); a chunk whose connection broke is not
blindly resent: the upload's status (GET on its location) says how much the registry
took, and the upload resumes from there, or starts over if the registry lost it.

The manifest is canonical JSON with no timestamps, so pushing the same bundle twice gives
the same manifest digest.
"""

from __future__ import annotations

import hashlib
import time
from dataclasses import dataclass
from pathlib import Path

from loader import manifest as mf
from loader import oci
from loader.errors import BundleError, RegistryAuthError
from loader.errors import RegistryError as LoaderRegistryError
from loader.format import FORMAT_VERSION, BundleFile, canonical_json
from loader.registry import Client, FileSlice, Reference, RegistryConfig, Response, Transient

from .errors import BadBundle, RegistryError, UsageError
from .registry import mapped_errors

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
    path: Path, reference: str, config: RegistryConfig, *, chunk_size: int = DEFAULT_CHUNK
) -> PushResult:
    start = time.monotonic()
    with mapped_errors():
        ref = Reference.parse(reference)
    if ref.tag is None:
        raise UsageError(f"{reference}: push needs a tag, e.g. {reference.split('@')[0]}:1.0")
    if chunk_size < 1:
        raise UsageError(f"--chunk-size {chunk_size}: must be a positive number of bytes")
    manifest, digest, size = _checked_bundle(path)
    body = artifact_manifest(manifest, digest, size, path.name)
    client = Client(ref.registry, config)
    scope = f"repository:{ref.repository}:pull,push"
    with mapped_errors():
        upload_blob(client, ref.repository, oci.EMPTY_DATA, oci.EMPTY_DIGEST, scope, chunk_size)
        requests = upload_blob(client, ref.repository, path, digest, scope, chunk_size, size)
        resp = client.request(
            "PUT",
            f"/v2/{ref.repository}/manifests/{ref.tag}",
            scope=scope,
            headers={"Content-Type": oci.MANIFEST_TYPE},
            body=body,
        )
        if resp.status != 201:
            raise RegistryError(f"{ref}: the registry refused the manifest: {resp.explain()}")
    mdigest = "sha256:" + hashlib.sha256(body).hexdigest()
    pinned = Reference(ref.registry, ref.repository, ref.tag, mdigest)
    return PushResult(str(pinned), mdigest, digest, size, requests, time.monotonic() - start)


def _checked_bundle(path: Path) -> tuple[mf.Manifest, str, int]:
    """The bundle's manifest, digest and size, after a full verify; partial bundles refused."""
    try:
        with BundleFile(path) as bf:
            manifest = mf.Manifest.from_json(bf.manifest)
            bf.verify()
    except BundleError as exc:
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


def upload_blob(
    client: Client,
    repository: str,
    source: bytes | Path,
    digest: str,
    scope: str,
    chunk_size: int,
    size: int | None = None,
) -> int:
    """Upload one blob unless the registry has it. Returns the upload requests it took."""
    size = len(source) if isinstance(source, bytes) else (size or source.stat().st_size)
    if client.blob_exists(repository, digest, scope):
        return 0
    last: Exception | None = None
    for attempt in range(1, client.config.attempts + 1):
        try:
            return _upload_once(client, repository, source, digest, scope, chunk_size, size)
        except RegistryAuthError:
            raise
        except LoaderRegistryError as exc:
            last = exc
        if client.blob_exists(repository, digest, scope):
            return 1  # the failure came after the registry had committed it
        if attempt < client.config.attempts:
            client.backoff(attempt)
    raise RegistryError(
        f"{client.where()}: upload of {digest} failed {client.config.attempts} times; "
        f"last error: {last}"
    )


def _body(source: bytes | Path, offset: int, length: int) -> bytes | FileSlice:
    if isinstance(source, bytes):
        return source[offset : offset + length]
    return FileSlice(source, offset, length)


def _location(client: Client, resp: Response) -> str:
    loc = resp.header("Location")
    if not loc:
        raise LoaderRegistryError(f"{client.where()}: upload response without a Location")
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


def _upload_once(
    client: Client,
    repository: str,
    source: bytes | Path,
    digest: str,
    scope: str,
    chunk_size: int,
    size: int,
) -> int:
    octets = {"Content-Type": "application/octet-stream"}
    resp = client.request("POST", f"/v2/{repository}/blobs/uploads/", scope=scope)
    if resp.status != 202:
        raise LoaderRegistryError(f"{client.where()}: cannot start an upload: {resp.explain()}")
    loc = _location(client, resp)
    chunk = max(chunk_size, int(resp.header("OCI-Chunk-Min-Length") or 0))
    if size <= chunk:
        resp = client.request(
            "PUT",
            _with_digest(loc, digest),
            scope=scope,
            headers=octets,
            body=_body(source, 0, size),
        )
        if resp.status != 201:
            raise LoaderRegistryError(f"{client.where()}: upload of {digest}: {resp.explain()}")
        return 1
    offset, requests, recoveries = 0, 0, 0
    while offset < size:
        n = min(chunk, size - offset)
        headers = {**octets, "Content-Range": f"{offset}-{offset + n - 1}"}
        problem = ""
        try:
            resp = client.request(
                "PATCH",
                loc,
                scope=scope,
                headers=headers,
                body=_body(source, offset, n),
                retry_connection=False,
            )
            if resp.status == 202:
                loc = _location(client, resp)
                offset = _received(resp, offset + n)
                requests += 1
                continue
            if resp.status != 416 and resp.status < 500:
                raise LoaderRegistryError(
                    f"{client.where()}: chunk {offset}-{offset + n - 1} of {digest}: "
                    f"{resp.explain()}"
                )
            problem = resp.explain()
        except Transient as exc:
            problem = str(exc)
        # The registry may have taken part of the chunk: ask where the upload stands.
        recoveries += 1
        if recoveries > client.config.attempts:
            raise LoaderRegistryError(f"{client.where()}: chunked upload stalled: {problem}")
        client.backoff(recoveries)
        status = client.request("GET", loc, scope=scope)
        if status.status != 204:
            raise LoaderRegistryError(
                f"{client.where()}: upload lost after {problem}: {status.explain()}"
            )
        loc = _location(client, status)
        offset = _received(status, 0)
    resp = client.request("PUT", _with_digest(loc, digest), scope=scope, headers=octets, body=b"")
    if resp.status != 201:
        raise LoaderRegistryError(f"{client.where()}: finishing {digest}: {resp.explain()}")
    return requests + 1
