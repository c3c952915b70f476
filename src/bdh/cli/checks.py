"""One validation of user-facing values for every command, before any work: argparse types naming the flag (``argument
--temperature: must be a finite number >= 0, got 'nan'``), devices, prompts, the model folder, and flags made from a
config's fields."""

from __future__ import annotations

import argparse
import ast
import contextlib
import inspect
import io
import math
import os
import sys
import textwrap
import tokenize
from collections.abc import Callable
from pathlib import Path
from typing import Any

from bdh.errors import UserError

#: the largest integer a flag takes (a signed 64-bit integer: what PyTorch, NumPy and the configs hold)
MAX_INT = 2**63 - 1


class UsageError(UserError):
    """An error in the command line itself (unknown flag, missing argument); printed like every `UserError`."""


def integer(low: int | None = None, high: int | None = None) -> Callable[[str], int]:
    """An argparse type: an integer in [low, high] (never above `MAX_INT`)."""

    def parse(text: str) -> int:
        try:
            value = int(text, 10)
        except (TypeError, ValueError):
            raise argparse.ArgumentTypeError(f"expected an integer, got {text!r}") from None
        if (low is not None and value < low) or (high is not None and value > high):
            raise argparse.ArgumentTypeError(f"must be an integer {_range(low, high)}, got {text!r}")
        if value > MAX_INT:
            raise argparse.ArgumentTypeError(f"too large: at most 2^63 - 1, got {text!r}")
        return value

    parse.__name__ = "integer"
    return parse


def number(low: float | None = None, high: float | None = None, *, low_open: bool = False) -> Callable[[str], float]:
    """An argparse type: a finite number in [low, high] (``(low, high]`` with ``low_open``)."""

    def parse(text: str) -> float:
        try:
            value = float(text)
        except (TypeError, ValueError):
            raise argparse.ArgumentTypeError(f"expected a number, got {text!r}") from None
        bad = not math.isfinite(value)
        bad = (
            bad
            or (low is not None and (value < low or (low_open and value == low)))
            or (high is not None and value > high)
        )
        if bad:
            raise argparse.ArgumentTypeError(f"must be a finite number {_range(low, high, low_open)}, got {text!r}")
        return value

    parse.__name__ = "number"
    return parse


#: a sampling temperature is 0 (greedy) or in this range: below it the logits overflow, above it all is noise
MIN_TEMPERATURE, MAX_TEMPERATURE = 1e-2, 1e2


def temperature(text: str) -> float:
    """An argparse type: a sampling temperature, 0 (greedy) or in [`MIN_TEMPERATURE`, `MAX_TEMPERATURE`]."""
    value = number(0, MAX_TEMPERATURE)(text)
    if 0 < value < MIN_TEMPERATURE:
        raise argparse.ArgumentTypeError(
            f"must be 0 (greedy) or in [{MIN_TEMPERATURE:g}, {MAX_TEMPERATURE:g}], got {text!r}"
        )
    return value


def declared_integer(config_class: type, name: str) -> Callable[[str], int]:
    """An argparse type: an integer (``1.2e6`` too) within the range declared on ``config_class``'s field ``name``."""
    from bdh.typed_config import declared_ranges

    (declared,) = [d for d in declared_ranges(config_class) if d.name == name]

    def parse(text: str) -> int:
        try:
            value = float(text)  # exact for every integer a bound admits
        except ValueError:
            value = math.nan
        if not (math.isfinite(value) and value == int(value) and declared.admits(int(value))):
            raise argparse.ArgumentTypeError(declared.message(text))
        return int(value)

    parse.__name__ = "integer"
    return parse


def _range(low: float | None, high: float | None, low_open: bool = False) -> str:
    if low is not None and high is not None:
        return f"in {'(' if low_open else '['}{_bound(low)}, {_bound(high)}]"
    if low is not None:
        return f"{'>' if low_open else '>='} {_bound(low)}"
    return f"<= {_bound(high)}" if high is not None else ""


def _bound(x: float) -> str:
    """A bound as a person reads it: a whole number in full (16777216, not 1.67772e+07), else ``:g``."""
    return str(int(x)) if float(x).is_integer() and abs(x) < 2**63 else f"{x:g}"


def device(name: str):
    """The `torch.device` of a ``--device`` value, checked to exist and be available."""
    from bdh.devices import resolve_device

    return resolve_device(name, what="--device")


def add_prompt(parser: argparse._ActionsContainer, help: str) -> None:
    """``--prompt TEXT`` and ``--prompt-file FILE`` (one or the other) on ``parser`` (a mutually exclusive group)."""
    parser.add_argument("--prompt", help=help + "; any bytes the shell passes are kept as they are")
    parser.add_argument("--prompt-file", metavar="FILE", help="read the prompt from FILE, byte for byte (any bytes)")


def prompt_bytes(args: argparse.Namespace, default: bytes | None = None, max_bytes: int | None = None) -> bytes | None:
    """``--prompt`` as the shell passed it (``os.fsencode``: any bytes), or ``--prompt-file``'s contents,
    or ``default``."""
    if getattr(args, "prompt_file", None) is not None:
        from bdh.outputs import input_file

        path = input_file(args.prompt_file, "--prompt-file")
        data = path.read_bytes()
        flag = f"--prompt-file {path}"
    elif getattr(args, "prompt", None) is not None:
        data = os.fsencode(args.prompt)
        flag = "--prompt"
    else:
        return default
    if not data:
        raise UserError(f"{flag}: the prompt is empty; give at least one byte")
    if max_bytes is not None and len(data) > max_bytes:
        raise UserError(f"{flag}: the prompt has {len(data):,} bytes; at most {max_bytes:,} are allowed here")
    return data


def add_overwrite(parser: argparse.ArgumentParser, what: str = "the output") -> None:
    """The ``--overwrite`` flag: replace an existing non-empty output instead of refusing."""
    parser.add_argument("--overwrite", action="store_true", help=f"replace {what} if it exists (refused otherwise)")


def field_help(config_class: type) -> dict[str, str]:
    """The first sentence of each field's comment (the lines above it, then the one after it on its line)."""
    source = textwrap.dedent(inspect.getsource(config_class))
    comments: dict[int, tuple[str, bool]] = {}  # line -> (text, alone on its line)
    for tok in tokenize.generate_tokens(io.StringIO(source).readline):
        if tok.type == tokenize.COMMENT:
            comments[tok.start[0]] = (tok.string[1:].strip(), not tok.line[: tok.start[1]].strip())
    out: dict[str, str] = {}
    for node in ast.parse(source).body[0].body:
        if isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
            above, line = [], node.lineno - 1
            while line in comments and comments[line][1]:
                above.insert(0, comments[line][0])
                line -= 1
            after = [comments[n][0] for n in range(node.lineno, node.end_lineno + 1) if n in comments]
            if above or after:
                out[node.target.id] = " ".join(above + after)
    return {k: v.split(". ")[0].rstrip(".") for k, v in out.items()}


def config_flags(parser: argparse._ActionsContainer, config_class: type, names: list[str]) -> None:
    """Add ``--field-name`` flags for the fields of a `TypedConfig`, each read as a ``--set`` value and refused at parse
    time; `one_of` gives ``choices``, the field's comment the help. A flag left out is None (`config_values`)."""
    from bdh.typed_config import declared_ranges

    helps = field_help(config_class)
    # a fixed list of choices only: choices read at run time (a callable) are checked when the config is built
    choices = {d.name: d.range.choices for d in declared_ranges(config_class) if isinstance(d.range.choices, tuple)}
    for name in names:
        parser.add_argument(
            "--" + name.replace("_", "-"),
            dest=name,
            type=_field_type(config_class, name),
            choices=choices.get(name),
            help=helps.get(name),
        )


def _field_type(config_class: type, name: str) -> Callable[[str], Any]:
    """An argparse type: the value of ``config_class``'s field ``name`` (`TypedConfig.field_value`)."""

    def parse(text: str) -> Any:
        try:
            return config_class.field_value(name, text, key=name, ranges=False)
        except UserError as exc:
            raise argparse.ArgumentTypeError(str(exc).partition(": ")[2]) from None

    parse.__name__ = name
    return parse


def config_values(args: argparse.Namespace, names: list[str]) -> dict:
    """The config fields given as flags by `config_flags` (those left out are not in the mapping)."""
    return {name: getattr(args, name) for name in names if getattr(args, name, None) is not None}


@contextlib.contextmanager
def flag_errors(config_class: type, given: dict):
    """A config's refusal under the flag's name: ``BDHConfig.n_head: ...`` becomes ``argument --n-head: ...``."""
    try:
        yield
    except UserError as exc:
        head, sep, rest = str(exc).partition(": ")
        prefix, _, name = head.partition(".")
        if sep and prefix == config_class.__name__ and name in given:
            raise UserError(f"argument --{name.replace('_', '-')}: {rest}") from None
        raise


def checked_model_dir(source: str | os.PathLike, checkpoint: str | None = None) -> Path:
    """The model folder to load for ``source`` (``checkpoint``: a step-N), checksums verified: every command's."""
    from bdh.train.run.checkpoint import resolve_model_dir

    return resolve_model_dir(source, checkpoint)


def load_model(folder: Path, map_location: Any = "cpu", announce: bool = True, **runtime: Any) -> Any:
    """The model of a `checked_model_dir` folder, the folder named once loaded (unless ``announce=False``)."""
    from bdh.model.io import load_pretrained

    model = load_pretrained(folder, map_location=map_location, **runtime)
    if announce:
        announce_loaded(folder)
    return model


def announce_loaded(folder: Path, stream: Any = None) -> None:
    """``model: run/best (checksums verified)`` on ``stream`` (stdout; stderr where stdout is data)."""
    from bdh.train.run.checkpoint import META_NAME

    how = "checksums verified" if (folder / META_NAME).is_file() else "a model folder, no checksums to verify"
    print(f"model: {folder} ({how})", file=stream or sys.stdout, flush=True)
