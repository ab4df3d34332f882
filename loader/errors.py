"""The loader's exceptions. The builder maps each to a process exit code (see aot/errors.py)."""

from __future__ import annotations


class LoaderError(Exception):
    """Base class of every error the loader raises on purpose."""


class BundleError(LoaderError):
    """The bundle file is missing, truncated, tampered with or of an unknown format."""


class SignatureError(BundleError):
    """With trusted keys configured: the bundle is unsigned, signed by a key not trusted, or
    its signature does not match its contents."""


class TrustedKeyError(LoaderError, ValueError):
    """A trusted key configured (``trusted_keys=``, ``$AOTC_TRUSTED_KEYS``) cannot be used:
    not an Ed25519 public key file, or the ``cryptography`` package is missing."""


class NoTargetError(LoaderError):
    """The bundle holds no code for the GPU this process runs on."""


class ArgumentError(LoaderError, TypeError):
    """A kernel was called with arguments that do not match its recorded signature."""


class RegistryError(LoaderError):
    """A registry could not be reached, refused a request or holds no aotc bundle there."""


class RegistryAuthError(RegistryError):
    """The registry wants credentials that were not found, or refused the ones given."""


class BadReference(LoaderError, ValueError):
    """A string that is not an ``oci://HOST[:PORT]/REPOSITORY:TAG`` reference."""


class CudaError(LoaderError):
    """A CUDA driver call failed: ``code`` is the CUresult, ``name`` its symbolic name."""

    def __init__(self, code: int, name: str, call: str, detail: str = ""):
        self.code = code
        self.name = name
        self.call = call
        msg = f"{call} failed: {name} ({code})"
        super().__init__(f"{msg}: {detail}" if detail else msg)
