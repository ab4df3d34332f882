"""GPU test fixtures. Every test here is marked ``gpu`` and skipped without a CUDA GPU."""

from __future__ import annotations

import functools
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = ROOT / "recipes" / "example.toml"


def _has_gpu() -> bool:
    try:
        import torch
    except ImportError:
        return False
    return bool(torch.cuda.is_available())


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    if _has_gpu():
        return
    skip = pytest.mark.skip(reason="needs a CUDA GPU and torch")
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip)


def _given_or_built(
    recipe: Path, variable: str, factory: pytest.TempPathFactory, tune: Any = None
) -> Path:
    """The bundle the environment variable names (one built, and tuned, elsewhere), else
    ``recipe`` built here (``tune``: aot.build.TuneOptions; by default as `aotc build`)."""
    given = os.environ.get(variable)
    if given:
        return Path(given)
    from aot.build import build
    from aot.env import Environment

    out = factory.mktemp(recipe.stem) / f"{recipe.stem}.aotc"
    env = Environment(cache_dir=factory.mktemp("cache"), jobs=os.cpu_count() or 1, progress=False)
    build(recipe, out, env, ROOT, tune)
    return out


@pytest.fixture(scope="session")
def example_bundle(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The example bundle: the one built on the CPU machine if given, else built here."""
    return _given_or_built(EXAMPLE, "AOTC_TEST_BUNDLE", tmp_path_factory)


@pytest.fixture(scope="session")
def given_or_built(tmp_path_factory: pytest.TempPathFactory) -> Callable[..., Path]:
    """``given_or_built(recipe, variable, tune=None)``: a module's bundle, as for the example."""
    return functools.partial(_given_or_built, factory=tmp_path_factory)


@pytest.fixture(scope="session")
def example_recipe():  # type: ignore[no-untyped-def]
    from aot.recipe import load

    return load(EXAMPLE)
