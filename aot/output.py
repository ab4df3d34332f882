"""Output paths, checked before any work starts: a build or tune takes minutes, and a path
that cannot be written should fail in the first second, with nothing written."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

from .errors import UsageError


def check_output(
    path: Path,
    flag: str = "-o",
    *,
    folder_ok: bool = False,
    append: bool = False,
    example: str = "",
) -> None:
    """Refuse ``path`` unless a file can be written there: it must be a regular file or absent
    (or a folder, with ``folder_ok``), and its folder must exist and take new files, or be
    creatable in the nearest folder that does exist. With ``append`` (a tuning database), an
    existing file need only take appends. Nothing is left on disk: missing folders are created
    later by the write itself (``write_atomic``), and only once there is data."""
    where = f"{flag} {path}"
    if append and os.path.isfile(path):
        try:
            open(path, "ab").close()  # opened, not written: the file stays as it was
        except OSError as exc:
            reason = exc.strerror or type(exc).__name__
            raise UsageError(
                f"{where}: cannot append to it ({reason}); choose another path"
            ) from None
        return
    if os.path.isdir(path):
        if folder_ok:
            _check_can_create(path, path, where)
            return
        inside = path / (example or "NAME.aotc")
        raise UsageError(f"{where}: is a folder; give a file path, e.g. -o {inside}")
    if os.path.lexists(path) and not os.path.isfile(path):
        raise UsageError(f"{where}: exists and is not a regular file; choose another path")
    existing = path.parent
    # os.path, not Path.exists: a folder we may not search must read as "not there", not raise.
    while not os.path.lexists(existing) and existing != existing.parent:
        existing = existing.parent
    if not os.path.isdir(existing):
        raise UsageError(f"{where}: {existing} is a file, not a folder; choose another path")
    _check_can_create(existing, path.parent, where)


def _check_can_create(existing: Path, folder: Path, where: str) -> None:
    # A real probe rather than os.access: root passes every access() check, yet cannot create
    # files in /proc or on a read-only mount. TemporaryFile leaves no name behind (O_TMPFILE
    # where the file system has it, else a file unlinked at once).
    try:
        with tempfile.TemporaryFile(dir=existing):
            pass
    except OSError as exc:
        what = "create files in" if existing == folder else "create folders in"
        reason = exc.strerror or type(exc).__name__
        raise UsageError(
            f"{where}: cannot {what} {existing} ({reason}); choose a folder you can write to"
        ) from None
