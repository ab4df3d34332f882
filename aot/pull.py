"""Pull: an aotc bundle from an OCI registry to a file, verified before it appears there.

The manifest is read first (artifact type, bundle format version, layer digest and size);
the bundle goes to a temporary file beside the output, is checked (sha256 equals the
layer's digest, then ``BundleFile.verify()``), and only then renamed to the output path.

``-o`` names a file, or a folder when it ends with ``/`` or is one already. Missing
folders are created, as ``oras pull -o`` does: the write is atomic and verified, so a
new folder never holds a partial bundle, and one created for a pull that fails is
removed again. Without ``-o``, or with a folder, the file is named by the layer's title
(``org.opencontainers.image.title``), which the registry controls: it is used only when
it is a plain, printable ``*.aotc`` file name that is not hidden and fits the file
system, so a registry can neither write outside the folder nor replace a file such as
``.bashrc`` or ``Makefile`` there. Any other title is refused; ``-o FILE`` names the
output instead.
"""

from __future__ import annotations

import os
import time
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from dataclasses import dataclass
from pathlib import Path

from loader import oci
from loader.registry import Reference, RegistryConfig

from .errors import RegistryError, UsageError
from .remote import Reporter, mapped_errors

MAX_TITLE = 200  # bytes: under the usual 255-byte file-name limit, with room to spare


@dataclass(frozen=True)
class PullResult:
    path: Path
    reference: str  # with the manifest digest
    bundle_digest: str
    size: int
    seconds: float


def pull(
    reference: str,
    output: str | os.PathLike[str] | None,
    config: RegistryConfig,
    cwd: Path,
    *,
    progress: bool = False,
) -> PullResult:
    """Write the bundle at ``reference`` to ``output`` (default: its file name, in ``cwd``).
    ``output`` as a string keeps a trailing ``/`` (a folder, created if missing).
    ``progress``: a progress line for the download and a note for each retry, on stderr."""
    start = time.monotonic()
    report = Reporter(progress)
    with mapped_errors():
        ref = Reference.parse(reference)
        client = report.client(ref.registry, config)
        art = oci.resolve(ref, client)
        art.check_format(str(ref))
        folder, dest = _destination(output, cwd)
        if dest is None:
            dest = folder / _file_name(art, ref)
        shown = os.fspath(output) if output is not None else str(dest)
        with _writing(folder, shown), report.transfer(f"pull {dest.name}", art.size) as got:
            oci.download_verified(client, ref, art, dest, got)
    pinned = Reference(ref.registry, ref.repository, ref.tag, art.manifest_digest)
    return PullResult(dest, str(pinned), art.layer_digest, art.size, time.monotonic() - start)


def _destination(output: str | os.PathLike[str] | None, cwd: Path) -> tuple[Path, Path | None]:
    """The folder to write in, and the file if ``output`` names one (else the title's)."""
    if output is None:
        return cwd, None
    text = os.fspath(output)
    path = cwd / text
    if text.endswith(("/", os.sep)) or _is_dir(path):
        return path, None
    return path.parent, path


def _is_dir(path: Path) -> bool:
    try:
        return path.is_dir()
    except OSError:  # a name too long, say: ``_writing`` reports it when it is written
        return False


@contextmanager
def _writing(folder: Path, shown: str) -> Iterator[None]:
    """Create ``folder`` if missing (removed again if the pull fails); local write failures
    become a usage error naming ``-o``."""
    created: list[Path] = []
    p = folder
    while not p.exists() and not p.is_symlink() and p != p.parent:
        created.append(p)
        p = p.parent
    ok = False
    try:
        folder.mkdir(parents=True, exist_ok=True)
        yield
        ok = True
    except OSError as exc:
        where = exc.filename or folder
        raise UsageError(
            f"-o {shown}: cannot write the bundle at {where} ({exc.strerror or exc}); "
            "choose another -o"
        ) from None
    finally:
        if not ok:
            for made in created:  # innermost first; only folders this pull made, if empty
                with suppress(OSError):
                    made.rmdir()


def _file_name(art: oci.Artifact, ref: Reference) -> str:
    """The layer's title, if it is a safe file name (see the module docstring); without
    a title, ``<repository>-<tag>.aotc``."""
    title = art.title
    if not title:
        tag = ref.tag or art.layer_digest.removeprefix("sha256:")[:12]
        return f"{ref.repository.rsplit('/', 1)[-1]}-{tag}.aotc"
    problem = _title_problem(title)
    if problem:
        shown = ascii(title[:80]) + ("…" if len(title) > 80 else "")
        raise RegistryError(
            f"{ref}: the layer's title {shown} {problem}; refusing it as a file name. "
            "Pass -o FILE to name the output."
        )
    return title


def _title_problem(title: str) -> str | None:
    if not title.isprintable():
        return "has control or invisible characters"
    if "/" in title or "\\" in title:
        return "is a path, not a file name"
    if title.startswith("."):
        return "names a hidden file"
    if len(title.encode()) > MAX_TITLE:
        return f"is longer than {MAX_TITLE} bytes"
    if not title.endswith(".aotc") or title == ".aotc":
        return "does not end in .aotc"
    return None
