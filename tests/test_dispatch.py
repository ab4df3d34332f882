"""Target and variant choice as properties, over random arguments (bucket choice:
tests/test_buckets.py)."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from loader.dispatch import choose_target, cubin_runs_on, holds, order_variants
from loader.manifest import Target, VariantSpec


def _variant(vid: str, assume: dict[str, int]) -> VariantSpec:
    return VariantSpec(vid, "e", "f", 4, 3, 0, 32, {}, assume, ())


NAMES = ["p", "q", "n", "s"]
assumptions = st.dictionaries(st.sampled_from(NAMES), st.sampled_from([16, 1]), max_size=4)


@given(st.lists(assumptions, max_size=5), st.lists(st.integers(0, 2**40), min_size=4, max_size=4))
def test_never_a_variant_whose_assumptions_are_violated(
    specs: list[dict[str, int]], values: list[int]
) -> None:
    index = {n: i for i, n in enumerate(NAMES)}
    variants = order_variants(
        [_variant(f"v{i}", a) for i, a in enumerate(specs)] + [_variant("generic", {})]
    )
    chosen = None
    for v in variants:
        checks = tuple(sorted((index[n], k) for n, k in v.assume.items()))
        if holds(checks, values):
            chosen = v
            break
    assert chosen is not None  # the generic variant always qualifies
    for name, kind in chosen.assume.items():
        value = values[index[name]]
        assert value % 16 == 0 if kind == 16 else value == 1
    # and it is the most specialized qualifying one
    for v in variants:
        ok = all(
            (values[index[n]] % 16 == 0) if k == 16 else values[index[n]] == 1
            for n, k in v.assume.items()
        )
        if ok:
            assert len(v.assume) <= len(chosen.assume)


@given(
    st.tuples(st.integers(7, 10), st.integers(0, 9)),
    st.tuples(st.integers(7, 10), st.integers(0, 9)),
)
def test_cubin_compatibility(arch: tuple[int, int], dev: tuple[int, int]) -> None:
    runs = cubin_runs_on(arch, dev)
    if arch == (9, 0):
        assert runs == (dev == (9, 0))
    else:
        assert runs == (arch[0] == dev[0] and dev[1] >= arch[1])


def test_choose_target_prefers_named_then_exact_then_arch() -> None:
    t = [
        Target("sm_80", "sm_80", (8, 0), 108),
        Target("A100", "sm_80", (8, 0), 108, ("A100",)),
        Target("L40S", "sm_89", (8, 9), 142, ("L40S",)),
        Target("sm_86", "sm_86", (8, 6), 72),
    ]
    pick = lambda cc, name: getattr(choose_target(t, cc, name), "name", None)  # noqa: E731
    assert pick((8, 0), "NVIDIA A100-SXM4-80GB") == "A100"
    assert pick((8, 0), "NVIDIA A800") == "sm_80"
    assert pick((8, 9), "NVIDIA L40S") == "L40S"
    assert pick((8, 9), "NVIDIA L4") == "L40S"  # exact arch beats older arch code
    assert pick((8, 6), "NVIDIA A10") == "sm_86"
    assert pick((9, 0), "NVIDIA H100") is None
