"""What push, pull and ``aotc inspect oci://`` share: the loader's errors mapped to aotc's
exit codes (in one table), the progress line and retry notes of a transfer, and the remote
summary read from a manifest alone."""

from __future__ import annotations

import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import TextIO

from loader import errors as loader_errors
from loader import oci
from loader.registry import Client, Reference, RegistryConfig
from loader.transport import printable

from .errors import AotcError, AuthError, BadBundle, RegistryError, UsageError
from .progress import Progress

# The loader keeps its own public error types (loader.errors); aotc's carry exit codes
# (aot.errors). This table is the only place one becomes the other. Subclasses come first.
EXIT_CODES: tuple[tuple[type[loader_errors.LoaderError], type[AotcError]], ...] = (
    (loader_errors.BadReference, UsageError),  # 2
    (loader_errors.BundleError, BadBundle),  # 3
    (loader_errors.RegistryAuthError, AuthError),  # 5
    (loader_errors.RegistryError, RegistryError),  # 4
)
PROGRESS_MIN = 1 << 20  # transfers smaller than this finish before a progress line helps


@contextmanager
def mapped_errors() -> Iterator[None]:
    """Loader errors as aotc errors, by EXIT_CODES; anything else passes through."""
    try:
        yield
    except loader_errors.LoaderError as exc:
        for loader_type, aotc_type in EXIT_CODES:
            if isinstance(exc, loader_type):
                raise aotc_type(str(exc)) from None
        raise


class Reporter:
    """A transfer's progress line (bytes, on stderr) and the registry client's retry notes;
    silent unless ``enabled`` (the CLI passes its progress setting)."""

    def __init__(self, enabled: bool, stream: TextIO | None = None):
        self.enabled = enabled
        self.stream = stream or sys.stderr

    def note(self, text: str) -> None:
        if self.enabled:
            self.stream.write(f"aotc: {text}\n")
            self.stream.flush()

    def client(self, registry: str, config: RegistryConfig) -> Client:
        return Client(registry, config, note=self.note if self.enabled else None)

    @contextmanager
    def transfer(self, label: str, size: int) -> Iterator[Callable[[int], None] | None]:
        """A callback for the bytes done so far, drawing the line from its first call (a
        blob the registry already has draws none); None when off or small."""
        if not self.enabled or size < PROGRESS_MIN:
            yield None
            return
        bars: list[Progress] = []

        def update(done: int) -> None:
            if not bars:
                bars.append(Progress(size, label, stream=self.stream, unit="B"))
            bars[0].update(done)

        try:
            yield update
        finally:
            for bar in bars:
                bar.close()


def describe(reference: str, config: RegistryConfig) -> str:
    """``aotc inspect oci://...``: the artifact's facts from one manifest GET, no download."""
    with mapped_errors():
        ref = Reference.parse(reference)
        art = oci.resolve(ref, Client(ref.registry, config))
    # Titles and annotations are the registry's words: escape what a terminal would obey.
    notes = {printable(k, 100): printable(v, 500) for k, v in art.annotations.items()}
    title = printable(art.title, 200) if art.title else "untitled"
    out = [
        f"{ref}",
        f"  manifest {art.manifest_digest}",
        f"  bundle   {art.layer_digest} ({art.size / 1024:.1f} KiB, {title})",
    ]
    width = max((len(k) for k in notes), default=0)
    out += [f"  {k.ljust(width)}  {v}" for k, v in sorted(notes.items())]
    return "\n".join(out) + "\n"
