"""Options that several commands share, declared once, and the parameter types of the CLI.

A shared decorator adds its options to a command and hands the command one frozen flags
object in their place (``run=RunFlags``, ``registry=RegistryFlags``). To give every command
that wears a decorator a new option: add a ``click.option`` to the decorator, a field to its
flags class, and use the field in the class's ``apply``; the commands need no change.
"""

from __future__ import annotations

import functools
import os
import stat
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, ClassVar

import click
from click.shell_completion import CompletionItem

from loader.registry import RegistryConfig

from ..env import Environment

Command = Callable[..., Any]

# Whether an output path can be written is checked by aot/output.py before any work; whether
# an input exists, by the core function that reads it (with the exit code of its kind).
OUTPUT = click.Path(path_type=Path)
INPUT = click.Path(path_type=Path)
SECONDS = click.FloatRange(min=0, min_open=True)


class RecipeFile(click.ParamType[Path]):
    """A recipe: a regular file this process may read. A missing one is left to the recipe
    loader, whose message ("no such file") the library and the CLI share."""

    name = "recipe"

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> Path:
        path = Path(value)
        try:
            mode = path.stat().st_mode
        except FileNotFoundError:
            return path
        except OSError as exc:  # a file where a folder should be, a search permission, a loop
            self.fail(f"{str(path)!r}: cannot read it ({exc.strerror})", param, ctx)
        if stat.S_ISDIR(mode):
            self.fail(f"{str(path)!r} is a folder; give the recipe's .toml file", param, ctx)
        # A FIFO or /dev/zero would block or never end: only a regular file is read.
        if not stat.S_ISREG(mode):
            self.fail(
                f"{str(path)!r} is not a regular file; give the recipe's .toml file", param, ctx
            )
        if not os.access(path, os.R_OK):
            self.fail(f"{str(path)!r}: cannot read it (permission denied)", param, ctx)
        return path

    def shell_complete(
        self, ctx: click.Context, param: click.Parameter, incomplete: str
    ) -> list[CompletionItem]:
        return [CompletionItem(incomplete, type="file")]  # the shell completes file names


RECIPE = RecipeFile()


class Size(click.ParamType[int]):
    """A positive number of bytes, with an optional binary unit: ``65536``, ``512K``, ``16M``,
    ``1G`` (``16MB`` and ``16MiB`` read the same)."""

    name = "size"
    UNITS: ClassVar[dict[str, int]] = {"": 1, "K": 1 << 10, "M": 1 << 20, "G": 1 << 30}

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> int:
        if isinstance(value, int):
            return value
        text = str(value).strip().upper().removesuffix("IB").removesuffix("B")
        unit = text[-1:] if text[-1:] in self.UNITS else ""
        digits = text[: len(text) - len(unit)]
        if len(digits) > 15:
            self.fail(f"{value!r} is too large", param, ctx)
        if not (digits.isascii() and digits.isdigit()):
            self.fail(f"{value!r} is not a size in bytes (e.g. 16M, 512K, 65536)", param, ctx)
        size = int(digits) * self.UNITS[unit]
        if size < 1:
            self.fail(f"{value!r}: give 1 byte or more (e.g. 16M)", param, ctx)
        return size


@dataclass(frozen=True)
class RunFlags:
    """``-j/--jobs`` and ``--no-progress``: they override ``AOTC_JOBS`` / ``AOTC_NO_PROGRESS``."""

    jobs: int | None = None
    progress: bool = True

    def apply(self, env: Environment) -> Environment:
        return replace(env, jobs=self.jobs or env.jobs, progress=env.progress and self.progress)


def run_options(command: Command) -> Command:
    """Compile processes and progress bars, for the commands that compile (``run=RunFlags``)."""

    @click.option(
        "-j",
        "--jobs",
        type=click.IntRange(min=1),
        metavar="N",
        help="compile processes (default: AOTC_JOBS, else all cores)",
    )
    @click.option("--no-progress", is_flag=True, help="no progress bars")
    @functools.wraps(command)
    def with_run(*args: Any, jobs: int | None, no_progress: bool, **kwargs: Any) -> Any:
        return command(*args, run=RunFlags(jobs, not no_progress), **kwargs)

    return with_run


@dataclass(frozen=True)
class RegistryFlags:
    """The registry options of push, pull and inspect, applied over the environment's."""

    insecure: bool = False
    connect_timeout: float | None = None
    read_timeout: float | None = None

    def apply(self, config: RegistryConfig) -> RegistryConfig:
        if self.insecure:
            config = replace(config, insecure=True)
        if self.connect_timeout is not None:
            config = replace(config, connect_timeout=self.connect_timeout)
        if self.read_timeout is not None:
            config = replace(config, read_timeout=self.read_timeout)
        return config


def registry_options(command: Command) -> Command:
    """Options for talking to an OCI registry (``registry=RegistryFlags``)."""

    @click.option(
        "--insecure",
        is_flag=True,
        help="allow plain http to the registry host (for oci:// references)",
    )
    @click.option(
        "--connect-timeout",
        type=SECONDS,
        metavar="SECONDS",
        help="seconds to wait for a registry to accept a connection "
        "(default 10; AOTC_REGISTRY_CONNECT_TIMEOUT)",
    )
    @click.option(
        "--read-timeout",
        type=SECONDS,
        metavar="SECONDS",
        help="seconds a registry may stay silent mid-transfer, and the most a manifest may "
        "take to arrive (default 60; AOTC_REGISTRY_READ_TIMEOUT)",
    )
    @functools.wraps(command)
    def with_registry(
        *args: Any,
        insecure: bool,
        connect_timeout: float | None,
        read_timeout: float | None,
        **kwargs: Any,
    ) -> Any:
        flags = RegistryFlags(insecure, connect_timeout, read_timeout)
        return command(*args, registry=flags, **kwargs)

    return with_registry
