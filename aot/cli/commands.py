"""The ``aotc`` commands: each parses its options, calls one core function and prints the
result. Nothing else lives here; the core's errors become exit codes in one place
(``_Aotc.invoke``), and environment variables are read by ``aot/env.py``."""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import click

from .. import __version__, signals
from ..env import VARIABLES, from_environ
from ..errors import AotcError, UsageError
from ..output import check_output
from .cost_model import cost_model
from .lines import built, stale_line, tuning_line, unread_line
from .options import (
    INPUT,
    OUTPUT,
    RECIPE,
    RegistryFlags,
    RunFlags,
    Size,
    registry_options,
    run_options,
)
from .signing import keygen, sign

# "\b" keeps click from re-wrapping the paragraph that follows it.
_WIDTH = max(map(len, VARIABLES)) + 2
EPILOG = (
    "\b\nenvironment:\n"
    + "\n".join(f"  {k:<{_WIDTH}}{v}" for k, v in VARIABLES.items())
    + "\n\n\b\nshell completion (bash; for zsh or fish, zsh_source or fish_source):\n"
    + '  eval "$(_AOTC_COMPLETE=bash_source aotc)"'
)
REFERENCE = "oci://HOST[:PORT]/REPO:TAG"


class _Aotc(click.Group):
    """The group: a core error prints ``aotc: error: …`` and exits with its own code."""

    def invoke(self, ctx: click.Context) -> Any:
        try:
            return super().invoke(ctx)
        except AotcError as exc:
            click.echo(f"aotc: error: {exc}", err=True)
            ctx.exit(exc.exit_code)
        except KeyboardInterrupt:
            click.echo("aotc: interrupted; nothing was written", err=True)
            ctx.exit(130)
        except EOFError as exc:  # click would report it as Ctrl-D, an interrupt: it is not
            click.echo(f"aotc: error: unexpected end of data ({exc or 'EOFError'})", err=True)
            ctx.exit(1)


@click.group(cls=_Aotc, epilog=EPILOG, context_settings={"help_option_names": ["-h", "--help"]},
             commands=[sign, keygen, cost_model])  # fmt: skip
@click.version_option(__version__, prog_name="aotc", message="%(prog)s %(version)s")
def cli() -> None:
    """Ahead-of-time compile and package Triton kernels into one bundle."""


def run(argv: Sequence[str] | None = None) -> int:
    """``aotc`` as a function: the exit code, where click alone would exit the process."""
    try:
        with signals.handled():
            code = cli.main(args=argv, prog_name="aotc", standalone_mode=False)
    except click.ClickException as exc:
        exc.show()
        return exc.exit_code
    except click.Abort:
        click.echo("aotc: interrupted; nothing was written", err=True)
        return 130
    except signals.Terminated as exc:
        click.echo(f"aotc: stopped by {exc}; nothing was written", err=True)
        return 128 + exc.signum
    return code if isinstance(code, int) else 0


@cli.command(help="print the build matrix of a recipe, compiling nothing")
@click.argument("recipe", type=RECIPE)
@click.option("--db", type=INPUT, help="a tuning database: count what a GPU build would time again")
def plan(recipe: Path, db: Path | None) -> None:
    from ..costmodel.data import read_records
    from ..plan import make_plan
    from ..recipe import load
    from ..summary import describe_plan
    from ..tune.measure import stale, unread

    from_environ()  # a bad AOTC_* value is refused by every command, as by build
    the_plan = make_plan(load(recipe))
    click.echo(describe_plan(the_plan))
    if db is not None:
        records = read_records(db)
        click.echo(stale_line(db, len(records), stale(the_plan, records)))
        if orphans := unread(the_plan, records):
            click.echo(unread_line(orphans))


TUNE_ONLY = click.option(
    "--tune-only",
    metavar="KERNELS",
    help="benchmark only these kernels (comma-separated); the others keep the tuning "
    "database's measurements as they are",
)


def _only(names: str | None) -> frozenset[str] | None:
    return frozenset(n.strip() for n in names.split(",") if n.strip()) if names else None


@cli.command(help="compile a recipe into a bundle")
@click.argument("recipe", type=RECIPE)
@click.option(
    "-o", "--output", type=OUTPUT, help="bundle path (default: artifacts/<name>-<version>.aotc)"
)
@run_options
@click.option(
    "--no-tune", is_flag=True, help="do not benchmark, even where a GPU of a target's kind is here"
)
@TUNE_ONLY
@click.option(
    "--model-device",
    type=click.Choice(["auto", "cuda", "cpu"]),
    default="auto",
    show_default=True,
    help="where a [model] is compiled: auto/cuda = on each target whose GPU kind is here; "
    "cpu = a CPU-only bundle (tests, prototyping)",
)
@click.option(
    "--model-workers",
    type=click.IntRange(min=1),
    metavar="N",
    help="processes compiling a [model]'s buckets at once (default: one per local GPU of the "
    "target's kind; more share the GPUs, which suits modes that do not autotune but disturbs "
    "autotuning's timings; 1 with --model-device cpu)",
)
@click.option(
    "--db",
    type=OUTPUT,
    help="tuning database to read and extend (default: <bundle>.tunedb.jsonl beside the bundle)",
)
@click.option(
    "--shard",
    metavar="I/N",
    help="build only shard I of N (1-based, round-robin over the plan's instances); writes a "
    "partial bundle for `aotc merge`",
)
@click.option(
    "--targets",
    metavar="LIST",
    help="build only these targets (comma-separated names or archs, e.g. sm_90)",
)
@click.option(
    "--cost-model",
    type=click.Path(exists=True, dir_okay=False, path_type=Path),
    help='a model from `aotc cost-model train` for the kernels with predict = "cost-model" '
    "(default: AOTC_COST_MODEL, else the model aotc ships)",
)
@click.option(
    "--predict",
    type=click.Choice(["heuristic", "cost-model"]),
    help="what picks the configs of buckets no GPU measured, for every kernel, whatever its "
    "tune.predict says: the analytical heuristic or the learned cost model (default: "
    "AOTC_PREDICT, else each kernel's own, the cost model unless its recipe says otherwise)",
)
def build(
    recipe: Path,
    output: Path | None,
    run: RunFlags,
    no_tune: bool,
    tune_only: str | None,
    model_device: str,
    model_workers: int | None,
    db: Path | None,
    shard: str | None,
    targets: str | None,
    cost_model: Path | None,
    predict: str | None,
) -> None:
    from ..build import TuneOptions
    from ..build import build as build_bundle
    from ..model import ModelOptions
    from ..shard import Slice

    env = run.apply(from_environ())
    if cost_model is not None:
        env = dataclasses.replace(env, cost_model=cost_model)
    if predict is not None:  # else AOTC_PREDICT's, if set
        env = dataclasses.replace(env, predict=predict)
    if no_tune and tune_only:
        raise UsageError("--tune-only and --no-tune contradict each other; give one of them")
    opts = TuneOptions(enabled=not no_tune, only=_only(tune_only), db=db, timeout=env.tune_timeout)
    sl = Slice.parse(shard, targets)
    mo = ModelOptions(device=model_device, workers=model_workers)
    click.echo(built(build_bundle(recipe, output, env, Path.cwd(), opts, sl, model=mo)))


@cli.command(
    help="benchmark on this machine's GPUs into the tuning database, without packing a bundle",
    short_help="benchmark on this machine's GPUs into the tuning database",
)
@click.argument("recipe", type=RECIPE)
@click.option(
    "--db", type=OUTPUT, help="tuning database (default: artifacts/<name>-<version>.tunedb.jsonl)"
)
@TUNE_ONLY
@run_options
def tune(recipe: Path, db: Path | None, tune_only: str | None, run: RunFlags) -> None:
    from ..build import TuneOptions, default_output, run_tuning
    from ..kernels import check_only
    from ..plan import make_plan
    from ..recipe import load
    from ..tune.db import TuningDB

    env = run.apply(from_environ())
    plan = make_plan(load(recipe))
    db_path = db or default_output(plan.recipe, Path.cwd()).with_suffix(".tunedb.jsonl")
    check_output(db_path, "--db", append=True)
    opts = TuneOptions(only=_only(tune_only), timeout=env.tune_timeout)
    check_only(plan.recipe, opts.only)
    stats = run_tuning(plan, TuningDB(db_path), env, opts)
    if stats is None:
        raise UsageError(
            "no GPU here matches any target of the recipe ("
            + ", ".join(t.name for t in plan.recipe.targets)
            + "); run `aotc tune` on a machine with one, or `aotc build` to ship the cost model's "
            "predictions"
        )
    click.echo(tuning_line(stats) + f"\ntuning database: {db_path}")


@cli.command(help="combine partial bundles into the full bundle")
@click.argument("parts", type=INPUT, nargs=-1, required=True, metavar="PART...")
@click.option("-o", "--output", type=OUTPUT, required=True, help="the merged bundle")
def merge(parts: tuple[Path, ...], output: Path) -> None:
    from ..merge import merge as merge_parts

    from_environ()
    check_output(output)
    mr = merge_parts(list(parts), output)
    click.echo(
        f"merged {mr.inputs} {mr.kind}s into {mr.output} ({mr.size / 1024:.1f} KiB, "
        f"sha256 {mr.sha256}): {mr.instances} instances, {mr.seconds:.1f}s"
    )
    if mr.signed_inputs:
        n = len(mr.signed_inputs)
        click.echo(
            f"{n} input{'s were' if n > 1 else ' was'} signed; the merged bundle is unsigned: "
            f"sign it with `aotc sign {mr.output} --key KEY`"
        )


@cli.command("merge-db", help="merge tuning databases from several machines")
@click.argument("databases", type=INPUT, nargs=-1, required=True, metavar="DB...")
@click.option("-o", "--output", type=OUTPUT, required=True, help="the merged database")
def merge_db(databases: tuple[Path, ...], output: Path) -> None:
    from ..tune.db import merge as merge_dbs

    from_environ()
    check_output(output, example="merged.tunedb.jsonl")
    try:
        n = merge_dbs(databases, output)
    except (OSError, ValueError) as exc:
        raise UsageError(str(exc)) from None
    click.echo(f"wrote {output}: {n} records from {len(databases)} databases")


@cli.command(help="push a bundle to an OCI registry")
@click.argument("bundle", type=INPUT)
@click.argument("reference", metavar=REFERENCE)
@registry_options
@click.option(
    "--chunk-size",
    type=Size(),
    metavar="BYTES",
    help="upload in chunks of this size (e.g. 16M, the default); smaller bundles go whole",
)
def push(bundle: Path, reference: str, registry: RegistryFlags, chunk_size: int | None) -> None:
    from ..push import DEFAULT_CHUNK
    from ..push import push as push_bundle

    env = from_environ()
    pr = push_bundle(bundle, reference, registry.apply(env.registry),
                     chunk_size=chunk_size or DEFAULT_CHUNK, progress=env.progress)  # fmt: skip
    n = pr.requests
    how = "already there" if n == 0 else f"{n} upload request{'s' if n > 1 else ''}"
    click.echo(
        f"pushed {pr.reference}\n  bundle sha256:{pr.bundle_digest.split(':')[1]} "
        f"({pr.size / 1024:.1f} KiB, {how}) in {pr.seconds:.2f}s"
    )


@cli.command(help="pull a bundle from an OCI registry, verified")
@click.argument("reference", metavar=REFERENCE)
@click.option(
    "-o",
    "--output",
    # A string, not a Path: a trailing "/" says a folder (made if missing) and Path drops it.
    type=click.Path(),
    help="file, or folder ending in / (default: the bundle's file name, here)",
)
@registry_options
def pull(reference: str, output: str | None, registry: RegistryFlags) -> None:
    from ..pull import pull as pull_bundle

    env = from_environ()
    check_output(Path(output) if output else Path.cwd(), folder_ok=True)
    pl = pull_bundle(reference, output, registry.apply(env.registry), Path.cwd(),
                     progress=env.progress)  # fmt: skip
    click.echo(
        f"pulled {pl.reference}\n  wrote {pl.path} ({pl.size / 1024:.1f} KiB, "
        f"{pl.bundle_digest}, verified) in {pl.seconds:.2f}s"
    )


@cli.command(
    help="print a readable summary of a bundle (or of oci://..., from its manifest alone)",
    short_help="print a readable summary of a bundle or oci://...",
)
@click.argument("bundle")
@registry_options
def inspect(bundle: str, registry: RegistryFlags) -> None:
    env = from_environ()
    if bundle.startswith("oci://"):
        from ..remote import describe

        click.echo(describe(bundle, registry.apply(env.registry)), nl=False)
    else:
        from ..inspect import inspect as summary

        click.echo(summary(Path(bundle)), nl=False)


@cli.command(
    help="check a bundle's integrity (exit 3 if damaged); with --key, also that one of these "
    "public keys signed it (exit 3 if not)",
    short_help="check a bundle's integrity, and with --key its signature",
)
@click.argument("bundle", type=INPUT)
@click.option(
    "--key",
    "keys",
    type=INPUT,
    multiple=True,
    metavar="PUB",
    help="a trusted public key (PEM, from `aotc keygen`); repeat for several",
)
def verify(bundle: Path, keys: tuple[Path, ...]) -> None:
    from ..inspect import verify as check
    from ..sign import check as check_signature
    from ..sign import load_public_keys

    from_environ()
    trusted = load_public_keys(keys) if keys else ()  # a bad key file: exit 2, first
    click.echo(check(bundle))
    click.echo(check_signature(bundle, trusted))


@cli.command(
    "init",
    help="write a draft recipe for every Triton kernel a Python file defines (FILE.toml beside "
    "it, or -o), with placeholders for what only you know; then fill them in and run aotc plan",
    short_help="write a draft recipe for the kernels of a Python file",
)
@click.argument("file", type=INPUT)
@click.option("-o", "--output", type=OUTPUT, help="the recipe to write (default: FILE.toml)")
@click.option(
    "--target",
    "targets",
    multiple=True,
    metavar="GPU",
    help="a GPU to build for, by product or arch (repeatable; default: sm_80 and sm_90)",
)
@click.option("--force", is_flag=True, help="overwrite the recipe if it exists")
def init_recipe(file: Path, output: Path | None, targets: tuple[str, ...], force: bool) -> None:
    from ..init import init

    from_environ()
    d = init(file, output, targets, force)
    click.echo(f"wrote {d.output}: {d.summary()}")
