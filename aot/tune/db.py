"""The tuning database: every measurement, appended as it is taken, one JSON line each.

A record is keyed by what determines its value: the kernel's source hash (Triton's
``cache_key``, covering the jit functions it calls), the Triton version, the GPU it ran
on, the dtype binding, the problem (bucket and sizes), the config, and the kind of
measurement (``bench``, ``final`` round N, ``verify``, ``baseline``). A build killed at any
moment resumes without repeating finished work: each line is flushed and fsynced before
the next measurement starts, and a torn last line is dropped on load. Databases from
several machines merge by key into one sorted file.
"""

from __future__ import annotations

import json
import os
import threading
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from loader.format import canonical_json, write_atomic

KEY_FIELDS = (
    "kernel", "source", "triton", "device", "dtypes", "problem", "config", "kind", "round",
)  # fmt: skip


@dataclass(frozen=True)
class Record:
    kernel: str
    source: str
    triton: str
    device: str  # the GPU's product name, as the driver reports it
    arch: str  # its arch, e.g. sm_90 (not part of the key: the name determines it)
    dtypes: Mapping[str, str]
    problem: Mapping[str, int]  # bucket keys at their bucket's upper bound, plus sizes
    config: str  # Config.id
    kind: str  # bench | final | verify | baseline
    ok: bool
    round: int = 0
    ms: float | None = None  # median of the samples
    samples: tuple[float, ...] = ()
    reason: str = ""
    values: Mapping[str, Any] = field(default_factory=dict)  # the config's values, for people
    extra: Mapping[str, Any] = field(default_factory=dict)

    @property
    def key(self) -> str:
        d = self.to_json()
        return canonical_json({k: d[k] for k in KEY_FIELDS}).decode()

    def to_json(self) -> dict[str, Any]:
        return {
            "kernel": self.kernel,
            "source": self.source,
            "triton": self.triton,
            "device": self.device,
            "arch": self.arch,
            "dtypes": dict(self.dtypes),
            "problem": dict(self.problem),
            "config": self.config,
            "kind": self.kind,
            "round": self.round,
            "ok": self.ok,
            "ms": self.ms,
            "samples": list(self.samples),
            "reason": self.reason,
            "values": dict(self.values),
            "extra": dict(self.extra),
        }

    @staticmethod
    def from_json(obj: Mapping[str, Any]) -> Record:
        return Record(
            kernel=str(obj["kernel"]),
            source=str(obj["source"]),
            triton=str(obj["triton"]),
            device=str(obj["device"]),
            arch=str(obj.get("arch", "")),
            dtypes=dict(obj["dtypes"]),
            problem={k: int(v) for k, v in obj["problem"].items()},
            config=str(obj["config"]),
            kind=str(obj["kind"]),
            round=int(obj.get("round", 0)),
            ok=bool(obj["ok"]),
            ms=None if obj.get("ms") is None else float(obj["ms"]),
            samples=tuple(float(x) for x in obj.get("samples", ())),
            reason=str(obj.get("reason", "")),
            values=dict(obj.get("values", {})),
            extra=dict(obj.get("extra", {})),
        )


class TuningDB:
    """An append-only file of records plus an in-memory index by key."""

    def __init__(self, path: Path | None):
        self.path = path
        self._records: dict[str, Record] = {}
        self._lock = threading.Lock()
        if path is not None and path.exists():
            for rec in read(path):
                self._records[rec.key] = rec

    def __len__(self) -> int:
        return len(self._records)

    def __iter__(self) -> Iterator[Record]:
        return iter(list(self._records.values()))

    def get(self, probe: Record) -> Record | None:
        return self._records.get(probe.key)

    def add(self, rec: Record) -> None:
        with self._lock:
            self._records[rec.key] = rec
            if self.path is None:
                return
            self.path.parent.mkdir(parents=True, exist_ok=True)
            with open(self.path, "ab") as f:
                f.write(canonical_json(rec.to_json()) + b"\n")
                f.flush()
                os.fsync(f.fileno())

    def select(self, **match: Any) -> list[Record]:
        out = []
        for r in self._records.values():
            d = r.to_json()
            if all(
                d.get(k) == (dict(v) if isinstance(v, Mapping) else v) for k, v in match.items()
            ):
                out.append(r)
        return out


def read(path: Path) -> Iterator[Record]:
    """Records in file order. A torn last line (a killed writer) is cut off the file."""
    data = path.read_bytes()
    if data and not data.endswith(b"\n"):
        cut = data.rfind(b"\n") + 1
        with open(path, "r+b") as f:
            f.truncate(cut)
        data = data[:cut]
    yield from parse(data, path)


def parse(data: bytes, path: Path) -> Iterator[Record]:
    """The records of a database's bytes, in order; ValueError naming ``path`` and the line
    of one that is not a record."""
    for n, line in enumerate(data.splitlines(), 1):
        if not line.strip():
            continue
        try:
            yield Record.from_json(json.loads(line))
        except (ValueError, KeyError, TypeError) as exc:
            raise ValueError(f"{path}:{n}: not a tuning record ({exc})") from None


def merge(paths: Iterable[Path], out: Path) -> int:
    """Merge databases into ``out``, sorted by key; the same key twice keeps the record that
    sorts first, so the result does not depend on the order the files are given in."""
    merged: dict[str, Record] = {}
    for p in paths:
        for rec in read(p):
            prev = merged.get(rec.key)
            if prev is None or canonical_json(rec.to_json()) < canonical_json(prev.to_json()):
                merged[rec.key] = rec
    lines = [canonical_json(merged[k].to_json()) + b"\n" for k in sorted(merged)]
    write_atomic(out, b"".join(lines))
    return len(merged)
