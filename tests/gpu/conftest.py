"""GPU test fixtures. Every test here is marked ``gpu`` and skipped without a CUDA GPU."""

from __future__ import annotations

import os
from pathlib import Path

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


@pytest.fixture(scope="session")
def example_bundle(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The example bundle: the one built on the CPU machine if given, else built here."""
    given = os.environ.get("AOTC_TEST_BUNDLE")
    if given:
        return Path(given)
    from aot.build import build
    from aot.env import Environment

    out = tmp_path_factory.mktemp("bundle") / "example.aotc"
    env = Environment(
        cache_dir=tmp_path_factory.mktemp("cache"), jobs=os.cpu_count() or 1, progress=False
    )
    build(EXAMPLE, out, env, ROOT)
    return out


@pytest.fixture(scope="session")
def example_recipe():  # type: ignore[no-untyped-def]
    from aot.recipe import load

    return load(EXAMPLE)
