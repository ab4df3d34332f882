"""What the held-out folders' check.py share (run_library.sh places it beside them): the
verdict on one output, the time per call, and the closing table of the bundle against the
library's own wrapper."""

from collections.abc import Callable
from typing import Any


def verdict(at: str, library: str, ours: Any, theirs: Any, want: Any,
            want_theirs: Any = None) -> int:  # fmt: skip
    """Print whether an output is right, 1 if not: the bundle's and the library wrapper's
    both within 1e-2 of float64, norm-relative (one rounding to fp16 or bf16 is about
    4e-3), every element written. ``want_theirs``: what the wrapper returns where it
    differs (a reduced loss)."""
    import torch

    pairs = ((ours, want), (theirs, want if want_theirs is None else want_theirs))
    errors = [float((x.double() - w).norm()) / (float(w.norm()) or 1.0) for x, w in pairs]
    ok = bool(torch.isfinite(ours).all()) and errors[0] <= 1e-2 and errors[1] <= 1e-2
    print(f"{at} error ours {errors[0]:.1e} {library} {errors[1]:.1e} {'ok' if ok else 'WRONG'}")
    return 0 if ok else 1


def us(fn: Callable[[], Any]) -> float:
    """µs per call: the median of ``triton.testing.do_bench``."""
    import triton.testing

    return 1e3 * float(triton.testing.do_bench(fn, return_mode="median"))


def summary(which: str, setting: str, library: str, rows: list[tuple[str, float, float]],
            failed: int) -> int:  # fmt: skip
    """Print the times of ``rows`` (sizes, bundle µs, library µs) side by side and whether
    every output was right; the exit code."""
    print(f"\n{which}{setting}: µs per call (do_bench medians; {library}'s wrapper allocates "
          "its output)")  # fmt: skip
    ratio = f"{library}/bundle"
    print(f"{'sizes':16} {'bundle':>8} {library:>8} {ratio:>{len(ratio) + 1}}")
    for at, ours, lib in rows:
        print(f"{at:16} {ours:8.1f} {lib:8.1f} {lib / ours:{len(ratio)}.2f}x")
    print(f"\n{which}: {'all outputs right' if not failed else f'{failed} WRONG'}")
    return 1 if failed else 0


def refused(what: str, call: Callable[[], Any]) -> None:
    """Print whether ``call`` (a bundle's kernel at sizes it was not built for) is refused
    with the loader's ArgumentError, as it must be, or wrongly runs."""
    import loader

    try:
        call()
    except loader.ArgumentError as exc:
        print(f"{what} refused: {str(exc).splitlines()[0][:160]}")
    else:
        print(f"{what} WRONGLY run")
