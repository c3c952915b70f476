"""`bdh.cli.checks` and `bdh.devices`: the one validation of user-facing values."""

from __future__ import annotations

import argparse
import os

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from bdh.cli.checks import declared_integer, integer, number, prompt_bytes
from bdh.devices import resolve_device
from bdh.errors import UserError


@pytest.mark.parametrize("text", ["nan", "inf", "-inf", "1e400", "abc", "", "0x10"])
def test_number_refuses_what_is_not_a_finite_number(text):
    with pytest.raises(argparse.ArgumentTypeError):
        number(0)(text)


def test_declared_integer_reads_the_field_range_and_e_notation():
    from bdh.dmft.experiments import RunLength

    steps = declared_integer(RunLength, "steps")
    assert steps("120000") == 120_000 and steps("1.2e6") == 1_200_000 and steps("1_000") == 1000
    for bad in ("1e15", "10000001", "0", "1.5", "many", "nan", "inf"):
        with pytest.raises(argparse.ArgumentTypeError, match=r"must be an integer in \[1, 10000000\]"):
            steps(bad)


def test_integer_bounds_are_printed_in_full():
    """``--recall 3`` printed its bound as 1.67772e+07: a whole-number bound is written out."""
    with pytest.raises(argparse.ArgumentTypeError, match=r"must be an integer in \[33, 16777216\], got '3'"):
        integer(33, 2**24)("3")
    with pytest.raises(argparse.ArgumentTypeError, match=r"in \(0, 1\.5\]"):
        number(0, 1.5, low_open=True)("0")


def test_number_ranges():
    assert number(0)("0") == 0.0 and number(0, 1)("1") == 1.0
    with pytest.raises(argparse.ArgumentTypeError, match=r">= 0"):
        number(0)("-0.5")
    with pytest.raises(argparse.ArgumentTypeError, match=r"in \(0, 1\]"):
        number(0, 1, low_open=True)("0")


@given(st.floats(allow_nan=True, allow_infinity=True))
@settings(max_examples=200, deadline=None)
def test_number_accepts_exactly_the_finite_values_in_range(x):
    try:
        got = number(-1.0, 1.0)(repr(x))
    except argparse.ArgumentTypeError:
        assert not (x == x and -1.0 <= x <= 1.0)  # refused: NaN, infinite or out of range
    else:
        assert got == x and -1.0 <= got <= 1.0


@given(st.text(max_size=8))
@settings(max_examples=200, deadline=None)
def test_integer_never_raises_anything_but_its_own_error(text):
    try:
        value = integer(1, 100)(text)
    except argparse.ArgumentTypeError:
        return
    assert 1 <= value <= 100


@pytest.mark.parametrize("name", ["banana", "cuda:x", "", "gpu", "tpu:0"])
def test_unknown_devices_are_one_user_error(name):
    with pytest.raises(UserError, match="--device"):
        resolve_device(name)


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the message on a machine without CUDA")
@pytest.mark.parametrize("name", ["cuda", "cuda:0", "cuda:7"])
def test_cuda_without_cuda_is_one_user_error(name):
    with pytest.raises(UserError, match="CUDA is not available"):
        resolve_device(name, what="train.device")


def test_known_devices():
    assert resolve_device("cpu") == torch.device("cpu")
    assert resolve_device("auto").type == ("cuda" if torch.cuda.is_available() else "cpu")


def test_prompt_bytes_keeps_any_byte_and_reads_files(tmp_path):
    raw = b"\xff\xfe caf\xc3\xa9 \x00"
    assert prompt_bytes(argparse.Namespace(prompt=os.fsdecode(raw), prompt_file=None)) == raw
    (tmp_path / "p.bin").write_bytes(raw)
    assert prompt_bytes(argparse.Namespace(prompt=None, prompt_file=str(tmp_path / "p.bin"))) == raw
    assert prompt_bytes(argparse.Namespace(prompt=None, prompt_file=None), default=b"\n") == b"\n"
    with pytest.raises(UserError, match="at most 4 are allowed"):
        prompt_bytes(argparse.Namespace(prompt="12345", prompt_file=None), max_bytes=4)
    with pytest.raises(UserError, match="empty"):
        prompt_bytes(argparse.Namespace(prompt="", prompt_file=None))
    with pytest.raises(FileNotFoundError, match="no such file"):  # as open() would, in one line
        prompt_bytes(argparse.Namespace(prompt=None, prompt_file=str(tmp_path / "missing")))
    with pytest.raises(UserError, match="is a folder, not a regular file"):
        prompt_bytes(argparse.Namespace(prompt=None, prompt_file=str(tmp_path)))


def test_config_flags_are_generated_from_the_fields():
    import argparse

    from bdh.cli.checks import config_flags, config_values, field_help, flag_errors
    from bdh.errors import UserError
    from bdh.model.config import BDHConfig

    helps = field_help(BDHConfig)
    assert helps["n_layer"].startswith("L, the number of layer passes") and "attention" in helps
    parser = argparse.ArgumentParser()
    names = ["n_layer", "n_neurons", "dropout", "attention"]
    config_flags(parser, BDHConfig, names)
    args = parser.parse_args(["--n-layer", "3", "--attention", "chunked"])
    assert config_values(args, names) == {"n_layer": 3, "attention": "chunked"}
    with pytest.raises(SystemExit):
        parser.parse_args(["--attention", "flash"])  # choices declared on BDHConfig.attention
    with pytest.raises(UserError, match=r"^argument --n-layer: must be an integer >= 1, got 0$"):
        with flag_errors(BDHConfig, {"n_layer": 0}):
            BDHConfig(n_layer=0)


@pytest.mark.parametrize("flag, text", [("--n-layer", "0"), ("--n-embd", "wide"), ("--dropout", "1.5")])
def test_a_generated_flag_is_refused_in_the_config_s_words(flag, text, capsys):
    """The flags generated from a config's fields convert through the config (`field_value`) when they are parsed
    and are checked by it when it is built (`flag_errors`): either way the error is the config's, under the flag's
    name."""
    import argparse

    from bdh.cli.checks import config_flags, config_values, flag_errors
    from bdh.errors import UserError
    from bdh.model.config import BDHConfig

    name = flag[2:].replace("-", "_")
    parser = argparse.ArgumentParser()
    config_flags(parser, BDHConfig, [name])
    with pytest.raises(UserError) as refused:
        BDHConfig.field_value(name, text)
    wanted = f"argument {flag}: {str(refused.value).partition(': ')[2]}"
    try:
        given = config_values(parser.parse_args([flag, text]), [name])
    except SystemExit:
        assert wanted in capsys.readouterr().err
        return
    with pytest.raises(UserError) as built:
        with flag_errors(BDHConfig, given):
            BDHConfig.from_dict(given)
    assert str(built.value) == wanted


def test_field_help_reads_the_comment_at_each_field():
    """A field's help is the first sentence of the comment lines above it, then the one on its line; a field with no
    comment has none, and a blank line ends the comment above."""
    from dataclasses import dataclass

    from bdh.cli.checks import field_help

    @dataclass
    class Example:
        """Docstring, not read."""

        # a section comment, cut off by the blank line

        # the first sentence. Not this one.
        above: int = 1
        after: int = 2  # on its line.
        # above and
        both: int = (  # after, joined
            3
        )
        bare: int = 4

    expected = {"above": "the first sentence", "after": "on its line", "both": "above and after, joined"}
    assert field_help(Example) == expected
