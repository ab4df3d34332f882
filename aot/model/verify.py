"""Verify: a compiled bucket against eager PyTorch in float64.

Each bucket is checked against the module's float64 copy (the same weights, upcast) at the
bucket's bound and, when the bucket pads a dimension, at a smaller size padded up to the
bucket: padding along a sequence dimension only preserves the outputs when no real
position reads a padded one (causal attention, padding at the end), and the build checks
that rather than trusting the recipe. Both checks run the bytes that ship, loaded by
``loader.model_load.load_artifact``, the loader's own code (see aot/model/compile.py).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from loader.model_load import concrete, leading, pad_zeros

from ..errors import BuildError
from ..recipe import ModelRecipe
from .factory import random_inputs
from .plan import pad_sizes


def flat(out: Any) -> tuple[list[Any], bool]:
    """A forward's outputs as a list, and whether it returned a single tensor."""
    import torch

    if isinstance(out, torch.Tensor):
        return [out], True
    if isinstance(out, tuple | list) and all(isinstance(o, torch.Tensor) for o in out):
        return list(out), False
    raise BuildError(f"[model] forward must return a tensor or a tuple of tensors, got "
                     f"{type(out).__name__}")  # fmt: skip


def rel_err(out: Any, ref: Any) -> float:
    """max |out - ref| / max |ref|, in float64."""
    import torch

    o, r = out.to(torch.float64), ref.to(torch.float64)
    scale = float(r.abs().max()) if r.numel() else 0.0
    return float((o - r).abs().max()) / max(scale, 1e-30) if r.numel() else 0.0


def check_outputs(
    mr: ModelRecipe, got: list[Any], eager: list[Any], sizes: Mapping[str, int], where: str
) -> None:
    """The compiled outputs are as many as eager's, of the shapes ``[model].outputs`` says."""
    if len(got) != len(eager):
        raise BuildError(f"[model] at {where}: the compiled graph returns {len(got)} outputs, "
                         f"eager forward {len(eager)}")  # fmt: skip
    if not mr.outputs:
        return
    if len(mr.outputs) != len(got):
        raise BuildError(f"[model].outputs lists {len(mr.outputs)} shapes; forward returns "
                         f"{len(got)} tensors")  # fmt: skip
    for i, (o, sym) in enumerate(zip(got, mr.outputs, strict=True)):
        want = concrete(sym, sizes)
        if tuple(o.shape) != want:
            raise BuildError(f"[model].outputs[{i}]: {list(sym)} is {list(want)} at {where}, "
                             f"but forward returns shape {list(o.shape)}")  # fmt: skip


def check_error(mr: ModelRecipe, err: float, where: str) -> None:
    if err > mr.tolerance:
        raise BuildError(f"[model] at {where}: compiled outputs differ from eager float64 by "
                         f"{err:.2e} (relative), above the tolerance {mr.tolerance:g}")  # fmt: skip


def check_padding(
    mr: ModelRecipe, run: Callable[..., list[Any]], reference: Any, device: str,
    sizes: Mapping[str, int], gen: Any, where: str,
) -> tuple[str, float] | None:  # fmt: skip
    """Run the bucket on smaller inputs padded with zeros and compare the sliced outputs
    with eager float64 at the smaller size: proves the recipe's ``pad`` safe here. The
    sizes it ran at (``seq=9``) and the error; None when the bucket pads nothing."""
    import torch

    small = pad_sizes(mr, sizes)
    if small == sizes:
        return None
    xs = random_inputs(mr, small, device, gen)
    padded = [pad_zeros(torch, x, concrete(i.shape, sizes))
              for x, i in zip(xs, mr.inputs, strict=True)]  # fmt: skip
    with torch.no_grad():
        got = run(*padded)
        ref, _ = flat(reference(*[x.to(torch.float64) for x in xs]))
    err = 0.0
    for o, r, sym in zip(got, ref, mr.outputs, strict=True):
        o = o[leading(concrete(sym, small))]
        err = max(err, rel_err(o, r))
    shown = ", ".join(f"{d}={small[d]}" for d in mr.dims if small[d] != sizes[d])
    if err > mr.tolerance:
        raise BuildError(
            f"[model].pad: at {shown} padded up to {where} the outputs differ from eager by "
            f"{err:.2e} (relative, tolerance {mr.tolerance:g}). Padding a dimension preserves "
            "the outputs only when no real position reads a padded one (per-sample models "
            "for batch; causal attention with padding at the end for a sequence); remove "
            "that dimension from [model] pad"
        )
    return shown, err
