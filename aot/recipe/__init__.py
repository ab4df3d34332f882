"""Recipe format v1: TOML in, a validated, frozen ``Recipe`` out.

Everything a build reads from the recipe is checked here, before any compile: each error
names the file, the key path and the fix, and an unknown key gets a "did you mean" hint.
The format is documented, with an annotated example, in ``recipes/README.md``.

One module per table kind (bundle, kernel and its parts, pipeline, model), all read
through the public ``Validator`` (validate.py). The package imports no build stage: the
stages import it.
"""

from __future__ import annotations

from ..errors import RecipeError
from .bundle import MAX_PLAN_SIZE
from .document import FORMAT, Recipe, load, parse_recipe
from .kernel import KernelRecipe
from .kernel_names import CONSTRAINT_BUILTINS, GRID_BUILTINS
from .kernel_space import LAUNCH_OPTIONS
from .kernel_tune import STRATEGIES, TuneSettings
from .model import ModelRecipe
from .validate import Validator

__all__ = [
    "CONSTRAINT_BUILTINS",
    "FORMAT",
    "GRID_BUILTINS",
    "LAUNCH_OPTIONS",
    "MAX_PLAN_SIZE",
    "STRATEGIES",
    "KernelRecipe",
    "ModelRecipe",
    "Recipe",
    "RecipeError",
    "TuneSettings",
    "Validator",
    "load",
    "parse_recipe",
]
