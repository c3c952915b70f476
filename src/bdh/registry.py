"""The one registry: names -> model classes and names -> task classes.

A run config says ``model: {name: bdh}`` or ``task: {name: mqar}``; a model folder's ``config.json`` says
``model_type: bdh``. Both are looked up here, and nowhere else. The built-in entries are the tables below,
written once as ``"module:Class"`` and imported on first use (so naming a model imports its module only);
a model's key is its class's ``model_type``. Code outside the package adds its own with
`register_model` / `register_task` (see CONTRIBUTING.md).
"""

from __future__ import annotations

import importlib

from bdh.errors import UserError, did_you_mean

#: built-in models: ``model_type`` -> where the class lives
BUILTIN_MODELS: dict[str, str] = {
    "bdh": "bdh.model.bdh:BDH",
    "gpt": "bdh.baselines.gpt:GPT",
    "baseconv": "bdh.baselines.baseconv:BaseConv",
    "hyperset": "bdh.baselines.hyperset:HyperSET",
    "based": "bdh.baselines.based:Based",
    "gla": "bdh.baselines.gla:GLA",
    "mamba": "bdh.baselines.mamba:Mamba",
    "hyena": "bdh.baselines.hyena:Hyena",
    "rwkv": "bdh.baselines.rwkv:RWKV",
}

#: built-in tasks: name -> where the class lives
BUILTIN_TASKS: dict[str, str] = {
    "text": "bdh.tasks.text:TextTask",
    "mqar": "bdh.tasks.mqar:MQAR",
    "boardpath": "bdh.tasks.boardpath:BoardPath",
    "sudoku": "bdh.tasks.sudoku:Sudoku",
    "repeat": "bdh.tasks.repeat:RepeatTask",
}

_ADDED: dict[str, dict[str, type]] = {"model": {}, "task": {}}
_BUILTIN = {"model": BUILTIN_MODELS, "task": BUILTIN_TASKS}


def register_model(cls: type) -> type:
    """Make a model class known by its ``model_type`` (it is built as ``cls(cls.config_class(...))``).

    Usable as a class decorator. A name that is already taken is refused."""
    name = getattr(cls, "model_type", "")
    if not isinstance(name, str) or not name:
        raise UserError(f"register_model: {cls.__name__} has no model_type (the name config.json gives it)")
    return _add("model", name, cls)


def register_task(name: str, cls: type) -> type:
    """Make a task class (built as ``cls(cls.config_class(...))``) known as ``name``."""
    return _add("task", name, cls)


def _add(kind: str, name: str, cls: type) -> type:
    if name in _BUILTIN[kind] or _ADDED[kind].get(name, cls) is not cls:
        raise UserError(f"register_{kind}: the name {name!r} is taken")
    _ADDED[kind][name] = cls
    return cls


def _get(kind: str, name: object) -> type:
    if isinstance(name, str) and name in _ADDED[kind]:
        return _ADDED[kind][name]
    if not isinstance(name, str) or name not in _BUILTIN[kind]:
        raise UserError(
            f"unknown {kind} {name!r}{did_you_mean(name, names(kind))}; known {kind}s: {', '.join(names(kind))}"
        )
    module, attr = _BUILTIN[kind][name].split(":")
    return getattr(importlib.import_module(module), attr)


def names(kind: str) -> list[str]:
    """The known names of ``kind`` (``model`` or ``task``), sorted."""
    return sorted({*_BUILTIN[kind], *_ADDED[kind]})


def get_model(name: object) -> type:
    """The model class registered as ``name`` (a ``model_type``)."""
    return _get("model", name)


def get_task(name: object) -> type:
    """The task class registered as ``name``."""
    return _get("task", name)
