"""The pipeline product: the recipe's ``[[pipeline]]`` chains of its kernels, recorded in
the manifest as the recipe checked them (aot/recipe/pipeline.py). The loader captures one
CUDA graph of each per bucket (loader/pipeline.py); nothing is compiled for them beyond
their kernels, which the kernel product builds."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from loader import manifest as mf

from .product import Context, Contribution
from .recipe import Recipe
from .shard import Slice


@dataclass(frozen=True)
class PipelineProduct:
    """Every part of a sharded build carries the pipelines whole (``aotc merge`` checks
    that the parts agree on them), so a slice is all of them."""

    pipelines: tuple[mf.PipelineSpec, ...]
    name: str = "pipelines"
    shard: Mapping[str, Any] | None = None

    def build(self, ctx: Context) -> Contribution:
        return Contribution(records={"pipelines": self.pipelines})


def plan_pipelines(recipe: Recipe, sl: Slice) -> PipelineProduct | None:
    return PipelineProduct(recipe.pipelines) if recipe.pipelines else None
