"""Every command's ``--help``: instant (no PyTorch imported to build it), every default shown, examples."""

from __future__ import annotations

import argparse
import re
import subprocess
import sys

import pytest

from bdh.cli import build_parser


def _commands(parser: argparse.ArgumentParser, prefix: tuple[str, ...] = ()):
    """(argv words, parser) of every command and command group."""
    yield prefix, parser
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                yield from _commands(sub, prefix + (name,))


COMMANDS = list(_commands(build_parser()))


def test_building_the_help_imports_neither_torch_nor_numpy():
    """What makes `bdh --help` instant: the parser is built without importing PyTorch (measured in
    benchmarks/startup.py)."""
    code = (
        "import sys; from bdh.cli import build_parser; p = build_parser(); p.format_help(); "
        "print(sorted(m for m in ('torch', 'numpy', 'scipy', 'matplotlib') if m in sys.modules))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"


@pytest.mark.parametrize("words, parser", COMMANDS, ids=[" ".join(w) or "bdh" for w, _ in COMMANDS])
def test_help_shows_defaults_and_examples(words, parser):
    text = parser.format_help()
    assert "examples:\n  bdh" in text or "examples:\n  torchrun" in text, (
        f"bdh {' '.join(words)} --help has no examples"
    )
    for action in parser._actions:
        if action.option_strings and action.default not in (None, False, [], argparse.SUPPRESS):
            assert "default" in parser._get_formatter()._get_help_string(action), (words, action.option_strings)
    if words:  # the examples run this very command
        assert f"bdh {' '.join(words)}" in text.split("examples:")[1]


def test_device_defaults_are_auto_everywhere():
    for words, parser in COMMANDS:
        for action in parser._actions:
            if "--device" in action.option_strings:
                assert action.default == "auto", words


def _table(path: str, first: str) -> dict[str, list[str]]:
    """The rows of the markdown table of docs/``path`` whose header starts with ``| first |`` and ends with the
    column ``--help says``: name -> cells."""
    from pathlib import Path

    lines = (Path(__file__).resolve().parents[2] / "docs" / path).read_text(encoding="utf-8").splitlines()
    start = next(i for i, x in enumerate(lines) if x.startswith(f"| {first} |") and x.endswith("| `--help` says |"))
    rows = {}
    for line in lines[start + 2 :]:
        if not line.startswith("|"):
            break
        cells = [c.strip() for c in line.strip("|").split("|")]
        rows[cells[0].strip("`")] = cells[1:]
    return rows


@pytest.mark.parametrize(
    ("kind", "group", "doc", "first"),
    [("experiment", "experiment", "experiments.md", "experiment"), ("suite", "bench", "bench.md", "suite")],
)
def test_every_choice_says_what_it_costs_as_the_docs_measured(kind, group, doc, first, capsys):
    """Where the help offers a choice, each entry gives the cost of its CPU default on 2 cores: one declaration
    per registered name (bdh.cli.costs), equal to the "--help says" column of the docs table that holds the
    measurement, and no other number of minutes in the group's help (a number there went stale)."""
    import re

    from bdh import registry
    from bdh.cli import costs, main

    declared = costs.EXPERIMENTS if kind == "experiment" else costs.SUITES
    rows = _table(doc, first)
    assert list(declared) == list(rows) == registry.names(kind)
    assert {name: cells[-1] for name, cells in rows.items()} == declared
    with pytest.raises(SystemExit):
        main([group, "--help"])
    text = " ".join(capsys.readouterr().out.split())
    for name, cost in declared.items():
        assert re.search(rf"{re.escape(name)} .*?\[2-core CPU: {re.escape(cost)}\]", text), (name, text)
    assert not re.search(r"\d+ minutes", text), text


def test_the_readme_lists_every_command_and_each_group_s_choices():
    """The README's command table has a row for every command, and its rows for bench, experiment and dmft list
    exactly the choices the command line offers, in its order; the commands it says continue after an
    interruption are the resumable experiments."""
    import re
    from pathlib import Path

    from bdh import registry
    from bdh.experiments.launch import resumable

    readme = (Path(__file__).resolve().parents[2] / "README.md").read_text(encoding="utf-8")
    rows = [line for line in readme.splitlines() if line.startswith("| `bdh ") or line.startswith("| `torchrun")]
    first = {re.match(r"\| `bdh ([a-z-]+)", row).group(1): row for row in rows if row.startswith("| `bdh ")}
    top = {words[0] for words, _ in COMMANDS if len(words) == 1}
    assert sorted(top - set(first)) == [], "commands without a row in the README's command table"
    subcommands = {words[0]: [] for words, _ in COMMANDS if len(words) == 2}
    for words, _ in COMMANDS:
        if len(words) == 2:
            subcommands[words[0]].append(words[1])
    assert subcommands["bench"] == registry.names("suite") and subcommands["experiment"] == registry.names("experiment")
    for command, choices in subcommands.items():
        listed = re.match(rf"\| `bdh {command} ([a-z\\|-]+)`", first[command]).group(1).split("\\|")
        assert listed == choices, (command, listed, choices)
    continued = re.search(r"those that can continue \(`train`, `bench`, `experiment ([a-z|-]+)`\)", readme)
    assert continued and continued.group(1).split("|") == [n for n in registry.names("experiment") if resumable(n)]


def test_the_main_job_s_time_in_the_help_is_its_time_budget(capsys):
    """``bdh --help``, ``bdh train --help`` and the examples say how long the main job takes: its time budget,
    train.max_minutes of the config it runs."""
    import yaml

    from bdh.cli import main
    from bdh.cli.examples import EXAMPLES

    assert main(["train", "--print-config"]) == 0
    minutes = yaml.safe_load(capsys.readouterr().out)["train"]["max_minutes"]
    assert minutes == int(minutes)
    with pytest.raises(SystemExit):
        main(["--help"])
    top = " ".join(capsys.readouterr().out.split())
    assert f"the main job, a small BDH on the embedded corpus in ~{int(minutes)} min on CPU" in top
    assert f"~{int(minutes)} min on 2 cores" in top  # the example
    (train,) = [parser for words, parser in COMMANDS if words == ("train",)]
    assert f"(about {int(minutes)} minutes on a 2-core CPU)" in " ".join(train.format_help().split())
    assert any(f"~{int(minutes)} min on 2 cores" in line for line in EXAMPLES["bdh"])


def test_every_config_file_an_example_names_ships_with_the_project():
    """An example that names a file under configs/ names one the project has (one named configs/mqar.yaml, gone)."""
    from pathlib import Path

    from bdh.cli.examples import EXAMPLES

    root = Path(__file__).resolve().parents[2]
    named = {m for lines in EXAMPLES.values() for line in lines for m in re.findall(r"configs/[\w.-]+\.ya?ml", line)}
    assert named, "no example names a config file"
    assert [p for p in sorted(named) if not (root / p).is_file()] == []
