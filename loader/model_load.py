"""The torch side of serving a model bucket, shared by the runner (loader/model.py) and the
build's compile, verify and select stages (aot/model/): which of a bundle's artifacts
serve the module's device, the module's weights checked and bound, one bucket's artifact
loaded, a bucket captured as a CUDA graph, and the shape helpers that pad and slice.

``torch`` is passed in by the caller (loader/model.py imports it when ``load_model`` is
called); nothing here imports it, so ``import loader`` never pulls it in.

An artifact loads through one of two backends. ``inductor``:
``torch._inductor.CompiledArtifact.load``, with no Inductor code generation and no Triton
compilation (Inductor still builds the artifact's C++ at load on the CPU), but torch's
compiler stack imported. ``aoti``: ``torch._C._aoti.AOTIModelPackageLoader``, a shared
library loaded by torch's C++ runtime, the weights bound by name with
``load_constants``, and no compiler module imported at all.
"""

from __future__ import annotations

import os
import tempfile
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from .args import TORCH_NAMES
from .dispatch import name_match
from .errors import ArgumentError, BundleError, NoTargetError
from .format import BundleFile
from .manifest import Manifest, ModelArtifacts, ModelSpec

# How a capture treats other threads' CUDA calls (cudaStreamCaptureMode). "global", torch's
# default, makes a cudaMalloc or cudaFree in ANY thread during a capture fail, and the
# capture with it: a service thread that allocates while a bucket is captured at first use.
# "thread_local" forbids them only in the capturing thread, which runs nothing but the
# bucket; the caching allocator keeps other streams' memory out of the graph's pool.
CAPTURE_MODE = "thread_local"


def capture_graph(
    torch: Any, run: Callable[..., list[Any]], inputs: Sequence[Any], device: Any
) -> tuple[Any, list[Any]]:
    """``run(*inputs)`` captured as a CUDA graph: (graph, its static outputs). Replaying it
    reads ``inputs`` (static buffers) and overwrites the outputs. The build times a bucket's
    graph candidates this way too (aot/model/select.py)."""
    side = torch.cuda.Stream(device)
    side.wait_stream(torch.cuda.current_stream(device))
    with torch.cuda.stream(side):
        # the first call loads kernels and sets up cuBLAS; it must not be captured
        run(*inputs)
    torch.cuda.current_stream(device).wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph, capture_error_mode=CAPTURE_MODE):
        outputs = run(*inputs)
    return graph, outputs


def eager_call(module: Any) -> Callable[..., list[Any]]:
    """The module's own forward as a bucket's callable: the list of its outputs."""

    def run(*xs: Any) -> list[Any]:
        out = module(*xs)
        return list(out) if isinstance(out, tuple | list) else [out]

    return run


def concrete(shape: Sequence[str | int], sizes: Mapping[str, int]) -> tuple[int, ...]:
    """A symbolic shape (sizes and dimension names) at the given dimension sizes."""
    return tuple(sizes[d] if isinstance(d, str) else d for d in shape)


def leading(shape: Sequence[int]) -> tuple[slice, ...]:
    """The index of a tensor's first ``shape[i]`` elements along each dimension: the part
    of a padded tensor that is not padding."""
    return tuple(slice(0, n) for n in shape)


def pad_zeros(torch: Any, x: Any, shape: tuple[int, ...]) -> Any:
    """``x`` padded with zeros at the end of each dimension up to ``shape``."""
    if tuple(x.shape) == shape:
        return x
    padded = torch.zeros(shape, dtype=x.dtype, device=x.device)
    padded[leading(x.shape)] = x
    return padded


def load_artifact(
    torch: Any, backend: str, data: bytes, weights: Sequence[Any], names: Sequence[str],
    device: Any,
) -> Callable[..., list[Any]]:  # fmt: skip
    """One bucket's artifact (an entry's bytes) as a callable over the model's inputs that
    returns the list of outputs. ``weights`` are the module's tensors in the manifest's
    order, ``names`` their names; both backends read them in place. The build verifies
    each bucket through this same function."""
    with tempfile.TemporaryDirectory(prefix="aotc-model-") as tmp:
        path = os.path.join(tmp, "model.pt2" if backend == "aoti" else "artifact.bin")
        with open(path, "wb") as f:
            f.write(data)
        if backend == "aoti":
            # The package's shared library is loaded by torch's C++ runtime: no Python
            # compiler stack is imported. Single-threaded: the caller serializes a bucket's
            # calls, and CUDA graphs capture it.
            index = device.index if device.type == "cuda" and device.index is not None else -1
            runner = torch._C._aoti.AOTIModelPackageLoader(path, "model", True, 1, index)
            by_name = dict(zip(names, weights, strict=True))
            wanted = list(runner.get_constant_fqns())
            unknown = [n for n in wanted if n not in by_name]
            if unknown:
                raise BundleError(f"the package wants constants the manifest does not list: "
                                  f"{unknown[:5]}")  # fmt: skip
            constants = {n: by_name[n] for n in wanted}
            # (map, use_inactive, check_full_update, user_managed): the module's tensors,
            # used in place. (A call pybind refuses formats every tensor into its message,
            # a sixth of a second for the layer: so no try-and-fall-back here.)
            runner.load_constants(constants, False, True, True)
            return lambda *xs: list(runner.run(list(xs)))
        art = torch._inductor.CompiledArtifact.load(path=path, format="binary")
        lifted = list(weights)
        return lambda *xs: list(art(*lifted, *xs))


def named_tensors(module: Any) -> dict[str, Any]:
    """A module's parameters and buffers by name, shared ones under every name (the names
    torch.export lifts weights by)."""
    named = dict(module.named_parameters(remove_duplicate=False))
    named.update(dict(module.named_buffers(remove_duplicate=False)))
    return named


def module_device(module: Any, file: BundleFile) -> Any:
    for t in (*module.parameters(), *module.buffers()):
        return t.device
    raise BundleError(f"{file.path}: the module has no parameters or buffers to bind")


def choose_artifacts(manifest: Manifest, spec: ModelSpec, device: Any, torch: Any,
            file: BundleFile) -> ModelArtifacts:  # fmt: skip
    kind = device.type
    have = ", ".join(f"{a.target} ({a.device}, {a.device_name}, torch {a.torch})"
                     for a in spec.artifacts) or "nothing"  # fmt: skip
    same_kind = [a for a in spec.artifacts if a.device == kind]
    if kind == "cuda":
        name = torch.cuda.get_device_name(device)
        cc = tuple(torch.cuda.get_device_capability(device))
        same_kind = [a for a in same_kind if a.cc == cc]
        targets = {t.name: t for t in manifest.targets}
        same_kind.sort(key=lambda a: -name_match(targets[a.target], name)
                       if a.target in targets else 0)  # fmt: skip
        here = f"{name} (sm_{cc[0]}{cc[1]})"
    else:
        here = kind
    if not same_kind:
        raise NoTargetError(f"{file.path}: no model artifacts for {here}; the bundle holds: "
                            f"{have}. Build the recipe on such a device")  # fmt: skip
    chosen = same_kind[0]
    if chosen.torch != torch.__version__:
        raise BundleError(
            f"{file.path}: the model was built with torch {chosen.torch}; this process has "
            f"torch {torch.__version__}. Inductor artifacts load only into the torch that "
            "built them: rebuild the bundle with this torch"
        )
    return chosen


def bind_weights(
    spec: ModelSpec, module: Any, device: Any, torch: Any, file: BundleFile
) -> list[Any]:
    named = named_tensors(module)
    want = {w.name for w in spec.weights}
    missing = [w.name for w in spec.weights if w.name not in named]
    extra = sorted(n for n in named if n not in want)
    if missing or extra:
        parts = []
        if missing:
            parts.append(f"lacks {', '.join(missing[:5])}{' ...' if len(missing) > 5 else ''}")
        if extra:
            parts.append(f"has {', '.join(extra[:5])}{' ...' if len(extra) > 5 else ''} too")
        raise ArgumentError(f"{file.path}: the module is not the one the model was built from "
                            f"({spec.source}): it {'; it '.join(parts)}")  # fmt: skip
    out = []
    for w in spec.weights:
        t = named[w.name]
        dt = getattr(torch, TORCH_NAMES.get(w.dtype, w.dtype), None)
        problems = []
        if tuple(t.shape) != w.shape:
            problems.append(f"shape {list(t.shape)}, expected {list(w.shape)}")
        if t.dtype != dt:
            problems.append(f"dtype {t.dtype}, expected {w.dtype}")
        if tuple(t.stride()) != w.stride and tuple(t.shape) == w.shape:
            problems.append(f"strides {list(t.stride())}, expected {list(w.stride)}")
        if t.device != device:
            problems.append(f"device {t.device}, the rest of the module on {device}")
        if problems:
            raise ArgumentError(f"{file.path}: the module's {w.kind} {w.name!r} has "
                                f"{'; '.join(problems)}")  # fmt: skip
        out.append(t.detach())
    return out
