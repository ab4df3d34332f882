"""Bucket grids (loader/buckets.py): each policy, sizes past the last bucket, the row-major
order the manifest stores buckets in, the shared warmup, and ``index`` against a brute
force search over random grids."""

from __future__ import annotations

import itertools
from bisect import bisect_left
from collections.abc import Sequence

import pytest
from hypothesis import given
from hypothesis import strategies as st

from loader import ArgumentError
from loader.buckets import BucketGrid, Policy, kernel_grid, model_grid, pipeline_grid, warm

BOUNDS = (1, 16, 256)


@pytest.mark.parametrize(
    ("value", "clamp", "pad", "exact"),
    [
        (-5, 0, None, None),
        (0, 0, None, None),
        (1, 0, 0, 0),
        (2, 1, 1, None),
        (16, 1, 1, 1),
        (17, 2, 2, None),
        (256, 2, 2, 2),
        (257, 2, None, None),  # past the last bucket
        (10**9, 2, None, None),
    ],
)
def test_each_policy(value: int, clamp: int, pad: int | None, exact: int | None) -> None:
    for policy, want in ((Policy.CLAMP, clamp), (Policy.PAD, pad), (Policy.EXACT, exact)):
        grid = BucketGrid(("M",), (BOUNDS,), policy)
        if want is None:
            with pytest.raises(ArgumentError, match=f"M={value} is "):
                grid.index((value,))
        else:
            assert grid.index((value,)) == want, policy
            assert grid.locate((value,)) == (want, value == BOUNDS[want])


@pytest.mark.parametrize(
    ("grid", "sizes", "message"),
    [
        (
            pipeline_grid(["M"], [BOUNDS], "pipeline 'mlp'"),
            (257,),
            r"^pipeline 'mlp': M=257 is outside the buckets \(1..256\); split the call, or add "
            "a larger bucket to the recipe and rebuild$",
        ),
        (
            model_grid(["batch", "seq"], [(1, 4), (8, 16)], ["batch"], "model 'layer'"),
            (5, 8),
            r"^model 'layer': batch=5 is outside the buckets \(1..4\)",
        ),
        (
            model_grid(["batch", "seq"], [(1, 4), (8, 16)], ["batch"], "model 'layer'"),
            (2, 17),
            r"^model 'layer': seq=17 is outside the buckets \(1..16\)",  # range first
        ),
        (
            model_grid(["batch", "seq"], [(1, 4), (8, 16)], ["batch"], "model 'layer'"),
            (2, 9),
            r"^model 'layer': seq=9 is not a bucket size \[8, 16\], and seq may not be padded "
            r"\(add it to the recipe's pad",
        ),
        (
            pipeline_grid(["M"], [BOUNDS], "pipeline 'mlp'"),
            (0,),
            r"M=0 is outside the buckets \(1..256\)",
        ),
    ],
)
def test_past_the_last_bucket_is_refused_with_one_message(
    grid: BucketGrid, sizes: tuple[int, ...], message: str
) -> None:
    with pytest.raises(ArgumentError, match=message):
        grid.index(sizes)


def test_kernels_clamp_pipelines_pad_models_pad_only_what_the_recipe_lets_them() -> None:
    assert kernel_grid(["M"], [BOUNDS]).policies == (Policy.CLAMP,)
    assert pipeline_grid(["M", "N"], [BOUNDS, BOUNDS]).policies == (Policy.PAD, Policy.PAD)
    grid = model_grid(["batch", "seq"], [(1, 4), (8, 16)], ["seq"])
    assert grid.policies == (Policy.EXACT, Policy.PAD)
    assert grid.locate((4, 9)) == (3, False)  # seq 9 padded up to 16
    assert kernel_grid(["M"], [BOUNDS]).index((10**9,)) == 2


def test_row_major_order() -> None:
    grid = BucketGrid(("a", "b", "c"), ((1, 2), (10, 20, 30), (5,)), Policy.PAD)
    assert len(grid) == 6
    assert list(grid) == [(1, 10, 5), (1, 20, 5), (1, 30, 5), (2, 10, 5), (2, 20, 5), (2, 30, 5)]
    assert [grid.bounds_of(i) for i in range(len(grid))] == list(grid)
    assert [grid.index(b) for b in grid] == list(range(len(grid)))
    assert grid.named(4) == {"a": 2, "b": 20, "c": 5}
    with pytest.raises(IndexError):
        grid.bounds_of(6)
    empty = kernel_grid([], [])  # a kernel without bucket keys: one bucket
    assert (len(empty), list(empty), empty.index(())) == (1, [()], 0)


@pytest.mark.parametrize(
    ("dims", "bounds", "policy"),
    [
        (("M",), ((16, 1),), Policy.PAD),  # not ascending
        (("M",), ((),), Policy.PAD),  # empty
        (("M", "M"), ((1,), (2,)), Policy.PAD),  # a dimension twice
        (("M",), ((1,), (2,)), Policy.PAD),  # more bounds than dimensions
        (("M", "N"), ((1,), (2,)), (Policy.PAD,)),  # a policy short
    ],
)
def test_bad_grids_are_refused(
    dims: tuple[str, ...], bounds: tuple[tuple[int, ...], ...], policy: Policy
) -> None:
    with pytest.raises(ValueError, match="bucket"):
        BucketGrid(dims, bounds, policy)


def test_matching_chooses_buckets_by_size_in_row_major_order() -> None:
    grid = pipeline_grid(["M", "N"], [BOUNDS, (8, 64)], "pipeline 'p'")
    assert grid.matching({}) == list(range(6))
    assert grid.matching({"M": [2, 16, 200], "N": 64}) == [3, 5]
    assert grid.matching({"N": [1]}) == [0, 2, 4]
    assert grid.matching({"M": []}) == []
    with pytest.raises(ArgumentError, match=r"^pipeline 'p': warmup\(\): 'K' is not a dimension"):
        grid.matching({"K": [1]})
    with pytest.raises(ArgumentError, match="M=300 is outside the buckets"):
        grid.matching({"M": [300]})  # a size a call would be refused at
    assert kernel_grid(["M"], [BOUNDS]).matching({"M": [300]}) == [2]


def test_warm_prepares_each_chosen_bucket_and_counts_distinct_things() -> None:
    grid = kernel_grid(["M"], [BOUNDS])
    shared, own = object(), object()
    prepared: list[int] = []

    def prepare(index: int) -> list[object]:
        prepared.append(index)
        return [shared] if index < 2 else [shared, own]

    assert warm(grid, {}, prepare) == 2
    assert prepared == [0, 1, 2]
    assert warm(grid, {"M": 1}, prepare) == 1


sorted_bounds = st.lists(st.integers(1, 300), min_size=1, max_size=5, unique=True).map(sorted)


def brute_force(
    bounds: Sequence[Sequence[int]], policies: Sequence[Policy], values: list[int]
) -> int | None:
    """The first bucket, in iteration order, whose every bound holds its value (a clamped
    value past the last bound counting as the last bound); None where a policy refuses."""
    want = []
    for b, p, v in zip(bounds, policies, values, strict=True):
        if p is Policy.CLAMP:
            want.append(min(v, b[-1]))
        elif not 1 <= v <= b[-1] or (p is Policy.EXACT and v not in b):
            return None
        else:
            want.append(v)
    for i, bucket in enumerate(itertools.product(*bounds)):
        if all(x >= v for x, v in zip(bucket, want, strict=True)):
            return i
    raise AssertionError("no bucket holds a value within the bounds")


@given(
    st.lists(st.tuples(sorted_bounds, st.sampled_from(list(Policy))), max_size=3),
    st.data(),
)
def test_index_agrees_with_a_brute_force_search(
    dims: list[tuple[list[int], Policy]], data: st.DataObject
) -> None:
    bounds = [b for b, _ in dims]
    policies = tuple(p for _, p in dims)
    grid = BucketGrid(tuple(f"d{i}" for i in range(len(dims))), tuple(map(tuple, bounds)), policies)
    values = [data.draw(st.integers(-3, 320)) for _ in dims]
    want = brute_force(bounds, policies, values)
    if want is None:
        with pytest.raises(ArgumentError):
            grid.index(values)
        return
    index, exact = grid.locate(values)
    assert index == want
    assert exact == (grid.bounds_of(index) == tuple(values))
    if all(p is Policy.CLAMP for p in policies):
        # what the kernel fast path inlines (loader/fastcall.py) is the same search
        lookup = grid.clamp_lookup()
        assert sum(bisect_left(c, v) * s for (c, s), v in zip(lookup, values, strict=True)) == want
