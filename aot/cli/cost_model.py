"""``aotc cost-model``: train the learned cost model on tuning databases, and evaluate it
leave-one-kernel-out. Registered on the ``aotc`` group by commands.py."""

from __future__ import annotations

from pathlib import Path

import click

from ..env import from_environ
from ..output import check_output
from .options import INPUT, OUTPUT

RECIPES_HELP = (
    "a recipe, or a folder searched for recipes, that defines the databases' kernels "
    "(repeatable; default: every *.toml under the current folder). Records are matched to "
    "kernels by name and source hash; buckets no recipe defines are counted and skipped"
)


@click.group("cost-model", help="train and evaluate the learned cost model that predicts "
             "configs where no GPU measured them")  # fmt: skip
def cost_model() -> None:
    pass


@cost_model.command(help="train a model on tuning databases (plain or .gz JSON lines)")
@click.argument("databases", type=INPUT, nargs=-1, required=True, metavar="DB...")
@click.option("-o", "--output", type=OUTPUT, required=True,
              help="the model (LightGBM text); its provenance goes beside it as .json")  # fmt: skip
@click.option("--recipe", "recipes", type=INPUT, multiple=True, metavar="PATH", help=RECIPES_HELP)
def train(databases: tuple[Path, ...], output: Path, recipes: tuple[Path, ...]) -> None:
    from ..costmodel.train import recipe_paths, train_file

    env = from_environ()
    check_output(output, example="model.txt")
    t = train_file(databases, recipe_paths(recipes, Path.cwd()), output, env)
    click.echo(
        f"wrote {t.model} ({t.kernels} kernels, {t.buckets} buckets, {t.rows} configs timed, "
        f"from {t.records} records; {t.unmatched} buckets matched no recipe)\n"
        f"provenance: {t.provenance}"
    )


@cost_model.command(
    "eval",
    help="leave-one-kernel-out: for each kernel, train on the others and score its buckets' "
    "picks against their best measured time, beside the heuristic's and random picks; then "
    "one model trained on every kernel scores them all (in sample)",
)
@click.argument("databases", type=INPUT, nargs=-1, required=True, metavar="DB...")
@click.option("--recipe", "recipes", type=INPUT, multiple=True, metavar="PATH", help=RECIPES_HELP)
@click.option("--buckets", "per_bucket", is_flag=True, help="also print every bucket")
def evaluate(databases: tuple[Path, ...], recipes: tuple[Path, ...], per_bucket: bool) -> None:
    from ..costmodel.train import eval_text, recipe_paths

    env = from_environ()
    click.echo(eval_text(databases, recipe_paths(recipes, Path.cwd()), env, per_bucket))
