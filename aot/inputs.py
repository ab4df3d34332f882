"""Calling a recipe's ``inputs(sizes, dtypes, device="cuda", config=None)``.

``inputs`` builds a kernel's example arguments. The build calls it in three places: to
read the signature (on PyTorch's meta device: shapes and dtypes, no memory), to give
``@triton.autotune``'s pruning the arguments of a call at a bucket, and in the benchmark
worker (on the GPU, with each candidate's config). An author's ``inputs`` may take
``device`` and ``config`` or not; each is passed only where it is taken.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Mapping
from typing import Any

Inputs = Callable[..., Any]


def accepted(fn: Inputs, offered: Mapping[str, Any]) -> dict[str, Any]:
    """The keyword arguments of ``offered`` that ``fn`` takes (all, with ``**kwargs``)."""
    try:
        params = inspect.signature(fn).parameters
    except (TypeError, ValueError):
        return {}
    if any(p.kind == p.VAR_KEYWORD for p in params.values()):
        return dict(offered)
    return {k: x for k, x in offered.items() if k in params}


def on_meta(
    fn: Inputs, sizes: Mapping[str, int], binding: Mapping[str, str], config: Mapping[str, Any]
) -> Any:
    """``fn``'s example arguments as meta tensors (raises what ``fn`` raises; ImportError
    without PyTorch)."""
    import torch

    kwargs = accepted(fn, {"device": "meta", "config": dict(config)})
    with torch.device("meta"):
        return fn(dict(sizes), dict(binding), **kwargs)
