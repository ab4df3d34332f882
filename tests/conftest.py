from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from aot.env import Environment

DATA = Path(__file__).parent / "data"


def env_for(cache: Path, jobs: int = 2) -> Environment:
    return Environment(cache_dir=cache, jobs=jobs, progress=False)


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
