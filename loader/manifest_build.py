"""The manifest's build record (``build.*``): what the builder records beside the product,
read by ``aotc inspect`` and ``aotc merge``. Re-exported by ``loader.manifest``, which
imports this module only when a manifest's ``build`` holds anything to check.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from .manifest_types import Coded, Count


@dataclass(frozen=True)
class Failure(Coded):
    """A variant that failed to compile or fit (``build.failed``)."""

    kernel: str
    target: str
    dtypes: Mapping[str, str]
    config: str
    spec: str
    reason: str


@dataclass(frozen=True)
class ShardRecord(Coded):
    """The slice a partial bundle holds (``build.shard``)."""

    index: Count = 1
    count: Count = 1
    instances: Count | None = None
    of: Count | None = None
    targets: tuple[str, ...] = ()


@dataclass(frozen=True)
class BuildRecord(Coded):
    failed: tuple[Failure, ...] = ()
    shard: ShardRecord | None = None
