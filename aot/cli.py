"""The ``aotc`` command: parse arguments, call one core function, print, map errors to exit
codes. Nothing else lives here."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from pathlib import Path

from . import __version__
from .env import VARIABLES, Environment, from_environ
from .errors import AotcError


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

    insp = sub.add_parser("inspect", help="print a readable summary of a bundle")
    insp.add_argument("bundle", type=Path)

    ver = sub.add_parser("verify", help="check a bundle's integrity (exit 3 if damaged)")
    ver.add_argument("bundle", type=Path)
    return p


def main(argv: Sequence[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    try:
        env = from_environ()
        if args.command == "plan":
            from .plan import make_plan
            from .recipe import load
            from .summary import describe_plan

            print(describe_plan(make_plan(load(args.recipe))))
        elif args.command == "build":
            from .build import build

            env = Environment(
                cache_dir=env.cache_dir,
                jobs=args.jobs if args.jobs else env.jobs,
                progress=env.progress and not args.no_progress,
            )
            r = build(args.recipe, args.output, env, Path.cwd())
            print(
                f"wrote {r.bundle} ({r.size / 1024:.1f} KiB, sha256 {r.sha256[:16]}…) in "
                f"{r.seconds:.1f}s: {r.compiled} compiled, {r.cached} from cache, "
                f"{r.failed} failed (of {r.plan_size} possible variants)\n"
                f"report: {r.report}"
            )
        elif args.command == "inspect":
            from .inspect import inspect

            sys.stdout.write(inspect(args.bundle))
        elif args.command == "verify":
            from .inspect import verify

            print(verify(args.bundle))
    except AotcError as exc:
        print(f"aotc: error: {exc}", file=sys.stderr)
        return exc.exit_code
    except KeyboardInterrupt:
        print("aotc: interrupted; nothing was written", file=sys.stderr)
        return 130
    return 0


if __name__ == "__main__":
    sys.exit(main())
