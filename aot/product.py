"""Products: what a build packs. Kernels (aot/kernels.py), pipelines (aot/pipelines.py) and
a model (aot/model/) are each planned from the recipe, then built, and each hands back
its ``Contribution`` to the bundle; ``aot/build.py`` runs them all the same way.

    recipe ─plan─▶ Product ─build─▶ Contribution: manifest records, payloads, provenance,
                                                  report section, summary

A product is planned for one slice of the build (``--shard/--targets``, aot/shard.py):
it builds its part of the slice and says which part (``shard``), or refuses a slice it
cannot build. To add a product: a planner ``(recipe, slice) -> Product | None`` (None
when the recipe has none of it), listed in ``aot/build.py``; the manifest field it fills
in ``loader/manifest.py``; its report section and summary here.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from .env import Environment

if TYPE_CHECKING:
    from .tune.tuner import TuneStats


@dataclass(frozen=True)
class Context:
    """What every product's build may use: the environment, and where the bundle goes."""

    env: Environment
    bundle: Path

    @property
    def report_dir(self) -> Path:
        """The folder of the files the report links to (``x.report/`` beside ``x.aotc``)."""
        return self.bundle.with_suffix(".report")


@dataclass(frozen=True)
class Provenance:
    """What a product was built from: source files (path relative to the recipe's folder
    -> sha256) and tools (name -> version)."""

    sources: Mapping[str, str] = field(default_factory=dict)
    tools: Mapping[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class ReportSection:
    """A product's part of the build report."""

    summary: tuple[str, ...] = ()  # lines of the report's opening list
    body: str = ""  # Markdown, with its own headings
    files: Mapping[Path, str] = field(default_factory=dict)  # images the body links to


@dataclass(frozen=True)
class Summary:
    """A product's numbers, for the command's closing lines."""

    possible: int = 0  # what its plan could build (kernels: variants of the matrix)
    compiled: int = 0  # units compiled by this build
    cached: int = 0  # units taken from the compile cache
    failed: int = 0  # units that failed to compile (recorded; the build went on)
    packed: int = 0  # units in the bundle (model: buckets, over every target)
    decided: Mapping[str, int] = field(default_factory=dict)  # buckets by how chosen
    tuning: TuneStats | None = None  # measurements taken on this machine's GPUs
    db: Path | None = None  # the tuning database, when there is one
    unread: Mapping[str, int] = field(default_factory=dict)  # kernel -> records of old code


@dataclass(frozen=True)
class Contribution:
    """What a product adds to the bundle."""

    records: Mapping[str, Any]  # the manifest fields it fills (loader.manifest.Manifest)
    payloads: Mapping[str, bytes] = field(default_factory=dict)  # entry name -> bytes
    provenance: Provenance = field(default_factory=Provenance)
    report: ReportSection = field(default_factory=ReportSection)
    summary: Summary = field(default_factory=Summary)


class Product(Protocol):
    """One product of a build, planned for a slice of it."""

    @property
    def name(self) -> str:
        """``kernels``, ``pipelines``, ``model``: its key in ``BuildResult.products``."""
        ...

    @property
    def shard(self) -> Mapping[str, Any] | None:
        """Which part of it the slice builds (the manifest's ``build.shard`` record);
        None when the slice builds all of it."""
        ...

    def build(self, ctx: Context) -> Contribution:
        """Build the planned jobs (compile, choose, verify) into records and payloads."""
        ...
