"""What push, pull and ``aotc inspect oci://`` share: loader errors mapped to aotc's exit
codes, and the remote summary read from a manifest alone."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

from loader import oci
from loader.errors import BadReference, BundleError, RegistryAuthError
from loader.errors import RegistryError as LoaderRegistryError
from loader.registry import Client, Reference, RegistryConfig

from .errors import AuthError, BadBundle, RegistryError, UsageError


@contextmanager
def mapped_errors() -> Iterator[None]:
    """Loader errors as aotc errors: bad reference 2, bad bundle 3, registry 4, auth 5."""
    try:
        yield
    except BadReference as exc:
        raise UsageError(str(exc)) from None
    except RegistryAuthError as exc:
        raise AuthError(str(exc)) from None
    except LoaderRegistryError as exc:
        raise RegistryError(str(exc)) from None
    except BundleError as exc:
        raise BadBundle(str(exc)) from None


def describe(reference: str, config: RegistryConfig) -> str:
    """``aotc inspect oci://...``: the artifact's facts from one manifest GET, no download."""
    with mapped_errors():
        ref = Reference.parse(reference)
        art = oci.resolve(ref, Client(ref.registry, config))
    notes = art.annotations
    out = [
        f"{ref}",
        f"  manifest {art.manifest_digest}",
        f"  bundle   {art.layer_digest} ({art.size / 1024:.1f} KiB, {art.title or 'untitled'})",
    ]
    width = max((len(k) for k in notes), default=0)
    out += [f"  {k.ljust(width)}  {v}" for k, v in sorted(notes.items())]
    return "\n".join(out) + "\n"
