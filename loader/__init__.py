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
from .model import ModelRunner, load_model
from .pipeline import Pipeline

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
