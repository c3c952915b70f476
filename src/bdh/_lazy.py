"""Lazy package attributes (PEP 562): each export's module is imported on first use, so ``--help`` skips PyTorch."""

from __future__ import annotations

import importlib
from collections.abc import Callable
from typing import Any


def exports(
    package: str, table: dict[str, str], namespace: dict[str, Any]
) -> tuple[Callable[[str], Any], Callable[[], list[str]]]:
    """``__getattr__`` and ``__dir__`` for ``package``; ``table``: name -> ``"module"`` or ``"module:attribute"``."""

    def __getattr__(name: str) -> Any:
        if name not in table:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        module_name, _, attribute = table[name].partition(":")
        module = importlib.import_module(module_name, package)
        value = getattr(module, attribute) if attribute else module
        namespace[name] = value  # later lookups skip __getattr__
        return value

    def __dir__() -> list[str]:
        return sorted(set(namespace) | set(table))

    return __getattr__, __dir__
