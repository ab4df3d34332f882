"""Downloading one blob: checked against the size the manifest promised, resumed with a
``Range`` request when a connection drops mid-transfer (from the start again where the
registry answers 200), under the one retry policy (``loader/retry.py``).

``http.client`` ends a body cut short without raising, so a download is complete only
when it reached the manifest's size; one that stops early is retried, and reported as a
registry error (never as a damaged bundle) once the attempts are spent.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Callable
from typing import TYPE_CHECKING, BinaryIO

from .errors import RegistryError
from .retry import Retryable
from .transport import IO_CHUNK, Response

if TYPE_CHECKING:
    from .registry import Client


class _BlobSink:
    """Where a blob's bytes go: ``out`` from its position at the start, and their hash, kept
    across attempts so that a ranged resume appends to what arrived before."""

    def __init__(self, out: BinaryIO, progress: Callable[[int], None] | None):
        self.out = out
        self.start = out.tell()
        self.progress = progress
        self.restart()

    def restart(self) -> None:
        self.out.seek(self.start)
        self.out.truncate()
        self.hash = hashlib.sha256()
        self.got = 0
        if self.progress is not None:
            self.progress(0)

    def write(self, data: bytes) -> None:
        self.out.write(data)
        self.hash.update(data)
        self.got += len(data)
        if self.progress is not None:
            self.progress(self.got)


def _range_start(content_range: str | None) -> int | None:
    """The first byte of ``Content-Range: bytes START-END/TOTAL``."""
    m = re.fullmatch(r"\s*bytes\s+(\d{1,20})-\d{1,20}/(?:\d{1,20}|\*)\s*", content_range or "")
    return int(m.group(1)) if m else None


def download(
    client: Client,
    repository: str,
    digest: str,
    size: int,
    out: BinaryIO,
    progress: Callable[[int], None] | None = None,
) -> str:
    """Write blob ``digest`` (``size`` bytes, from the manifest) to ``out`` from its current
    position; returns the ``sha256:`` digest of what was written (the caller compares).
    Bytes beyond ``size`` are refused. ``progress`` hears the bytes written so far."""
    sink = _BlobSink(out, progress)
    path = f"/v2/{repository}/blobs/{digest}"
    scope = f"repository:{repository}:pull"
    client.retry(lambda _n: _download_once(client, path, scope, digest, size, sink))
    return "sha256:" + sink.hash.hexdigest()


def _download_once(
    client: Client, path: str, scope: str, digest: str, size: int, sink: _BlobSink
) -> None:
    headers = {"Range": f"bytes={sink.got}-"} if sink.got else {}
    resp = client.exchange("GET", path, scope=scope, headers=headers, stream=True)
    try:
        _take_answer(client, resp, digest, sink)
        if resp.promised is not None and sink.got + resp.promised > size:
            raise RegistryError(
                f"{client.where()}: blob {digest} is announced as {sink.got + resp.promised} "
                f"bytes, the manifest says {size}; refusing it"
            )
        while True:
            with resp.reading():  # only the network's failures are retried, not the disk's
                data = resp.raw.read(IO_CHUNK)
            if not data:
                break
            if sink.got + len(data) > size:
                raise RegistryError(
                    f"{client.where()}: blob {digest} is larger than its {size} bytes; refusing it"
                )
            sink.write(data)
    finally:
        resp.close()
    if sink.got < size:
        raise Retryable(
            f"{client.where()}: the download of blob {digest} stopped after {sink.got} of "
            f"{size} bytes"
        )


def _take_answer(client: Client, resp: Response, digest: str, sink: _BlobSink) -> None:
    """Accept a 200 (from the start) or a 206 that resumes where ``sink`` stopped."""
    if resp.status == 200:
        if sink.got:
            sink.restart()  # the registry ignored the Range header: start over
        return
    if resp.status == 206 and _range_start(resp.header("Content-Range")) == sink.got:
        return
    if resp.status in (206, 416):
        at = sink.got
        sink.restart()
        raise Retryable(
            f"{client.where()}: blob {digest}: the registry could not resume at byte {at} "
            f"(HTTP {resp.status}); starting over"
        )
    resp.discard()
    raise RegistryError(f"{client.where()}: blob {digest}: {resp.explain()}")
