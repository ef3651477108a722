"""Package attributes imported on first use (PEP 562), so that importing a package's light config module
does not import torch: `adwm config show` composes the schema in about a second."""

from __future__ import annotations

from collections.abc import Callable
from importlib import import_module
from typing import Any


def lazy_exports(package: str, where: dict[str, str]) -> Callable[[str], Any]:
    """A module `__getattr__` for `package` that imports each name of `where` from its module on first use."""

    def __getattr__(name: str) -> Any:
        if name not in where:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        return getattr(import_module(where[name]), name)

    return __getattr__
