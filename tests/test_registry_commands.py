"""Suites and experiments are registered like tasks: one module and one registration, the command line's help
taken from the module docstring, capabilities (``--resume``, a suite's own flags) from what the module declares."""

from __future__ import annotations

import dataclasses
import sys
import types
from pathlib import Path
from typing import Any, ClassVar

import pytest

from bdh import registry
from bdh.cli import main
from bdh.errors import UserError
from bdh.typed_config import TypedConfig


@pytest.fixture
def added(monkeypatch):
    """Registrations made by a test, removed after it."""
    for kind in ("suite", "experiment"):
        monkeypatch.setitem(registry._ADDED, kind, {})
    yield


def _experiment() -> types.ModuleType:
    """A stand-in experiment: a config and a run that writes its report."""
    module = types.ModuleType("standin_experiment", "Count to a number: a stand-in experiment.\n\nMore text.")

    @dataclasses.dataclass
    class Config(TypedConfig):
        PRESETS: ClassVar[dict[str, dict[str, Any]]] = {"quick": {"upto": 2}}

        upto: int = 3

    def run(config: Config, out: Path, *, log=print) -> Path:
        report = Path(out) / "report.md"
        report.write_text(" ".join(str(i) for i in range(config.upto)) + "\n")
        return report

    module.Config, module.run = Config, run
    return module


def test_a_registered_experiment_is_listed_with_its_docstring_and_runs(added, tmp_path, capsys):
    registry.register_experiment("standin", _experiment())
    with pytest.raises(SystemExit):
        main(["experiment", "--help"])
    listing = capsys.readouterr().out
    assert "standin" in listing and "Count to a number: a stand-in experiment." in listing
    assert main(["experiment", "standin", "--quick", "--out", str(tmp_path / "o")]) == 0
    assert (tmp_path / "o" / "report.md").read_text() == "0 1\n"
    # no prepare_resume declared: no --resume
    assert main(["experiment", "standin", "--resume", "--out", str(tmp_path / "o")]) != 0
    assert "unrecognized arguments: --resume" in capsys.readouterr().err


def test_a_registered_suite_is_listed_with_its_docstring_and_its_own_flags(added, capsys):
    from bdh.bench import boardpath

    suite = types.ModuleType("standin_suite", "``bdh bench standin``: boards again, under another name.")
    for name in ("SWEEP", "plan", "suite_def"):
        setattr(suite, name, getattr(boardpath, name))
    suite.FLAGS = {"n_head": {"type": int, "help": "heads of every model"}}
    registry.register_suite("standin", suite)
    with pytest.raises(SystemExit):
        main(["bench", "--help"])
    assert "boards again, under another name." in capsys.readouterr().out
    assert main(["bench", "standin", "--quick", "--dry-run", "--n-head", "2", "--models", "bdh"]) == 0
    printed = capsys.readouterr().out
    assert "'n_head': 2" in printed and printed.strip().endswith("learning rates and seeds)")


def test_built_in_help_is_read_without_importing_the_module():
    sys.modules.pop("bdh.experiments.scaling", None)
    text = registry.summary("experiment", "scaling")
    assert text.startswith("BDH-GPU against a GPT-2-style Transformer") and "\n" not in text
    assert "bdh.experiments.scaling" not in sys.modules
    assert registry.summary("suite", "recall").startswith("BDH, GPT and BaseConv")  # the ``bdh bench recall``: goes
    assert registry.help_of("experiment", "scaling").resumes
    assert not registry.help_of("experiment", "merge").resumes
    assert "bdh_damping" in registry.help_of("suite", "recall").flags


@pytest.mark.parametrize("kind", ["suite", "experiment"])
def test_the_written_out_help_is_what_each_module_says(kind):
    """`BUILTIN_HELP` copies what each built-in module says (its docstring's first paragraph, a suite's ``FLAGS``,
    an experiment's ``prepare_resume``) so that ``--help`` imports none of them; imported, each must agree."""
    assert list(registry.BUILTIN_HELP[kind]) == list(registry._BUILTIN[kind])  # every registration, in its order
    for name, written in registry.BUILTIN_HELP[kind].items():
        module = registry._get(kind, name)
        assert written == registry.help_from_module(module, name), f"{kind} {name}: BUILTIN_HELP is stale"


def test_an_added_module_s_help_is_read_from_the_module(added):
    suite = types.ModuleType("standin_suite", "``bdh bench standin``: boards again.\n\nMore.")
    suite.FLAGS = {"n_head": {"type": int}}
    registry.register_suite("standin", suite)
    assert registry.help_of("suite", "standin") == registry.Help("boards again.", {"n_head": {"type": int}})
    with pytest.raises(UserError, match="unknown experiment 'scalin'.*did you mean"):
        registry.help_of("experiment", "scalin")


def test_a_taken_suite_or_experiment_name_is_refused(added):
    with pytest.raises(UserError, match="'scaling' is taken"):
        registry.register_experiment("scaling", _experiment())
    with pytest.raises(UserError, match="unknown suite 'recal'.*did you mean"):
        registry.get_suite("recal")
