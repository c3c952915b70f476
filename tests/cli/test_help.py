"""Every command's ``--help``: instant (no PyTorch imported to build it), every default shown, examples."""

from __future__ import annotations

import argparse
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
