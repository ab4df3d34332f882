"""``aotc init FILE.py``: a draft recipe for every Triton kernel a file defines.

The kernel objects say a lot: the parameters, ``@triton.autotune``'s configs (the search
space) and key (the bucket keys), the ``@triton.heuristics`` rules (translated into the
loader's expressions, as a build would). The source says more as guesses (which arguments
are pointers and sizes, the grid the host wrapper launches with: aot/kernelscan.py). What
only the author knows (the grid, the example arguments, representative sizes) is left as
a ``"TODO"`` string, which ``aotc plan`` refuses, naming the key (aot/recipe/placeholders.py);
suggested values to review carry a ``# TODO`` comment.
"""

from __future__ import annotations

import os
import re
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType

from loader.format import write_atomic

from .errors import UsageError
from .init_kernel import KernelDraft, draft_kernel
from .init_toml import comment, toml_value
from .kernelfile import KernelImportError, import_failure, load_module
from .kernelscan import find_kernels, launches
from .output import check_output
from .recipe.placeholders import PLACEHOLDER
from .recipe.validate import IDENT, NAME
from .targets import UnknownTarget, resolve

# toml_value is imported from here too (tests).
__all__ = ["DEFAULT_TARGETS", "Draft", "KernelDraft", "draft", "init", "toml_value"]

DEFAULT_TARGETS = ("sm_80", "sm_90")


@dataclass(frozen=True)
class Draft:
    source: Path
    output: Path
    text: str
    kernels: tuple[KernelDraft, ...]
    skipped: tuple[str, ...] = ()  # module-level objects that are no kernel, and why

    def summary(self) -> str:
        n = len(self.kernels)
        lines = [f"a draft recipe for {n} kernel{'s' if n > 1 else ''} of {self.source.name}:"]
        for k in self.kernels:
            lines.append(f"  {k.name} ({k.attr}: {k.layers})")
            lines.append(f"    fill in: {', '.join(k.fill) or 'nothing'}")
            if k.check:
                lines.append(f"    check: {', '.join(k.check)}")
        lines += [f"  skipped {s}" for s in self.skipped]
        lines.append(f'next: replace every "{PLACEHOLDER}" in {self.output.name}, then run '
                     f"`aotc plan {self.output.name}`")  # fmt: skip
        return "\n".join(lines)


def init(file: Path, output: Path | None, targets: Sequence[str], force: bool) -> Draft:
    """Draft the recipe for ``file`` and write it (refusing to overwrite unless ``force``)."""
    out = output if output is not None else file.with_suffix(".toml")
    if os.path.lexists(out) and os.path.lexists(file) and os.path.samefile(out, file):
        raise UsageError(f"-o {out} is the kernel file itself; name a .toml file")
    if os.path.lexists(out) and not force:
        raise UsageError(f"{out} exists; pass --force to overwrite it, or -o to write elsewhere")
    check_output(out)
    d = draft(file, out, targets)
    write_atomic(out, d.text.encode())
    return d


def draft(file: Path, output: Path | None = None, targets: Sequence[str] = ()) -> Draft:
    """The draft recipe for the kernels ``file`` defines, to be written at ``output``
    (default: beside it, ``FILE.toml``); nothing is written."""
    out = output if output is not None else file.with_suffix(".toml")
    gpus = _targets(targets or DEFAULT_TARGETS)
    module = _import(file)
    found, skipped = find_kernels(module, file)
    if not found:
        why = f" (skipped {'; '.join(skipped)})" if skipped else ""
        raise UsageError(
            f"{file}: defines no Triton kernel at module level (a @triton.jit function, or one "
            f"under @triton.autotune / @triton.heuristics){why}; name the file that defines "
            "the kernels"
        )
    source = Path(os.path.relpath(file.resolve(), out.resolve().parent)).as_posix()
    names: set[str] = set()
    kernels = []
    for attr, k in found:
        name = _unique(_recipe_name(attr), names)
        kernels.append(draft_kernel(name, attr, k, f"{source}:{attr}", launches(file, attr)))
    text = _header(file, out, gpus, len(kernels))
    text += "".join("\n" + "\n".join(k.lines) + "\n" for k in kernels)
    return Draft(file, out, text, tuple(kernels), tuple(skipped))


def _targets(names: Sequence[str]) -> list[str]:
    for name in names:
        try:
            resolve(name)
        except UnknownTarget as exc:
            raise UsageError(f"--target: {exc}") from None
    return list(dict.fromkeys(names))


def _import(file: Path) -> ModuleType:
    """The kernel file, imported as ``aotc plan`` imports it, with the same errors."""
    if not file.is_file():
        raise UsageError(f"{file}: no such file; name the Python file that defines the kernels")
    try:
        return load_module(file)
    except KernelImportError as exc:
        raise UsageError(f"{file}: {exc}") from None
    except Exception as exc:
        raise UsageError(f"{file}: {import_failure(file.name, exc)}") from None


def _recipe_name(attr: str) -> str:
    name = attr.strip("_").removesuffix("_kernel").removeprefix("kernel_") or attr.strip("_")
    name = re.sub(r"[^A-Za-z0-9_]", "_", name)
    return name if IDENT.match(name) else f"k_{name}" if name else "kernel"


def _unique(name: str, taken: set[str]) -> str:
    out, i = name, 2
    while out in taken:
        out, i = f"{name}_{i}", i + 1
    taken.add(out)
    return out


def _header(file: Path, out: Path, targets: list[str], n: int) -> str:
    bundle = re.sub(r"[^A-Za-z0-9_.+-]", "-", file.stem).lstrip("_.+-") or "kernels"
    bundle = bundle if NAME.match(bundle) else "kernels"
    paragraphs = (
        f"A draft recipe from `aotc init {file.name}` for the {n} kernel{'s' if n > 1 else ''} "
        f'it defines. Replace every "{PLACEHOLDER}" value, review each line marked # TODO, '
        f"then run `aotc plan {out.name}`: it names any placeholder left. The keys are "
        "described in recipes/README.md.",
        'inputs = "file.py:function", where function(sizes, dtypes, device="cuda", '
        "config=None) returns the kernel's runtime arguments in order: tensors on `device` "
        "for the pointers, Python ints and floats for the rest. `sizes` holds every bucket "
        'key and size of the kernel, `dtypes` one element type per dtype variable ({"T": '
        "\"fp16\"}), `config` the candidate's meta-parameters while tuning. The arguments' "
        "types are inferred from them: no [kernel.signature] is needed.",
        "reference (optional; it verifies the tuned configs): reference(*args) returns the "
        "expected contents of the output arguments by name, computed in float64.",
        "grid: the host wrapper's launch grid (a kernel object does not hold it), 1 to 3 "
        "expressions of integer arguments, call values, meta-parameters and NUM_SMS, with "
        "+ - * // %, cdiv, min and max.",
    )
    return (
        "\n#\n".join(comment(p) for p in paragraphs)
        + f'\nformat = 1\n\n[bundle]\nname = {toml_value(bundle)}\nversion = "0.1.0"\n'
        + f"targets = {toml_value(targets)}  # GPUs to build for: products (H100, A100) or archs\n"
    )
