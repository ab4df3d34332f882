"""The ``[bundle]`` table: the bundle's name, version and target GPUs, and the plan's cap."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from ..targets import GPU, UnknownTarget, resolve
from .validate import Validator, show

BUNDLE_KEYS = ("name", "version", "targets", "max_plan_size")
# The largest build matrix (aot/plan.py, plan_size) a recipe gets without asking. Planning
# ranks every config at every bucket, and the matrix grows as the product of the recipe's
# lists, so a slip (two long bucket lists) could otherwise ask for hours.
MAX_PLAN_SIZE = 1_000_000


@dataclass(frozen=True)
class Bundle:
    name: str
    version: str
    targets: tuple[GPU, ...]
    max_plan_size: int = MAX_PLAN_SIZE


def parse_bundle(v: Validator, doc: Mapping[str, Any]) -> Bundle:
    bundle = v.table(doc, "bundle", "", required=True)
    v.keys(bundle, BUNDLE_KEYS, "[bundle]")
    name = v.name(bundle, "name", "[bundle]")
    version = v.name(bundle, "version", "[bundle]")
    targets = parse_targets(v, bundle)
    cap = bundle.get("max_plan_size", MAX_PLAN_SIZE)
    return Bundle(name, version, targets, v.int_value(cap, "[bundle].max_plan_size", minimum=1))


def parse_targets(v: Validator, bundle: Mapping[str, Any]) -> tuple[GPU, ...]:
    raw = bundle.get("targets")
    if not isinstance(raw, list) or not raw:
        v.fail(
            "[bundle].targets",
            'missing or empty; list GPUs by product or arch, e.g. ["A100", "sm_90"]',
        )
    out: list[GPU] = []
    for i, name in enumerate(raw):
        if not isinstance(name, str):
            v.fail(f"[bundle].targets[{i}]", f"must be a string, got {show(name)}")
        try:
            gpu = resolve(name)
        except UnknownTarget as exc:
            v.fail(f"[bundle].targets[{i}]", str(exc))
        if gpu in out:
            v.fail(f"[bundle].targets[{i}]", f"{name!r} is listed twice")
        out.append(gpu)
    return tuple(out)
