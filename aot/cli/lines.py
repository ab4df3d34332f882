"""What ``aotc build``, ``aotc tune`` and ``aotc plan --db`` print about their work."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from ..build import BuildResult
    from ..tune.tuner import TuneStats


def built(r: BuildResult) -> str:
    """``aotc build``'s summary: the tuning, the bundle, the buckets' provenance, the report."""
    lines = [tuning_line(r.tuning)] if r.tuning is not None else []
    lines.append(f"wrote {r.bundle} ({r.size / 1024:.1f} KiB, sha256 {r.sha256[:16]}…) in "
                 f"{r.seconds:.1f}s")  # fmt: skip
    if r.plan_size:
        decided = ", ".join(f"{n} {how}" for how, n in r.decided.items() if n)
        lines[-1] += (f": {r.compiled} compiled, {r.cached} from cache, {r.failed} failed "
                      f"(of {r.plan_size} possible variants)")  # fmt: skip
        lines.append(f"buckets: {decided}")
    if r.model_buckets:
        lines.append(f"model: {r.model_buckets} buckets, {r.model_cached} from cache")
    lines.append(f"report: {r.report}" + (f"\ntuning database: {r.db}" if r.db else ""))
    if r.db and r.unread:
        lines.append(unread_line(r.unread))
    if r.shard is not None:
        from loader.manifest import describe_shard

        lines.append(f"partial bundle ({describe_shard(r.shard)}): combine with `aotc merge`")
    return "\n".join(lines)


def tuning_line(s: TuneStats) -> str:
    """What tuning did. A database's timings taken another way (finals from an idle GPU, before
    tune.sustain_ms; other variants) are taken again, which a resumed build may not expect."""
    again = f" ({s.retaken} again: the database's were taken another way)" if s.retaken else ""
    return (
        f"tuned {s.instances} kernel instances: {s.benchmarks} measurements taken{again}, "
        f"{s.resumed} reused from the database, {s.failed} failed, "
        f"{s.restarts} worker restarts; {s.compiled} candidate variants compiled, "
        f"{s.cached} from cache"
    )


def stale_line(db: Path, records: int, again: Mapping[str, int]) -> str:
    """``aotc plan --db``: how many of the database's timings a GPU build would take again
    (taken another way than the recipe asks now), per kernel."""
    if not again:
        return f"tuning database {db}: {records} records; a GPU build reuses every one it reads"
    kernels = ", ".join(f"{k} {n}" for k, n in sorted(again.items(), key=lambda kv: -kv[1]))
    return (
        f"tuning database {db}: {records} records; a GPU build would time {sum(again.values())} "
        f"of them again, taken another way than the recipe asks now (finals without "
        f"tune.sustain_ms of load, other variants or draws): {kernels}. "
        "`aotc build --tune-only KERNELS` measures only the kernels named"
    )


def unread_line(unread: Mapping[str, int]) -> str:
    """A database that holds records of kernels, none of them for their code as it is now."""
    kernels = ", ".join(f"{k} ({n} records)" for k, n in unread.items())
    return (
        f"warning: the tuning database measured these kernels only as their code was before: "
        f"{kernels}. Its code, a function it calls, or only its place in its file changed "
        "(Triton's source hash counts first lines), so a build reads none of those records: "
        "their buckets are measured again on a GPU, or chosen without measurements"
    )
