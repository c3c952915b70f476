"""The one registry: names -> model classes, task classes, ``bdh bench`` suites and ``bdh experiment`` experiments.

A run config says ``model: {name: bdh}`` or ``task: {name: mqar}``; a model folder's ``config.json`` says
``model_type: bdh``; ``bdh bench recall`` and ``bdh experiment scaling`` name a suite and an experiment. All are
looked up here, and nowhere else. The built-in entries are the tables below, written once as ``"module:Class"``
(a suite or an experiment: ``"module"``) and imported on first use (so naming a model imports its module only);
a model's key is its class's ``model_type``. Code outside the package adds its own with `register_model` /
`register_task` / `register_suite` / `register_experiment` (see CONTRIBUTING.md). The command line's help of a
suite or an experiment is its module docstring's first paragraph (`summary`), read without importing it.
"""

from __future__ import annotations

import ast
import importlib
import importlib.util
from types import ModuleType

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
    "induction": "bdh.tasks.induction:Induction",
    "recall_gap": "bdh.tasks.recall_gap:RecallGap",
}

#: built-in ``bdh bench`` suites: name -> module (`bdh.bench.spec` says what a suite module has)
BUILTIN_SUITES: dict[str, str] = {
    "recall": "bdh.bench.recall",
    "boardpath": "bdh.bench.boardpath",
    "sudoku": "bdh.bench.sudoku",
}

#: built-in ``bdh experiment`` experiments: name -> module (a ``Config`` and ``run(config, out, log=...)``)
BUILTIN_EXPERIMENTS: dict[str, str] = {
    "synapses": "bdh.experiments.synapses",
    "merge": "bdh.experiments.merge",
    "no-bptt": "bdh.experiments.nobptt",
    "scaling": "bdh.experiments.scaling",
    "long-context": "bdh.experiments.longcontext",
    "relatives": "bdh.experiments.relatives",
    "length": "bdh.experiments.length",
}

_ADDED: dict[str, dict[str, object]] = {"model": {}, "task": {}, "suite": {}, "experiment": {}}
_BUILTIN = {"model": BUILTIN_MODELS, "task": BUILTIN_TASKS, "suite": BUILTIN_SUITES, "experiment": BUILTIN_EXPERIMENTS}


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


def register_suite(name: str, module: ModuleType) -> ModuleType:
    """Make a ``bdh bench`` suite module (what `bdh.bench.spec` lists) known as ``name``."""
    return _add("suite", name, module)


def register_experiment(name: str, module: ModuleType) -> ModuleType:
    """Make a ``bdh experiment`` module (a ``Config`` and ``run(config, out, log=...)``) known as ``name``."""
    return _add("experiment", name, module)


def _add(kind: str, name: str, cls: object) -> object:
    if name in _BUILTIN[kind] or _ADDED[kind].get(name, cls) is not cls:
        raise UserError(f"register_{kind}: the name {name!r} is taken")
    _ADDED[kind][name] = cls
    return cls


def _get(kind: str, name: object) -> object:
    if isinstance(name, str) and name in _ADDED[kind]:
        return _ADDED[kind][name]
    if not isinstance(name, str) or name not in _BUILTIN[kind]:
        raise UserError(
            f"unknown {kind} {name!r}{did_you_mean(name, names(kind))}; known {kind}s: {', '.join(names(kind))}"
        )
    module, _, attr = _BUILTIN[kind][name].partition(":")
    return getattr(importlib.import_module(module), attr) if attr else importlib.import_module(module)


def names(kind: str) -> list[str]:
    """The known names of ``kind`` (``model``, ``task``, ``suite`` or ``experiment``): a model's or a task's
    sorted; a suite's or an experiment's in the order of the table (the command line lists them so), added
    ones after."""
    known = [*_BUILTIN[kind], *(n for n in _ADDED[kind] if n not in _BUILTIN[kind])]
    return known if kind in ("suite", "experiment") else sorted(known)


def get_model(name: object) -> type:
    """The model class registered as ``name`` (a ``model_type``)."""
    return _get("model", name)  # type: ignore[return-value]


def get_task(name: object) -> type:
    """The task class registered as ``name``."""
    return _get("task", name)  # type: ignore[return-value]


def get_suite(name: object) -> ModuleType:
    """The ``bdh bench`` suite module registered as ``name``."""
    return _get("suite", name)  # type: ignore[return-value]


def get_experiment(name: object) -> ModuleType:
    """The ``bdh experiment`` module registered as ``name``."""
    return _get("experiment", name)  # type: ignore[return-value]


def _source_tree(kind: str, name: str) -> ast.Module:
    """The parsed source of a built-in suite's or experiment's module (a package: its ``__init__``), unimported."""
    spec = importlib.util.find_spec(_BUILTIN[kind][name])
    if spec is None or spec.origin is None:
        raise UserError(f"{kind} {name!r}: its module {_BUILTIN[kind][name]} is not found")
    with open(spec.origin, encoding="utf-8") as f:
        return ast.parse(f.read())


def summary(kind: str, name: str) -> str:
    """The help line of a suite or an experiment: its module docstring's first paragraph on one line, without a
    leading ````bdh bench NAME``:`` (read from the source for a built-in one, so that ``bdh --help`` imports
    nothing heavy)."""
    added = _ADDED[kind].get(name)
    doc = added.__doc__ if added is not None else ast.get_docstring(_source_tree(kind, name))
    first = " ".join((doc or name).strip().split("\n\n")[0].split())
    head, sep, rest = first.partition(": ")
    return rest if sep and head.startswith("``") and head.endswith("``") else first


def declares(kind: str, name: str, attr: str) -> bool:
    """Whether a suite's or an experiment's module defines (or imports) the top-level name ``attr``: what it can
    do, as its module declares it (e.g. ``prepare_resume``: an experiment that ``--resume`` continues)."""
    added = _ADDED[kind].get(name)
    if added is not None:
        return hasattr(added, attr)
    return attr in top_level(_source_tree(kind, name))


def top_level(tree: ast.Module) -> dict[str, ast.AST]:
    """The names a module's top level binds (assignments, definitions, imports) -> their node."""
    found: dict[str, ast.AST] = {}
    for node in tree.body:
        if isinstance(node, (ast.FunctionDef, ast.ClassDef)):
            found[node.name] = node
        elif isinstance(node, (ast.Assign, ast.AnnAssign)):
            for t in node.targets if isinstance(node, ast.Assign) else [node.target]:
                if isinstance(t, ast.Name):
                    found[t.id] = node
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            for a in node.names:
                found[a.asname or a.name.split(".")[0]] = node
    return found


def constant(kind: str, name: str, attr: str, default: object = None) -> object:
    """A literal top-level constant of a suite's or an experiment's module (e.g. a suite's ``FLAGS``), read from
    the source of a built-in one; ``default`` when the module has none."""
    added = _ADDED[kind].get(name)
    if added is not None:
        return getattr(added, attr, default)
    node = top_level(_source_tree(kind, name)).get(attr)
    if not isinstance(node, (ast.Assign, ast.AnnAssign)) or node.value is None:
        return default
    return ast.literal_eval(node.value)
