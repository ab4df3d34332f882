"""Every environment variable aotc reads, declared in one place.

Core functions never read ``os.environ`` themselves: the CLI calls ``from_environ()`` once
and passes the values down, so tests and library users can set them explicitly.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from loader import errors as loader_errors
from loader.registry import RegistryConfig

VARIABLES = {
    "AOTC_CACHE_DIR": "where compiled variants are cached (default ~/.cache/aotc)",
    "AOTC_JOBS": "compile processes to run at once (default: all cores)",
    "AOTC_NO_PROGRESS": "set to 1 to turn progress bars off",
    "AOTC_TUNE_TIMEOUT": "seconds a benchmark may run before it counts as a hang (default 120)",
    "AOTC_COST_MODEL": "a model file from `aotc cost-model train` for the kernels the cost model "
    "predicts (default: the model aotc ships; `aotc build --cost-model`)",
    "AOTC_PREDICT": "heuristic or cost-model: what picks the configs of buckets no GPU measured, "
    "for every kernel, whatever its tune.predict says (as `aotc build --predict`)",
    "AOTC_REGISTRY_USER": "registry user name for push/pull (else the Docker config file)",
    "AOTC_REGISTRY_PASSWORD": "registry password or token, with AOTC_REGISTRY_USER",
    "AOTC_REGISTRY_INSECURE": "set to 1 to allow plain http to registries beyond localhost",
    "AOTC_REGISTRY_CONNECT_TIMEOUT": "seconds to wait for a registry connection (default 10)",
    "AOTC_REGISTRY_READ_TIMEOUT": "seconds a registry may stay silent mid-request (default 60)",
    "AOTC_BUNDLE_CACHE": "where loader.open('oci://...') caches bundles "
    "(default ~/.cache/aotc/bundles; read by the loader too)",
    "AOTC_TRUSTED_KEYS": "public key files (PEM, ':'-separated) of which one must have signed "
    "every bundle a service opens (read by the loader; unset: no check)",
}
# The loader reads AOTC_REGISTRY_*, AOTC_BUNDLE_CACHE and AOTC_TRUSTED_KEYS itself (it
# cannot import aot); they are declared here with the rest, and tests/test_oci_unit.py
# checks none is undeclared.


@dataclass(frozen=True)
class Environment:
    cache_dir: Path
    jobs: int
    progress: bool
    tune_timeout: float = 120.0
    registry: RegistryConfig = field(default_factory=RegistryConfig)
    cost_model: Path | None = None  # None: the model aotc ships
    predict: str | None = None  # --predict / AOTC_PREDICT: every kernel's; None: each its own


def from_environ(environ: Mapping[str, str] | None = None) -> Environment:
    env = os.environ if environ is None else environ
    cache = env.get("AOTC_CACHE_DIR") or str(
        Path(env.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "aotc"
    )
    jobs_text = env.get("AOTC_JOBS", "")
    try:
        jobs = int(jobs_text) if jobs_text else (os.cpu_count() or 1)
    except ValueError:
        from .errors import UsageError

        raise UsageError(f"AOTC_JOBS={jobs_text!r} is not an integer") from None
    if jobs < 1:
        from .errors import UsageError

        raise UsageError(
            f"AOTC_JOBS={jobs_text}: give 1 or more compile processes (unset it for all cores)"
        )
    timeout_text = env.get("AOTC_TUNE_TIMEOUT", "")
    try:
        timeout = float(timeout_text) if timeout_text else 120.0
    except ValueError:
        from .errors import UsageError

        raise UsageError(f"AOTC_TUNE_TIMEOUT={timeout_text!r} is not a number of seconds") from None
    predict = env.get("AOTC_PREDICT") or None
    if predict not in (None, "heuristic", "cost-model"):
        from .errors import UsageError

        raise UsageError(f"AOTC_PREDICT={predict!r}: give heuristic or cost-model (or unset it)")
    try:
        registry = RegistryConfig.from_environ(env)  # a bad AOTC_REGISTRY_* value
    except loader_errors.RegistryError as exc:
        from .errors import UsageError

        raise UsageError(str(exc)) from None
    return Environment(
        cache_dir=Path(cache),
        jobs=jobs,
        progress=env.get("AOTC_NO_PROGRESS", "") not in ("1", "true", "yes"),
        tune_timeout=timeout,
        registry=registry,
        cost_model=Path(env["AOTC_COST_MODEL"]) if env.get("AOTC_COST_MODEL") else None,
        predict=predict,
    )
