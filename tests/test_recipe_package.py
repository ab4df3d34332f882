"""The recipe package's shape: it imports no build stage, needs no import inside a function
to dodge a cycle, and defines each shared name once."""

from __future__ import annotations

import ast
import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "aot" / "recipe"
# What the recipe package may import from aot: nothing that builds, only these leaves
# (errors, targets, a config's values, and what a kernel object and its file tell).
LEAVES = ("errors", "targets", "config", "dtypes", "inputs", "shipped", "heuristics", "prehook",
          "kernelfile")  # fmt: skip
ALLOWED = ("aot", *(f"aot.{m}" for m in LEAVES))


def test_importing_the_recipe_package_imports_no_build_stage() -> None:
    code = (
        "import sys, aot.recipe\n"
        "print(','.join(sorted(m for m in sys.modules if m.split('.')[0] in "
        "('aot', 'triton', 'torch'))))"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, check=True
    )
    loaded = out.stdout.strip().split(",")
    stray = [m for m in loaded if m not in ALLOWED and not m.startswith("aot.recipe")]
    assert stray == []


def _imports(path: Path) -> tuple[list[ast.stmt], list[ast.stmt]]:
    """(module-level, nested) import statements of one file."""
    tree = ast.parse(path.read_text())
    top = [n for n in tree.body if isinstance(n, ast.Import | ast.ImportFrom)]
    every = [n for n in ast.walk(tree) if isinstance(n, ast.Import | ast.ImportFrom)]
    return top, [n for n in every if n not in top]


# Imported inside functions, because only some recipes need them (inferring a signature
# from example tensors needs PyTorch; reading a shipped kernel's decorators, Triton).
OPTIONAL = ("torch", "triton.language")


def test_recipe_modules_import_at_module_level_only() -> None:
    for path in sorted(PACKAGE.glob("*.py")):
        _, nested = _imports(path)
        nested = [n for n in nested if not (isinstance(n, ast.Import)
                                            and n.names[0].name in OPTIONAL)]  # fmt: skip
        assert nested == [], f"{path.name}:{nested[0].lineno}: an import inside a function"


def test_recipe_modules_import_only_the_package_and_leaf_modules() -> None:
    for path in sorted(PACKAGE.glob("*.py")):
        top, _ = _imports(path)
        for node in top:
            if isinstance(node, ast.ImportFrom) and node.level == 2:
                assert node.module in LEAVES, f"{path.name}: ..{node.module}"
            if isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                assert not node.module.startswith("aot"), f"{path.name}: {node.module}"


def test_identifier_pattern_is_defined_once() -> None:
    pattern = re.compile(re.escape('re.compile(r"^[A-Za-z_][A-Za-z0-9_]*'))
    found = [p for p in (ROOT / "aot").rglob("*.py") if pattern.search(p.read_text())]
    assert [p.relative_to(ROOT).as_posix() for p in found] == ["aot/recipe/validate.py"]


def test_public_names_are_importable_from_the_package() -> None:
    from aot.recipe import (  # noqa: F401
        KernelRecipe,
        Recipe,
        RecipeError,
        TuneSettings,
        Validator,
        load,
        parse_recipe,
    )
