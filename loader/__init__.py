"""aotc's runtime loader: open a bundle, launch its kernels. No Triton, no PyTorch, no JIT.

    import loader
    bundle = loader.open("artifacts/example-0.1.0.aotc")  # or "oci://HOST/REPO:TAG"
    bundle["rmsnorm"](x, w, out, M, N, x.stride(0), out.stride(0), 1e-6)

Dependencies: the standard library, ``zstandard`` and the NVIDIA driver (``libcuda.so.1``).
"""

from .bundle import Bundle, Kernel, open
from .errors import (
    ArgumentError,
    BundleError,
    CudaError,
    LoaderError,
    NoTargetError,
    RegistryAuthError,
    RegistryError,
)
from .format import FORMAT_VERSION

__all__ = [
    "FORMAT_VERSION",
    "ArgumentError",
    "Bundle",
    "BundleError",
    "CudaError",
    "Kernel",
    "LoaderError",
    "NoTargetError",
    "RegistryAuthError",
    "RegistryError",
    "open",
]
