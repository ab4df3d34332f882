"""The builder's error classes. Each carries the process exit code the CLI returns."""

from __future__ import annotations

from pathlib import Path


class AotcError(Exception):
    """Base class of the errors aotc reports to a person instead of a traceback."""

    exit_code = 1


class UsageError(AotcError):
    """Bad command-line arguments or options."""

    exit_code = 2


class RecipeError(AotcError):
    """The recipe is invalid. The message names the file, the key path and the fix."""

    exit_code = 2

    def __init__(self, path: Path | str, key: str, problem: str):
        self.path = Path(path)
        self.key = key
        self.problem = problem
        super().__init__(f"{path}: {key}: {problem}" if key else f"{path}: {problem}")


class BuildError(AotcError):
    """The build cannot produce a bundle (for example, no config compiled for a bucket)."""

    exit_code = 1


class BadBundle(AotcError):
    """A bundle failed its integrity or format checks."""

    exit_code = 3


class MergeError(AotcError):
    """Partial bundles that cannot be merged: they conflict, or parts are missing."""

    exit_code = 2


class RegistryError(AotcError):
    """A registry was unreachable, refused a request, or holds no aotc bundle there."""

    exit_code = 4


class AuthError(RegistryError):
    """The registry wants credentials that were not found, or refused the ones given."""

    exit_code = 5
