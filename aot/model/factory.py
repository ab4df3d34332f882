"""The recipe's module: its factory imported from the recipe's source, the module made on
a place in the recipe's dtype with a float64 copy to check against, and the random inputs
every check and timing runs on."""

from __future__ import annotations

import copy
import hashlib
import importlib.util
import sys
from collections.abc import Callable, Mapping
from typing import Any

from loader.args import TORCH_NAMES, element_type
from loader.model_load import concrete

from ..errors import BuildError
from ..recipe import ModelRecipe
from .plan import Place

Factory = Callable[..., Any]


def load_factory(mr: ModelRecipe) -> Factory:
    """The callable ``[model].source`` names, imported from its file."""
    digest = hashlib.sha256(str(mr.source).encode()).hexdigest()[:12]
    mod_name = f"_aotc_model_{digest}"
    spec = importlib.util.spec_from_file_location(mod_name, mr.source)
    if spec is None or spec.loader is None:
        raise BuildError(f"[model].source: cannot import {mr.source}")
    module = importlib.util.module_from_spec(spec)
    sys.modules[mod_name] = module  # dataclasses and pickling look modules up by name
    try:
        spec.loader.exec_module(module)
    except Exception as exc:
        raise BuildError(f"[model].source: importing {mr.source} failed: {exc!r}") from exc
    fn = getattr(module, mr.factory, None)
    if not callable(fn):
        raise BuildError(f"[model].source: {mr.source.name} defines no callable "
                         f"{mr.factory!r}")  # fmt: skip
    return fn  # type: ignore[no-any-return]


def instantiate(mr: ModelRecipe, factory: Factory, place: Place) -> tuple[Any, Any]:
    """The recipe's module on ``place`` in its dtype, and a float64 copy for reference."""
    import torch

    torch.manual_seed(mr.seed)
    model = factory(**mr.kwargs)
    if not isinstance(model, torch.nn.Module):
        raise BuildError(f"[model] {mr.source_text} returned {type(model).__name__}, "
                         "not a torch.nn.Module")  # fmt: skip
    model = model.to(device=place.device, dtype=torch_dtype(mr.dtype)).eval()
    return model, copy.deepcopy(model).to(torch.float64)


class Module:
    """The recipe's module on one place, made when first needed (a build whose buckets
    all come from the cache, with nothing to time, never makes it)."""

    def __init__(self, mr: ModelRecipe, factory: Factory, place: Place):
        self._args = (mr, factory, place)
        self._made: tuple[Any, Any] | None = None

    def get(self) -> tuple[Any, Any]:
        """(module, float64 reference)."""
        if self._made is None:
            self._made = instantiate(*self._args)
        return self._made


def random_inputs(mr: ModelRecipe, sizes: Mapping[str, int], device: str, gen: Any) -> list[Any]:
    """Standard-normal inputs at ``sizes`` (drawn in float64 on the CPU from ``gen``, so
    the same on every device), in their dtypes on ``device``."""
    import torch

    return [
        torch.randn(concrete(i.shape, sizes), generator=gen, dtype=torch.float64).to(
            device=device, dtype=torch_dtype(i.dtype)
        )
        for i in mr.inputs
    ]


def torch_dtype(name: str) -> Any:
    import torch

    return getattr(torch, TORCH_NAMES[name])


def dtype_name(dtype: Any) -> str:
    """The manifest's name of a torch dtype: our element type, else torch's own name."""
    return element_type(dtype) or str(dtype).removeprefix("torch.")


def check_options(mr: ModelRecipe, torch: Any) -> None:
    """Every ``[model].options`` key must be one of this torch's Inductor settings."""
    config = torch._inductor.config
    for key in mr.options:
        if not hasattr(config, key):
            raise BuildError(
                f"[model].options.{key}: not a TorchInductor setting in torch "
                f"{torch.__version__} (see torch/_inductor/config.py); remove it or fix "
                "its name"
            )
