"""Pure dispatch logic: which target and which variant. No driver, no I/O. (Which bucket:
loader/buckets.py.)"""

from __future__ import annotations

import re
from collections.abc import Sequence

from .manifest import Target, VariantSpec


def cubin_runs_on(arch_cc: tuple[int, int], device_cc: tuple[int, int]) -> bool:
    """A cubin for sm_XY runs on devices of the same major version and minor >= Y, except
    Hopper's sm_90a code (what Triton emits for 9.0), which runs on 9.0 alone."""
    if arch_cc[0] != device_cc[0]:
        return False
    if arch_cc == (9, 0):
        return device_cc == (9, 0)
    return device_cc[1] >= arch_cc[1]


def name_match(target: Target, device_name: str) -> int:
    """Length of the longest of the target's product names found in the device name as
    whole words (``H200`` matches "NVIDIA H200" but not "NVIDIA GH200"); 0 if none."""
    return max(
        (
            len(n)
            for n in target.device_names
            if re.search(rf"(?<![A-Za-z0-9]){re.escape(n)}(?![A-Za-z0-9])", device_name, re.I)
        ),
        default=0,
    )


def choose_target(
    targets: Sequence[Target], device_cc: tuple[int, int], device_name: str
) -> Target | None:
    """The best target for the running GPU: a product named like it, then the target for
    its exact compute capability, then the newest compatible one; None if nothing runs."""
    runnable = [t for t in targets if cubin_runs_on(t.cc, device_cc)]
    if not runnable:
        return None

    def rank(t: Target) -> tuple[int, int, int, int, str]:
        # prefer: named product (most specific name), exact cc, arch-only target, newest
        return (
            -name_match(t, device_name),
            0 if t.cc == device_cc else 1,
            0 if not t.device_names else 1,
            -t.cc[1],
            t.name,
        )

    return sorted(runnable, key=rank)[0]


def assumption_checks(
    variant: VariantSpec, param_index: dict[str, int]
) -> tuple[tuple[int, int], ...]:
    """(argument position, 16 or 1) pairs a call must satisfy to use ``variant``."""
    return tuple(sorted((param_index[name], kind) for name, kind in variant.assume.items()))


def holds(checks: tuple[tuple[int, int], ...], values: Sequence[object]) -> bool:
    for pos, kind in checks:
        v = values[pos]
        if kind == 16:
            if v % 16:  # type: ignore[operator]
                return False
        elif v != 1:
            return False
    return True


def order_variants(variants: Sequence[VariantSpec]) -> list[VariantSpec]:
    """Most specialized first, so the first variant whose assumptions hold is the best."""
    return sorted(variants, key=lambda v: (-v.specificity, v.id))
