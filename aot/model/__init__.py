"""The model product (issue 5): a PyTorch ``nn.Module`` compiled per bucket ahead of time.

One module per stage, each running for every place (a target whose GPU kind is here) and
bucket (one upper bound per symbolic dimension):

- ``plan.py``: the places, the compilations (bucket × Inductor mode), their cache keys,
  and which devices' worker processes compile them;
- ``compile.py``: export, compile (AOTInductor, or Inductor's standalone artifact) and
  cache one compilation, in this process or in a worker (aot/workers.py);
- ``verify.py``: each artifact's bytes, loaded by the loader's own code, against eager
  PyTorch in float64, at the bucket and padded up to it;
- ``select.py``: each way to serve a bucket timed as the loader serves it, the fastest
  chosen;
- ``pack.py``: the manifest's ``model`` records and the artifacts that ship;
- ``report.py``: the report's section;
- ``product.py``: the model behind the products' interface (aot/product.py), running
  the stages.

The recipe table (``[model]``) is parsed, without importing torch, by aot/recipe/model.py;
the bundle is served by loader/model.py. Nothing here imports torch until it builds.
"""

from .plan import ModelOptions
from .product import ModelProduct, build_model, plan_model

__all__ = ["ModelOptions", "ModelProduct", "build_model", "plan_model"]
