"""The restricted expression language: what it computes and what it refuses."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from loader.expr import ExprError, compile_function, parse


@pytest.mark.parametrize(
    ("text", "env", "value"),
    [
        (
            "cdiv(M, BLOCK_M) * cdiv(N, BLOCK_N)",
            {"M": 100, "N": 64, "BLOCK_M": 16, "BLOCK_N": 64},
            7,
        ),
        ("min(M, 8) + max(N, 3, 4) - 1", {"M": 5, "N": 2}, 8),
        ("-(-M // 4) % 3", {"M": 9}, 0),
        ("NUM_SMS * 2", {"NUM_SMS": 132}, 264),
        ("7", {}, 7),
    ],
)
def test_evaluates(text: str, env: dict[str, int], value: int) -> None:
    assert parse(text).evaluate(env) == value


@pytest.mark.parametrize(
    ("text", "fragment"),
    [
        ("__import__('os')", "call __import__() is not allowed"),
        ("M.bit_length()", "is not allowed"),
        ("M / 2", "'/' is not allowed"),
        ("M ** 2", "operator Pow"),
        ("M if N else 1", "is not allowed"),
        ("[M]", "is not allowed"),
        ("lambda: 1", "is not allowed"),
        ("1.5 * M", "literal 1.5"),
        ("'a'", "literal 'a'"),
        ("cdiv(M)", "cdiv() takes 2 arguments"),
        ("min(M)", "takes at least 2"),
        ("min", "bare name 'min'"),
        ("M < N", "is not allowed"),
        ("M +", "is not a valid expression"),
        ("cdiv(a=M, b=2)", "keyword"),
    ],
)
def test_refuses(text: str, fragment: str) -> None:
    with pytest.raises(ExprError) as e:
        parse(text)
    assert fragment in str(e.value)


def test_predicates_allow_comparisons_only_when_asked() -> None:
    e = parse("BLOCK_M * BLOCK_N <= 128 * 256 and not num_warps > 8", predicate=True)
    assert e.evaluate({"BLOCK_M": 128, "BLOCK_N": 256, "num_warps": 8})
    assert not e.evaluate({"BLOCK_M": 256, "BLOCK_N": 256, "num_warps": 8})


def test_compile_function_folds_constants_and_ignores_unused_params() -> None:
    fn = compile_function(
        [parse("cdiv(M, BLOCK)"), parse("N"), parse("1")], ["ptr", "M", "N"], {"BLOCK": 64}
    )
    assert fn(0xDEAD, 130, 7) == (3, 7, 1)
    with pytest.raises(ExprError, match="unknown name"):
        compile_function([parse("Q")], ["M"])


def test_compiled_functions_are_shared_only_between_identical_inputs() -> None:
    """Variants share their grids: each distinct (expressions, parameters, constants) is
    compiled once, and nothing that differs is ever served the same function."""
    grid = [parse("cdiv(M, BLOCK) * K")]
    fn = compile_function(grid, ["M"], {"BLOCK": 64, "K": 2})
    assert compile_function(grid, ["M"], {"BLOCK": 64, "K": 2}) is fn
    assert fn(130) == (6,)
    assert compile_function(grid, ["M"], {"BLOCK": 64, "K": 3})(130) == (9,)
    assert compile_function(grid, ["M"], {"BLOCK": 128, "K": 2})(130) == (4,)
    assert compile_function(grid, ["M", "N"], {"BLOCK": 64, "K": 2})(130, 0) == (6,)
    assert compile_function([parse("M + K")], ["M"], {"K": 1})(1) == (2,)
    truth = compile_function([parse("M + K")], ["M"], {"K": True})
    assert truth is not compile_function([parse("M + K")], ["M"], {"K": 1})


def test_param_named_like_a_helper_cannot_shadow_it() -> None:
    fn = compile_function([parse("cdiv(x, 2)")], ["cdiv_", "x"])
    assert fn(99, 5) == (3,)


@given(st.integers(0, 10**9), st.integers(1, 10**6))
def test_cdiv_matches_ceil(m: int, b: int) -> None:
    assert parse("cdiv(M, B)").evaluate({"M": m, "B": b}) == -(-m // b) == (m + b - 1) // b


def test_a_predicate_tests_whether_a_name_is_none() -> None:
    """``x is None`` reads only whether a call passed None (``presence``); anything else
    compared with ``is``, or a None test outside a predicate, is refused."""
    e = parse("scale is not None and K % 2 == 0", predicate=True)
    assert e.names == {"scale", "K"} and e.presence == {"scale"}
    assert parse("x is None or x > 3", predicate=True).presence == frozenset()
    fn = compile_function([e], ["scale", "K"])
    assert [fn(s, 4)[0] for s in (None, 0.0, 2.5)] == [False, True, True]
    # A constexpr folds in whatever its value: a string or None can be None-tested.
    assert compile_function([parse("ACT is None", predicate=True)], [], {"ACT": "relu"})() == (
        False,
    )
    assert compile_function([parse("ACT is None", predicate=True)], [], {"ACT": None})() == (True,)
    for text in ("x is 3", "x is y", "(x + 1) is None"):
        with pytest.raises(ExprError, match="not allowed"):
            parse(text, predicate=True)
    with pytest.raises(ExprError, match="not allowed"):
        parse("x is None")
