from __future__ import annotations

import os
import shutil
import tempfile
import threading
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path

import pytest

from aot.env import Environment
from aot.errors import RecipeError
from aot.recipe import load
from loader import driver
from tests.fakecuda import FakeLib

DATA = Path(__file__).parent / "data"


def expect_recipe(path: Path, fragments: Sequence[str]) -> None:
    """``path`` loads when ``fragments`` is empty; otherwise loading it fails with a
    RecipeError whose message starts with the file's path and holds every fragment."""
    if not fragments:
        load(path)
        return
    with pytest.raises(RecipeError) as e:
        load(path)
    msg = str(e.value)
    assert msg.startswith(str(path)), msg
    for f in fragments:
        assert f in msg, (f, msg)


# The suite builds with the analytical heuristic (AOTC_PREDICT, `aotc build --predict`)
# where no GPU measured: the default, the learned cost model, compiles a dozen candidates
# a bucket where the heuristic compiles one, and that tripled the suite's time. The cost
# model's own tests (tests/test_costmodel.py) build the default way (``predict=None``, no
# AOTC_PREDICT).
SUITE_PREDICT = "heuristic"


def env_for(cache: Path, jobs: int = 2, predict: str | None = SUITE_PREDICT) -> Environment:
    return Environment(cache_dir=cache, jobs=jobs, progress=False, predict=predict)


@pytest.fixture(scope="session", autouse=True)
def _session_tmpdir(tmp_path_factory: pytest.TempPathFactory) -> Iterator[None]:
    """Every temporary file of the session, its subprocesses' included, under pytest's own
    base directory, which pytest prunes to its last three runs. Without this, what a
    killed build leaves (the interrupt tests kill some on purpose) and Inductor's cache
    (under the temporary directory) piled up in /tmp from run to run until the disk was
    full."""
    tmp = tmp_path_factory.mktemp("tmp")
    old = {k: os.environ.get(k) for k in ("TMPDIR", "AOTC_PREDICT")}
    os.environ["TMPDIR"] = str(tmp)
    os.environ["AOTC_PREDICT"] = SUITE_PREDICT  # for `aotc` run in subprocesses (env_for)
    tempfile.tempdir = None  # gettempdir() reads TMPDIR again
    yield
    for k, v in old.items():
        if v is None:
            os.environ.pop(k, None)
        else:
            os.environ[k] = v
    tempfile.tempdir = None


@pytest.fixture
def fake() -> Iterator[FakeLib]:
    """The fake CUDA driver (tests/fakecuda.py) installed for one test, then removed."""
    lib = FakeLib()
    driver.install(driver.Driver(lib))
    yield lib
    driver.install(None)


@pytest.fixture
def in_threads() -> Callable[[int, Callable[[int], None]], None]:
    """``in_threads(n, work)`` runs work(0) … work(n - 1), each on its own thread, all
    started before any is joined (a fixture, so tests/gpu reaches it without imports)."""

    def run(n: int, work: Callable[[int], None]) -> None:
        threads = [threading.Thread(target=work, args=(k,)) for k in range(n)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()

    return run


@pytest.fixture
def recipe_dir(tmp_path: Path) -> Path:
    """A private copy of tests/data, so a test may edit recipes and kernels."""
    dest = tmp_path / "recipe"
    shutil.copytree(DATA, dest)
    return dest


@pytest.fixture(scope="session")
def compile_cache(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """One compile cache shared by the session's builds of unchanged kernels."""
    return tmp_path_factory.mktemp("cache")
