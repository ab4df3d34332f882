"""The ``aotc`` command: parse arguments, call one core function, print, map errors to exit
codes. Nothing else lives here."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING

from . import __version__, signals
from .env import VARIABLES, Environment, from_environ
from .errors import AotcError, UsageError

if TYPE_CHECKING:
    from loader.registry import RegistryConfig

    from .tune.tuner import TuneStats


def _parser() -> argparse.ArgumentParser:
    env_help = "\n".join(f"  {k}  {v}" for k, v in VARIABLES.items())
    p = argparse.ArgumentParser(
        prog="aotc",
        description="Ahead-of-time compile and package Triton kernels into one bundle.",
        epilog=f"environment:\n{env_help}",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("--version", action="version", version=f"aotc {__version__}")
    sub = p.add_subparsers(dest="command", required=True, metavar="COMMAND")

    plan = sub.add_parser("plan", help="print the build matrix of a recipe, compiling nothing")
    plan.add_argument("recipe", type=Path)

    build = sub.add_parser("build", help="compile a recipe into a bundle")
    build.add_argument("recipe", type=Path)
    build.add_argument(
        "-o", "--output", type=Path, help="bundle path (default: artifacts/<name>-<version>.aotc)"
    )
    build.add_argument("-j", "--jobs", type=int, help="compile processes (default: all cores)")
    build.add_argument("--no-progress", action="store_true", help="no progress bars")
    build.add_argument(
        "--no-tune",
        action="store_true",
        help="do not benchmark, even where a GPU of a target's kind is present",
    )
    build.add_argument(
        "--model-device",
        choices=("auto", "cuda", "cpu"),
        default="auto",
        help="where a [model] is compiled: auto/cuda = on each target whose GPU kind is here; "
        "cpu = a CPU-only bundle (tests, prototyping)",
    )
    build.add_argument(
        "--model-workers",
        type=int,
        metavar="N",
        help="processes compiling a [model]'s buckets at once (default: one per local GPU "
        "of the target's kind; more share the GPUs, which suits modes that do not autotune "
        "but disturbs autotuning's timings; 1 with --model-device cpu)",
    )
    build.add_argument(
        "--db",
        type=Path,
        help="tuning database to read and extend "
        "(default: <bundle>.tunedb.jsonl beside the bundle)",
    )

    tune = sub.add_parser(
        "tune",
        help="benchmark on this machine's GPUs into the tuning database, without packing a bundle",
    )
    tune.add_argument("recipe", type=Path)
    tune.add_argument(
        "--db", type=Path, help="tuning database (default: artifacts/<name>-<version>.tunedb.jsonl)"
    )
    tune.add_argument("-j", "--jobs", type=int, help="compile processes (default: all cores)")
    tune.add_argument("--no-progress", action="store_true", help="no progress bars")

    build.add_argument(
        "--shard",
        metavar="I/N",
        help="build only shard I of N (1-based, round-robin over the plan's instances); "
        "writes a partial bundle for `aotc merge`",
    )
    build.add_argument(
        "--targets",
        metavar="LIST",
        help="build only these targets (comma-separated names or archs, e.g. sm_90)",
    )

    merge = sub.add_parser("merge", help="combine partial bundles into the full bundle")
    merge.add_argument("inputs", type=Path, nargs="+", metavar="PART")
    merge.add_argument("-o", "--output", type=Path, required=True, help="the merged bundle")

    push = sub.add_parser("push", help="push a bundle to an OCI registry")
    push.add_argument("bundle", type=Path)
    push.add_argument("reference", metavar="oci://HOST[:PORT]/REPO:TAG")
    push.add_argument("--insecure", action="store_true", help="allow plain http to this host")
    push.add_argument(
        "--chunk-size",
        type=_size,
        default=None,
        metavar="BYTES",
        help="upload in chunks of this size (e.g. 16M, the default); smaller bundles go whole",
    )

    pull = sub.add_parser("pull", help="pull a bundle from an OCI registry, verified")
    pull.add_argument("reference", metavar="oci://HOST[:PORT]/REPO:TAG")
    pull.add_argument(
        "-o", "--output", type=Path, help="file or folder (default: the bundle's file name)"
    )
    pull.add_argument("--insecure", action="store_true", help="allow plain http to this host")

    mdb = sub.add_parser("merge-db", help="merge tuning databases from several machines")
    mdb.add_argument("databases", type=Path, nargs="+")
    mdb.add_argument("-o", "--output", type=Path, required=True)

    insp = sub.add_parser(
        "inspect", help="print a readable summary of a bundle (or of oci://..., not downloaded)"
    )
    insp.add_argument("bundle")
    insp.add_argument("--insecure", action="store_true", help="allow plain http (oci:// only)")

    ver = sub.add_parser("verify", help="check a bundle's integrity (exit 3 if damaged)")
    ver.add_argument("bundle", type=Path)
    return p


def _size(text: str) -> int:
    units = {"": 1, "K": 1 << 10, "M": 1 << 20, "G": 1 << 30}
    t = text.strip().upper().removesuffix("IB").removesuffix("B")
    unit = t[-1:] if t[-1:] in units else ""
    try:
        return int(t[: len(t) - len(unit)]) * units[unit]
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a size (e.g. 8M, 65536)") from None


def _registry(env: Environment, insecure: bool) -> RegistryConfig:
    return replace(env.registry, insecure=True) if insecure else env.registry


def _with_args(env: Environment, args: argparse.Namespace) -> Environment:
    return replace(
        env,
        jobs=args.jobs if args.jobs else env.jobs,
        progress=env.progress and not args.no_progress,
    )


def _tuning_line(s: TuneStats) -> str:
    return (
        f"tuned {s.instances} kernel instances: {s.benchmarks} measurements taken, "
        f"{s.resumed} reused from the database, {s.failed} failed, "
        f"{s.restarts} worker restarts"
    )


def main(argv: Sequence[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    with signals.handled():
        return _run(args)


def _run(args: argparse.Namespace) -> int:
    try:
        env = from_environ()
        if args.command == "plan":
            from .plan import make_plan
            from .recipe import load
            from .summary import describe_plan

            print(describe_plan(make_plan(load(args.recipe))))
        elif args.command == "build":
            from .build import TuneOptions, build

            env = _with_args(env, args)
            opts = TuneOptions(enabled=not args.no_tune, db=args.db, timeout=env.tune_timeout)
            from .shard import Slice

            sl = Slice.parse(args.shard, args.targets)
            from .model import ModelOptions

            if args.model_workers is not None and args.model_workers < 1:
                raise UsageError(f"--model-workers {args.model_workers}: give 1 or more")
            mo = ModelOptions(device=args.model_device, workers=args.model_workers)
            r = build(args.recipe, args.output, env, Path.cwd(), opts, sl, model=mo)
            if r.tuning is not None:
                print(_tuning_line(r.tuning))
            decided = ", ".join(f"{n} {how}" for how, n in r.decided.items() if n)
            lines = [f"wrote {r.bundle} ({r.size / 1024:.1f} KiB, sha256 {r.sha256[:16]}…) in "
                     f"{r.seconds:.1f}s"]  # fmt: skip
            if r.plan_size:
                lines[0] += (f": {r.compiled} compiled, {r.cached} from cache, {r.failed} "
                             f"failed (of {r.plan_size} possible variants)")  # fmt: skip
                lines.append(f"buckets: {decided}")
            if r.model_buckets:
                lines.append(f"model: {r.model_buckets} buckets, {r.model_cached} from cache")
            lines.append(f"report: {r.report}" + (f"\ntuning database: {r.db}" if r.db else ""))
            print("\n".join(lines))
            if r.shard is not None:
                from loader.manifest import describe_shard

                print(f"partial bundle ({describe_shard(r.shard)}): combine with `aotc merge`")
        elif args.command == "tune":
            from .build import TuneOptions, default_output, run_tuning
            from .plan import make_plan
            from .recipe import load
            from .tune.db import TuningDB

            env = _with_args(env, args)
            plan = make_plan(load(args.recipe))
            db_path = args.db or default_output(plan.recipe, Path.cwd()).with_suffix(
                ".tunedb.jsonl"
            )
            stats = run_tuning(plan, TuningDB(db_path), env, TuneOptions(timeout=env.tune_timeout))
            if stats is None:
                raise UsageError(
                    "no GPU here matches any target of the recipe ("
                    + ", ".join(t.name for t in plan.recipe.targets)
                    + "); run `aotc tune` on a machine with one, or `aotc build` to use the "
                    "heuristic"
                )
            print(_tuning_line(stats) + f"\ntuning database: {db_path}")
        elif args.command == "merge-db":
            from .tune.db import merge

            try:
                n = merge(args.databases, args.output)
            except (OSError, ValueError) as exc:
                raise UsageError(str(exc)) from None
            print(f"wrote {args.output}: {n} records from {len(args.databases)} databases")
        elif args.command == "merge":
            from .merge import merge as merge_parts

            mr = merge_parts(args.inputs, args.output)
            print(
                f"merged {mr.inputs} {mr.kind}s into {mr.output} ({mr.size / 1024:.1f} KiB, "
                f"sha256 {mr.sha256}): {mr.instances} instances, {mr.seconds:.1f}s"
            )
        elif args.command == "push":
            from .push import DEFAULT_CHUNK, push

            cfg = _registry(env, args.insecure)
            chunk = args.chunk_size or DEFAULT_CHUNK
            pr = push(args.bundle, args.reference, cfg, chunk_size=chunk)
            n = pr.requests
            how = "already there" if n == 0 else f"{n} upload request{'s' if n > 1 else ''}"
            print(
                f"pushed {pr.reference}\n  bundle sha256:{pr.bundle_digest.split(':')[1]} "
                f"({pr.size / 1024:.1f} KiB, {how}) in {pr.seconds:.2f}s"
            )
        elif args.command == "pull":
            from .pull import pull

            pl = pull(args.reference, args.output, _registry(env, args.insecure), Path.cwd())
            print(
                f"pulled {pl.reference}\n  wrote {pl.path} ({pl.size / 1024:.1f} KiB, "
                f"{pl.bundle_digest}, verified) in {pl.seconds:.2f}s"
            )
        elif args.command == "inspect":
            if args.bundle.startswith("oci://"):
                from .registry import describe

                sys.stdout.write(describe(args.bundle, _registry(env, args.insecure)))
            else:
                from .inspect import inspect

                sys.stdout.write(inspect(Path(args.bundle)))
        elif args.command == "verify":
            from .inspect import verify

            print(verify(args.bundle))
    except AotcError as exc:
        print(f"aotc: error: {exc}", file=sys.stderr)
        return exc.exit_code
    except KeyboardInterrupt:
        print("aotc: interrupted; nothing was written", file=sys.stderr)
        return 130
    except signals.Terminated as exc:
        print(f"aotc: stopped by {exc}; nothing was written", file=sys.stderr)
        return 128 + exc.signum
    return 0


if __name__ == "__main__":
    sys.exit(main())
