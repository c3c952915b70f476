"""The one registry: names -> model classes, task classes, ``bdh bench`` suites and ``bdh experiment`` experiments.

Built-in entries are the tables below, imported on first use; others are added with `register_model` / `register_task` /
`register_suite` / `register_experiment`. `BUILTIN_HELP` writes out what ``--help`` says of the built-in suites and
experiments, so ``bdh --help`` imports none (a test checks it)."""

from __future__ import annotations

import importlib
from dataclasses import dataclass, field
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
    "deltanet": "bdh.baselines.deltanet:DeltaNet",
    "gated-deltanet": "bdh.baselines.deltanet:GatedDeltaNet",
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


@dataclass(frozen=True)
class Help:
    """What ``--help`` says of a suite or experiment: ``summary`` (its docstring's first paragraph), ``flags`` (a
    suite's ``FLAGS``), ``resumes`` (the module has ``prepare_resume``)."""

    summary: str
    flags: dict[str, dict[str, object]] = field(default_factory=dict)
    resumes: bool = False


#: the help of the built-in suites and experiments, written out so that ``--help`` imports none of their modules
#: (they import PyTorch); `help_from_module` gives the same from an imported module, and a test compares the two
BUILTIN_HELP: dict[str, dict[str, Help]] = {
    "suite": {
        "recall": Help(
            "BDH, GPT and BaseConv on an MQAR sweep (Zoology's protocol, CPU-sized).",
            flags={
                "bdh_damping": {
                    "choices": ("alibi", "multiscale"),
                    "help": "BDH's state damping U (default: none, the official model; docs/long-context.md)",
                }
            },
        ),
        "boardpath": Help("BDH, GPT and Hyper-SET on shortest paths through boards with walls."),
        "sudoku": Help(
            "BDH, GPT and Hyper-SET on a ladder of Sudoku difficulties, and the test-time depth sweep.",
            flags={
                "rungs": {
                    "metavar": "LO-HI,...",
                    "help": "generated rungs, comma-separated (default 60-70,45-50,34-40)",
                },
                "csv_rungs": {
                    "metavar": "CSV,...",
                    "help": "puzzle,solution CSV files scored as further rungs (e.g. sudoku-hard's or Sudoku-Extreme's "
                    "test.csv)",
                },
                "train_csv": {
                    "metavar": "CSV",
                    "help": "train on this CSV's boards (augmented) instead of generated ones",
                },
            },
        ),
    },
    "experiment": {
        "synapses": Help("Monosemantic synapses (paper section 6.3, Figs. 12-13, appendix B.3) at laptop scale."),
        "merge": Help("Model merging by concatenation (paper section 7.1, appendix B.4, Table 2), with two controls."),
        "no-bptt": Help("Training without backpropagation through time (paper section 7.2)."),
        "scaling": Help(
            "BDH-GPU against a GPT-2-style Transformer at equal parameters, across sizes (paper section 4.2, Fig. 7, "
            "appendix B.2).",
            resumes=True,
        ),
        "long-context": Help(
            "BDH past its training window: why the recurrent state breaks, and recipes that keep it reading.",
            resumes=True,
        ),
        "relatives": Help(
            "BDH among its relatives: Zoology's MQAR frontier, a byte-level language model, and what each part of "
            "BDH is worth.",
            resumes=True,
        ),
        "length": Help(
            "Memory past the training length: induction heads and recall through a gap, for BDH and the zoo. Its "
            "capacity map (facts; the recipe of docs/long-context.md): about 1 h of training a count, reads 25 min to "
            "4k and 45 min at 2^20 (one thread).",
            resumes=True,
        ),
    },
}

_ADDED: dict[str, dict[str, object]] = {"model": {}, "task": {}, "suite": {}, "experiment": {}}
_BUILTIN = {"model": BUILTIN_MODELS, "task": BUILTIN_TASKS, "suite": BUILTIN_SUITES, "experiment": BUILTIN_EXPERIMENTS}


def register_model(cls: type) -> type:
    """Make a model class known by its ``model_type`` (usable as a decorator); a taken name is refused."""
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


def _unknown(kind: str, name: object) -> UserError:
    return UserError(
        f"unknown {kind} {name!r}{did_you_mean(name, names(kind))}; known {kind}s: {', '.join(names(kind))}"
    )


def _get(kind: str, name: object) -> object:
    if isinstance(name, str) and name in _ADDED[kind]:
        return _ADDED[kind][name]
    if not isinstance(name, str) or name not in _BUILTIN[kind]:
        raise _unknown(kind, name)
    module, _, attr = _BUILTIN[kind][name].partition(":")
    return getattr(importlib.import_module(module), attr) if attr else importlib.import_module(module)


def names(kind: str) -> list[str]:
    """The known names of ``kind``: models and tasks sorted, suites and experiments in table order, added ones after."""
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


def help_from_module(module: object, name: str) -> Help:
    """The `Help` of a module with a docstring (an added suite or experiment; what `BUILTIN_HELP` must agree with)."""
    first = " ".join((getattr(module, "__doc__", None) or name).strip().split("\n\n")[0].split())
    head, sep, rest = first.partition(": ")
    summary = rest if sep and head.startswith("``") and head.endswith("``") else first
    return Help(summary, dict(getattr(module, "FLAGS", {})), hasattr(module, "prepare_resume"))


def help_of(kind: str, name: str) -> Help:
    """The `Help` of suite or experiment ``name``: a built-in's from `BUILTIN_HELP`, an added one's from its module."""
    added = _ADDED[kind].get(name)
    if added is not None:
        return help_from_module(added, name)
    if name not in BUILTIN_HELP[kind]:
        raise _unknown(kind, name)
    return BUILTIN_HELP[kind][name]


def summary(kind: str, name: str) -> str:
    """The help line of a suite or an experiment (`Help.summary`)."""
    return help_of(kind, name).summary
