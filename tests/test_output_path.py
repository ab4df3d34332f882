"""aot/output.py's check of output paths, and AOTC_JOBS: each refuses with a message that
names the path or value and the fix, and writes nothing."""

from __future__ import annotations

from pathlib import Path

import pytest

from aot.env import from_environ
from aot.errors import UsageError
from aot.output import check_output


def listing(path: Path) -> list[Path]:
    return sorted(path.rglob("*"))


def test_writable_paths_pass_and_nothing_is_created(tmp_path: Path) -> None:
    (tmp_path / "old.aotc").write_bytes(b"x")
    (tmp_path / "folder").mkdir()
    before = listing(tmp_path)
    check_output(tmp_path / "new.aotc")
    check_output(tmp_path / "old.aotc")  # replaced atomically later
    check_output(tmp_path / "not" / "yet" / "there.aotc")  # created by the write, not here
    check_output(tmp_path / "folder", folder_ok=True)  # pull -o FOLDER
    check_output(tmp_path / "old.aotc", "--db", append=True)
    assert listing(tmp_path) == before


@pytest.mark.parametrize(
    ("path", "kwargs", "message"),
    [
        ("folder", {}, "-o {t}/folder: is a folder; give a file path, e.g. -o {t}/folder/a.aotc"),
        ("file/x.aotc", {}, "-o {t}/file/x.aotc: {t}/file is a file, not a folder"),
        ("/dev/null", {}, "-o /dev/null: exists and is not a regular file; choose another path"),
        ("/proc/x", {"flag": "--db"}, "--db /proc/x: cannot create files in /proc ("),
        ("/proc/a/b", {}, "-o /proc/a/b: cannot create folders in /proc ("),
        ("/proc", {"folder_ok": True}, "-o /proc: cannot create files in /proc ("),
        ("/proc/version", {"append": True}, "-o /proc/version: cannot append to it ("),
    ],
)
def test_unwritable_paths_are_refused(
    tmp_path: Path, path: str, kwargs: dict[str, object], message: str
) -> None:
    (tmp_path / "folder").mkdir()
    (tmp_path / "file").write_text("x")
    before = listing(tmp_path)
    with pytest.raises(UsageError) as err:
        check_output(tmp_path / path, example="a.aotc", **kwargs)
    assert message.format(t=tmp_path) in str(err.value)
    assert err.value.exit_code == 2
    assert listing(tmp_path) == before


@pytest.mark.parametrize("value", ["0", "-3"])
def test_aotc_jobs_must_be_positive(value: str) -> None:
    with pytest.raises(UsageError, match=f"AOTC_JOBS={value}: give 1 or more"):
        from_environ({"AOTC_JOBS": value})
    assert from_environ({"AOTC_JOBS": "3"}).jobs == 3
