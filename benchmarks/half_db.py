"""Every other bucket of a tuning database: what a GPU runner that tuned half the buckets
hands over (issue 19: the cost model calibrated on a kernel's measured buckets picks the
others, ``aot/costmodel/calibrate.py``).

    python benchmarks/half_db.py [--odd] IN.tunedb.jsonl[.gz] OUT.tunedb.jsonl

Per kernel, dtypes and device, the buckets (each record's problem) in size order; the
records of the first, third, fifth... are kept, whole, in their order (with ``--odd``, of
the second, fourth...: the other half).
"""

from __future__ import annotations

import gzip
import json
import sys
from pathlib import Path
from typing import Any

Line = tuple[Any, ...]


def every_other(text: str, first: int = 0) -> tuple[str, set[tuple[Any, ...]]]:
    """``text``'s JSON lines of every other bucket from the ``first`` (0 or 1), and the
    (kernel, dtypes, problem) kept, dtypes and problem as sorted tuples of their items."""
    recs = [json.loads(line) for line in text.splitlines() if line.strip()]

    def line(r: dict[str, Any]) -> Line:
        return r["kernel"], tuple(sorted(r["dtypes"].items())), r["device"]

    def size(r: dict[str, Any]) -> Line:
        return tuple(sorted(r["problem"].items()))

    problems: dict[Line, set[Line]] = {}
    for r in recs:
        problems.setdefault(line(r), set()).add(size(r))
    kept = {(k, p) for k, ps in problems.items() for p in sorted(ps)[first::2]}
    mine = [r for r in recs if (line(r), size(r)) in kept]
    return "".join(json.dumps(r) + "\n" for r in mine), {(k[0], k[1], p) for k, p in kept}


def main() -> None:
    args = sys.argv[1:]
    odd = args[:1] == ["--odd"]
    if len(args) != 2 + odd:
        sys.exit(
            "usage: python benchmarks/half_db.py [--odd] IN.tunedb.jsonl[.gz] OUT.tunedb.jsonl"
        )
    src, dst = map(Path, args[odd:])
    if not src.is_file():
        sys.exit(f"{src}: no such database")
    data = src.read_bytes()
    text = (gzip.decompress(data) if src.suffix == ".gz" else data).decode()
    dst.write_text(every_other(text, int(odd))[0])


if __name__ == "__main__":
    main()
