"""aotc's runtime loader: open a bundle, launch its kernels. No Triton, no PyTorch, no JIT.

    import loader
    bundle = loader.open("artifacts/example-0.1.0.aotc")  # or "oci://HOST/REPO:TAG"
    bundle["rmsnorm"](x, w, out, M, N, x.stride(0), out.stride(0), 1e-6)
    mlp = bundle.pipeline("mlp", w_norm=wn, w_gate_up=wgu, w_down=wd)  # one CUDA graph
    out = mlp(x)                                                        # per bucket
    layer = loader.load_model(bundle_path, module)  # [model]: PyTorch, imported on call
    bundle["rmsnorm"].warmup(M=[1, 16]); mlp.warmup(); layer.warmup(batch=[1])  # optional

Dependencies: the standard library, ``zstandard`` and the NVIDIA driver (``libcuda.so.1``);
``load_model`` (a bundle's ``[model]``, see loader/model.py) also needs PyTorch, which it
imports when called. Checking bundle signatures (``trusted_keys=``, ``$AOTC_TRUSTED_KEYS``;
see loader/signature.py) needs ``cryptography``, imported only when keys are configured.
"""

import importlib
from typing import TYPE_CHECKING, Any

from .buckets import BucketGrid, Policy
from .bundle import Bundle, Kernel, open
from .errors import (
    ArgumentError,
    BundleError,
    CudaError,
    LoaderError,
    NoTargetError,
    RegistryAuthError,
    RegistryError,
    SignatureError,
    TrustedKeyError,
)
from .format import FORMAT_VERSION

if TYPE_CHECKING:
    from .model import ModelRunner, load_model
    from .pipeline import Pipeline

# Imported on first use: a service that only launches kernels does not pay for the
# pipeline and model modules at start-up (cold start is what a bundle is for).
_LAZY = {"ModelRunner": "model", "load_model": "model", "Pipeline": "pipeline"}


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        value = getattr(importlib.import_module(f".{_LAZY[name]}", __name__), name)
        globals()[name] = value
        return value
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__all__ = [
    "FORMAT_VERSION",
    "ArgumentError",
    "BucketGrid",
    "Bundle",
    "BundleError",
    "CudaError",
    "Kernel",
    "LoaderError",
    "ModelRunner",
    "NoTargetError",
    "Pipeline",
    "Policy",
    "RegistryAuthError",
    "RegistryError",
    "SignatureError",
    "TrustedKeyError",
    "load_model",
    "open",
]
