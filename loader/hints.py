"""A dataclass field's annotation, evaluated when first needed (the codec's ``_Field.hint``).

``typing.get_type_hints`` evaluates every annotation of a class at once. The codec asks for
one field's only when a value comes for it, so that the records of a section a manifest
does not hold (a model, pipelines) are never resolved, and loader/manifest.py can import
their modules on first use, through its module-level ``__getattr__``, which the names here
go through.
"""

from __future__ import annotations

import sys
import typing
from functools import cache
from types import ModuleType
from typing import Any


def resolve(cls: type, name: str) -> Any:
    """The type of the field ``name`` of the dataclass ``cls``: its annotation, evaluated
    in the module of the class of ``cls``'s MRO that declares it (read from the class, not
    with inspect.get_annotations: the loader does not import inspect at start-up)."""
    owner = next(c for c in cls.__mro__ if name in vars(c).get("__annotations__", ()))
    annotation = vars(owner)["__annotations__"][name]
    if not isinstance(annotation, str):
        return annotation
    try:
        return _evaluate(sys.modules[owner.__module__], annotation)
    except NameError:  # e.g. a name of the class's own namespace: typing's full rules
        return typing.get_type_hints(owner, include_extras=True)[name]


@cache
def _evaluate(module: ModuleType, text: str) -> Any:
    """``text`` evaluated in ``module``, once per module object (a module loaded anew under
    the same name is another object, and is evaluated anew)."""
    value = eval(text, vars(module), _Names(module))
    return type(None) if value is None else value


class _Names(dict[str, Any]):
    """A module's names as ``getattr`` finds them, its ``__getattr__`` included: the locals
    an annotation is evaluated in (eval looks a name up in them, then in the globals)."""

    def __init__(self, module: ModuleType):
        super().__init__()
        self.module = module

    def __missing__(self, name: str) -> Any:
        try:
            return getattr(self.module, name)
        except AttributeError:
            raise KeyError(name) from None
