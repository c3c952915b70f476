"""Names -> model classes and names -> task classes, so a run config can say ``model: bdh`` or
``task: mqar``. Models and tasks register themselves with the decorators below when their module is
imported; `bdh.registry.load_all` imports every built-in module once.
"""

from __future__ import annotations

import importlib
from typing import Callable, TypeVar

from bdh.errors import UserError

T = TypeVar("T", bound=type)

MODELS: dict[str, type] = {}
TASKS: dict[str, type] = {}

#: modules that register built-in models and tasks when imported
BUILTIN_MODULES: list[str] = [
    "bdh.model.bdh",
    "bdh.tasks.mqar",
    "bdh.tasks.text",
    "bdh.tasks.boardpath",
    "bdh.tasks.sudoku",
    "bdh.tasks.repeat",
    "bdh.baselines.gpt",
    "bdh.baselines.baseconv",
    "bdh.baselines.hyperset",
]


def register_model(name: str) -> Callable[[T], T]:
    """Class decorator: make a model class (built as ``cls(config)``, with ``cls.config_class``) known as ``name``."""

    def deco(cls: T) -> T:
        MODELS[name] = cls
        return cls

    return deco


def register_task(name: str) -> Callable[[T], T]:
    """Class decorator: make a task class (built as ``cls(config)``, with ``cls.config_class``) known as ``name``."""

    def deco(cls: T) -> T:
        TASKS[name] = cls
        return cls

    return deco


def load_all() -> None:
    """Import every built-in model and task module (each registers itself)."""
    for module in BUILTIN_MODULES:
        importlib.import_module(module)


def get_model(name: str) -> type:
    load_all()
    if name not in MODELS:
        raise UserError(f"unknown model {name!r}; known models: {', '.join(sorted(MODELS))}")
    return MODELS[name]


def get_task(name: str) -> type:
    load_all()
    if name not in TASKS:
        raise UserError(f"unknown task {name!r}; known tasks: {', '.join(sorted(TASKS))}")
    return TASKS[name]
