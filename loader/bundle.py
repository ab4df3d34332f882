"""Open a bundle for the running GPU: ``loader.open`` and ``Bundle``.

Only the manifest is read at open (loader/format.py: the archive layer, no GPU); the
target is chosen for the running GPU (loader/dispatch.py). A kernel is made callable the
first time it is looked up (loader/kernel.py): everything a launch needs (parameter
buffer, grid function, assumption tests) is prepared then, and a variant's cubin is
decompressed, checked and loaded the first time a call needs it (loader/launch.py).
"""

from __future__ import annotations

import os
import threading
from collections.abc import Iterator, Sequence
from typing import TYPE_CHECKING, Any

from . import driver as _driver
from .device import Device
from .dispatch import choose_target
from .errors import BundleError, NoTargetError
from .format import BundleFile
from .kernel import Kernel
from .launch import EntrySource, InMemory, Launcher
from .manifest import Manifest, ManifestError, Target

if TYPE_CHECKING:
    from .op import Op
    from .pipeline import Pipeline
    from .signature import KeySource, TrustedKey

# Device, EntrySource, InMemory, Kernel and Launcher are imported from here too (the
# builder's tuner: ``from loader.bundle import InMemory, Device, Kernel``).
__all__ = [
    "Bundle",
    "Device",
    "EntrySource",
    "InMemory",
    "Kernel",
    "Launcher",
    "locate_bundle",
    "open",
]


def open(
    path: str | os.PathLike[str],
    *,
    device: int | None = None,
    digest: str | None = None,
    cache_dir: str | os.PathLike[str] | None = None,
    trusted_keys: Sequence[KeySource] | None = None,
) -> Bundle:
    """Open ``path`` for the GPU of the current CUDA context (or ``device``).

    ``path`` may be ``oci://HOST/REPO:TAG``: the bundle is pulled once into a local cache
    (``cache_dir``, default ``$AOTC_BUNDLE_CACHE`` or ``~/.cache/aotc/bundles``) and opened
    from there; see ``loader/oci.py``. ``digest="sha256:..."`` pins the exact bundle file.

    ``trusted_keys``: Ed25519 public keys (PEM bytes, or paths of PEM files), default
    ``$AOTC_TRUSTED_KEYS`` (``:``-separated paths). With any configured, the bundle must be
    signed by one of them (``aotc sign``), or ``SignatureError`` is raised; a pulled bundle
    is checked each time it is opened from the cache. See loader/signature.py.
    """
    # Keys are read before anything is pulled: a bad key file fails fast, offline.
    keys = _configured(trusted_keys)
    local = locate_bundle(path, digest=digest, cache_dir=cache_dir)
    return Bundle(local, device=device, trusted_keys=keys or None)


def _configured(keys: Sequence[KeySource] | None) -> tuple[TrustedKey, ...]:
    """loader/signature.py's ``configured``, importing that module only where there is
    something to configure: without keys, as most services run, it is not imported. (The
    variable is signature.ENV; tests/test_signature.py sets it by name.)"""
    if keys is None and not os.environ.get("AOTC_TRUSTED_KEYS", "").strip():
        return ()
    from .signature import configured

    return configured(keys, os.environ)


class Bundle:
    def __init__(
        self,
        path: str | os.PathLike[str],
        *,
        device: int | None = None,
        trusted_keys: Sequence[KeySource] | None = None,
    ):
        self.file = BundleFile(path)  # header, manifest, typed and checked: see format.py
        self.manifest: Manifest = self.file.spec
        try:
            # Before the driver: a bundle refused here has touched no GPU. ``signed_by`` is
            # the trusted key that signed it, None when no keys are configured.
            trusted = _configured(trusted_keys)
            signer = None
            if trusted:
                from .signature import require

                signer = require(self.file, trusted)
            self.signed_by: str | None = signer.key_id if signer is not None else None
            self.manifest.require_complete()
            self.device = Device(_driver.get(), device)
        except ManifestError as exc:
            self.file.close()
            raise BundleError(f"{path}: {exc}") from None
        except BaseException:
            self.file.close()
            raise
        target = choose_target(self.manifest.targets, self.device.cc, self.device.name)
        if target is None:
            self.file.close()
            have = ", ".join(f"{t.name} ({t.arch})" for t in self.manifest.targets) or "nothing"
            raise NoTargetError(
                f"{path}: no code for this GPU ({self.device.name}, "
                f"sm_{self.device.cc[0]}{self.device.cc[1]}); the bundle holds: {have}. "
                f"Add sm_{self.device.cc[0]}{self.device.cc[1]} to the recipe's targets "
                "and rebuild."
            )
        self.target: Target = target
        self._kernels: dict[str, Kernel] = {}
        self._ops: dict[str, Op] = {}
        self._op_set = frozenset(o.name for o in self.manifest.ops)
        self._pipelines: list[Pipeline] = []
        self._lock = threading.Lock()

    @property
    def kernel_names(self) -> list[str]:
        return [k.name for k in self.manifest.kernels]

    def kernel(self, name: str) -> Kernel:
        k = self._kernels.get(name)
        if k is None:
            with self._lock:
                k = self._kernels.get(name)
                if k is None:
                    try:
                        spec = self.manifest.kernel(name)
                    except KeyError:
                        raise KeyError(
                            f"no kernel {name!r} in {self.file.path}; it has: "
                            f"{', '.join(self.kernel_names)}"
                        ) from None
                    k = self._kernels[name] = Kernel(self, spec, self.target.name)
        return k

    @property
    def op_names(self) -> list[str]:
        return [o.name for o in self.manifest.ops]

    def op(self, name: str) -> Op:
        """The op ``name``: its kernels behind one call, each bucket served by the one the
        build measured fastest there (loader/op.py)."""
        found = self._ops.get(name)
        if found is None:
            spec = next((o for o in self.manifest.ops if o.name == name), None)
            if spec is None:
                raise KeyError(f"no op {name!r} in {self.file.path}; it has: "
                               f"{', '.join(self.op_names) or 'none'}")  # fmt: skip
            kernels = [self.kernel(k) for k in spec.kernels]
            from .op import Op  # imported on first use (start-up time)

            with self._lock:
                found = self._ops.setdefault(name, Op(spec, kernels, self.target.name))
        return found

    def __getitem__(self, name: str) -> Any:  # Kernel | Op; Any keeps callers terse
        """A kernel, or an op, by name."""
        if name in self._op_set:
            return self.op(name)
        return self.kernel(name)

    def __iter__(self) -> Iterator[str]:
        return iter(self.kernel_names)

    def warmup(self) -> int:
        """Load every module this GPU can use now, instead of at first call: every
        kernel's ``warmup()``. Returns how many modules are loaded."""
        return sum(self.kernel(n).warmup() for n in self.kernel_names)

    @property
    def pipeline_names(self) -> list[str]:
        return [p.name for p in self.manifest.pipelines]

    def pipeline(self, name: str, **weights: Any) -> Pipeline:
        """The pipeline ``name`` with its weights bound (by keyword, tensors): a callable
        that replays one CUDA graph per bucket, captured at first use or ``warmup``."""
        try:
            spec = self.manifest.pipeline(name)
        except KeyError:
            have = ", ".join(self.pipeline_names) or "none"
            raise KeyError(f"no pipeline {name!r} in {self.file.path}; it has: {have}") from None
        from .pipeline import Pipeline  # imported on first use (start-up time)

        p = Pipeline(self, spec, weights)
        with self._lock:
            self._pipelines.append(p)
        return p

    def read_entry(self, name: str) -> bytes:
        return self.file.read_entry(name)

    def close(self) -> None:
        with self._lock:
            pipelines, self._pipelines = self._pipelines, []
        for p in pipelines:
            p.close()
        self.file.close()

    def __enter__(self) -> Bundle:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def locate_bundle(
    path: str | os.PathLike[str],
    *,
    digest: str | None = None,
    cache_dir: str | os.PathLike[str] | None = None,
) -> str | os.PathLike[str]:
    """The local file of ``path``, as ``open`` and ``load_model`` take it: an
    ``oci://HOST/REPO:TAG`` reference is pulled into the cache (``cache_dir``) first, and
    ``digest="sha256:..."`` pins the file; see loader/oci.py, which only they import."""
    if digest is None and not (isinstance(path, str) and path.startswith("oci://")):
        return path
    from .oci import locate

    return locate(path, digest=digest, cache_dir=cache_dir)
