"""``@triton.autotune(prune_configs_by=...)``, honoured at build time, per bucket.

Triton calls ``early_config_prune(configs, named_args)`` and ranks by
``perf_model(**named_args, **config_kwargs)`` keeping ``top_k``, on the launch's real
arguments. The build has no launch: it calls them once per bucket with the arguments a
call at the bucket's bounds would have (integers from the bucket and the sizes; tensors
from the recipe's ``inputs`` on PyTorch's meta device, shapes and dtypes without memory,
where that can be had) and the candidates as ``triton.Config`` objects.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from .config import Config, triton_value
from .errors import RecipeError
from .inputs import on_meta
from .kernel_env import sizes_at
from .kernelfile import load_module
from .recipe import KernelRecipe, Recipe


def triton_config(c: Config) -> Any:
    import triton

    kwargs = {k: triton_value(v) for k, v in c.meta}
    return triton.Config(kwargs, num_warps=c.num_warps, num_stages=c.num_stages,
                         num_ctas=c.num_ctas, maxnreg=c.maxnreg)  # fmt: skip


def pruned_at(
    recipe: Recipe, kr: KernelRecipe, point: Mapping[str, int], configs: Sequence[Config]
) -> list[Config]:
    """The candidates autotune's pruning keeps at the bucket ``point``, in their order."""
    tuned = kr.autotune
    assert tuned is not None
    at = ", ".join(f"{k}={v}" for k, v in point.items()) or "the only bucket"
    key = f"{kr.where}.source"
    named = named_args(recipe, kr, point, configs[0])
    ours = {triton_config(c): c for c in configs}
    kept = list(ours)
    try:
        if tuned.early_config_prune is not None:
            kept = list(tuned.early_config_prune(kept, named))
        if tuned.perf_model is not None:
            kept = _top_k(tuned.perf_model, tuned.top_k, kept, named)
    except Exception as exc:
        raise RecipeError(recipe.shown, key, f"@triton.autotune's prune_configs_by raised "
                          f"{type(exc).__name__}: {exc} at {at} (the build runs it with the "
                          f"arguments {', '.join(named)})") from None  # fmt: skip
    strangers = [c for c in kept if c not in ours]
    if strangers:
        raise RecipeError(recipe.shown, key, f"@triton.autotune's prune_configs_by returned "
                          f"{strangers[0]}, which is none of its configs, at {at}")  # fmt: skip
    if not kept:
        raise RecipeError(recipe.shown, key, f"@triton.autotune's prune_configs_by kept no "
                          f"config at {at}")  # fmt: skip
    chosen = {id(ours[c]) for c in kept}
    return [c for c in configs if id(c) in chosen]


def _top_k(
    model: Any, top_k: float | int, configs: list[Any], named: Mapping[str, Any]
) -> list[Any]:
    if isinstance(top_k, float) and top_k <= 1.0:
        top_k = int(len(configs) * top_k)
    if len(configs) <= top_k:
        return configs
    cost = {c: model(**named, **c.all_kwargs()) for c in configs}
    return sorted(configs, key=lambda c: cost[c])[: int(top_k)]


def named_args(
    recipe: Recipe, kr: KernelRecipe, point: Mapping[str, int], config: Config
) -> dict[str, Any]:
    """The kernel's runtime arguments by name, as a call at ``point`` would pass them."""
    sizes = sizes_at(kr, point, config)
    tensors = _meta_arguments(recipe, kr, sizes, config)
    out: dict[str, Any] = {}
    for name in kr.signature:
        if name in sizes:
            out[name] = sizes[name]
        elif name in tensors:
            out[name] = tensors[name]
    return out


def _meta_arguments(
    recipe: Recipe, kr: KernelRecipe, sizes: Mapping[str, int], config: Config
) -> dict[str, Any]:
    """The example arguments of the recipe's ``inputs`` on the meta device, by name (the
    first dtype binding), or none when there are no inputs or no PyTorch."""
    if kr.inputs is None:
        return {}
    file, _, name = kr.inputs.rpartition(":")
    fn = getattr(load_module((recipe.root / Path(file)).resolve()), name)
    binding = {var: types[0] for var, types in kr.dtypes.items()}
    try:
        args = list(on_meta(fn, sizes, binding, config.values()))
    except Exception:  # no PyTorch, or inputs that compute on data: integers only
        return {}
    return dict(zip(kr.signature, args, strict=False))
