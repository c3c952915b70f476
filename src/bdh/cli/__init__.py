"""The ``bdh`` command line: it parses, calls the library, prints.

Each group's module has ``register(subparsers)``; a command is ``args.func(args) -> int``. A `UserError` (or an OS error
on a named file) is one line, exit 2; anything else is a bug: one line, exit 1, its traceback saved (``bdh --debug``
prints it)."""

from __future__ import annotations

import argparse
import os
import re
import sys
import warnings
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from bdh import __version__
from bdh.errors import ConfigWarning, UserError, did_you_mean, exit_status, one_line

from . import (
    bench_cmds,
    completion,
    data_cmds,
    dmft_cmds,
    eval_cmds,
    examples,
    experiment_cmds,
    inspect_cmds,
    interrupts,
    model_cmds,
    synapse_cmds,
    train_cmds,
    viz_cmds,
)
from .checks import UsageError

#: command-group modules, in the order their commands are listed by ``bdh --help``
GROUPS = [
    model_cmds,
    train_cmds,
    eval_cmds,
    data_cmds,
    dmft_cmds,
    inspect_cmds,
    viz_cmds,
    bench_cmds,
    experiment_cmds,
    synapse_cmds,
    completion,
]


class _Formatter(argparse.HelpFormatter):
    """Every default shown (unless the help already says it); example lines (indented) kept as they are."""

    def _get_help_string(self, action: argparse.Action) -> str:
        text = action.help or ""
        default = action.default
        if (
            "default" in text
            or default in (None, False, [], argparse.SUPPRESS)
            or isinstance(action, argparse._VersionAction)
        ):
            return text
        return f"{text} (default: {default})" if text else f"default: {default}"

    def _fill_text(self, text: str, width: int, indent: str) -> str:
        out = []
        for line in text.splitlines():
            out.append(indent + line if line.startswith("  ") else super()._fill_text(line, width, indent))
        return "\n".join(out)


#: the namespace attribute that holds, while parsing, the parser of the subcommand given (`_Parser.parse_args`)
_LEAF = "_bdh_subcommand_parser"


class _Parser(argparse.ArgumentParser):
    """One-line errors, no abbreviated flags, defaults shown, an Examples section from `examples.EXAMPLES`."""

    def __init__(self, *args, **kwargs) -> None:
        kwargs.setdefault("allow_abbrev", False)
        kwargs.setdefault("formatter_class", _Formatter)
        super().__init__(*args, **kwargs)
        if self.epilog is None:
            self.epilog = examples.epilog(self.prog)

    def error(self, message: str) -> None:  # one line instead of usage + message
        """argparse's error as one line, a mistyped choice (``bdh trian``) with the nearest suggested."""
        choice = re.search(r"invalid choice: '([^']*)' \(choose from (.*)\)$", message)
        if choice:
            known = [c.strip().strip("'") for c in choice.group(2).split(",")]
            message = message.replace(" (choose from", f"{did_you_mean(choice.group(1), known)} (choose from", 1)
        raise UsageError(f"{message} (see '{self.prog} --help')")

    def parse_known_args(self, args=None, namespace=None):  # type: ignore[override]
        """argparse's, noting in the namespace the innermost parser that ran (the subcommand's)."""
        namespace, extras = super().parse_known_args(args, namespace)
        if not hasattr(namespace, _LEAF):
            setattr(namespace, _LEAF, self)
        return namespace, extras

    def parse_args(self, args=None, namespace=None):  # type: ignore[override]
        """argparse's, an unknown flag named by its subcommand with the nearest flag suggested."""
        namespace, extras = self.parse_known_args(args, namespace)
        leaf = vars(namespace).pop(_LEAF, self)
        if extras:
            flags = [o for a in leaf._actions for o in a.option_strings if o.startswith("--")]
            first = next((e.split("=", 1)[0] for e in extras if e.startswith("-")), None)
            hint = did_you_mean(first, flags) if first else ""
            raise UsageError(f"unrecognized arguments: {' '.join(extras)}{hint} (see '{leaf.prog} --help')")
        return namespace


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(prog="bdh", description="The Dragon Hatchling (BDH): train, compare and look inside BDH models.")
    parser.add_argument("--version", action="version", version=f"bdh {__version__}")
    parser.add_argument(
        "--debug",
        action="store_true",
        help="on an internal error, print the full traceback instead of one line (also: BDH_DEBUG=1)",
    )
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=_Parser)
    for group in GROUPS:
        group.register(sub)
    parser.set_defaults(root_parser=parser)  # what `bdh completion` describes
    return parser


def _os_message(exc: OSError) -> str:
    if exc.filename is not None and exc.strerror:
        return f"{exc.filename}: {exc.strerror}"
    return one_line(str(exc)) or type(exc).__name__


def _report_bug(exc: BaseException) -> str:
    """Write the traceback of an unexpected exception to a file; return the file's path."""
    import tempfile
    import time
    import traceback

    from bdh.outputs import write_text

    path = Path(tempfile.gettempdir()) / f"bdh-crash-{time.strftime('%Y%m%d-%H%M%S')}-{os.getpid()}.txt"
    text = f"bdh {__version__}, python {sys.version.split()[0]}, argv {sys.argv!r}\n\n"
    text += "".join(traceback.format_exception(type(exc), exc, exc.__traceback__))
    write_text(path, text)
    return str(path)


def _one_line_warnings(show: Any) -> Any:
    """`warnings.showwarning` while a command runs: a `ConfigWarning` as one line, others as ``show`` shows them."""

    def shown(message, category, filename, lineno, file=None, line=None) -> None:
        if issubclass(category, ConfigWarning):
            print(f"bdh: warning: {one_line(message)}", file=sys.stderr, flush=True)
        else:
            show(message, category, filename, lineno, file, line)

    return shown


def main(argv: Sequence[str] | None = None) -> int:
    """The ``bdh`` console script: 0 done, 2 a mistake in the input, 1 a bug, 128 + the signal when interrupted."""
    parser = build_parser()
    debug = os.environ.get("BDH_DEBUG", "") not in ("", "0")
    try:
        with interrupts.terminate_raises(), warnings.catch_warnings():
            warnings.showwarning = _one_line_warnings(warnings.showwarning)
            args = parser.parse_args(argv)
            args.argv = list(sys.argv[1:] if argv is None else argv)
            debug = debug or args.debug
            if not getattr(args, "func", None):
                parser.print_help()
                return 0
            return int(args.func(args) or 0)
    except UserError as exc:
        print(f"bdh: error: {one_line(str(exc)) or type(exc).__name__}", file=sys.stderr)
        return 2
    except OSError as exc:  # a file or folder the user named: missing, unreadable, not writable, disk full
        print(f"bdh: error: {_os_message(exc)}", file=sys.stderr)
        return 2
    except KeyboardInterrupt as exc:  # SIGINT, or SIGTERM (`interrupts.terminate_raises`)
        print(f"bdh: interrupted ({interrupts.signal_name(exc)})", file=sys.stderr)
        return exit_status(exc)
    except Exception as exc:
        if debug:
            raise
        try:
            where = f"the traceback is in {_report_bug(exc)}"
        except OSError:
            where = "the traceback could not be saved"
        print(
            f"bdh: internal error (a bug in bdh, not in your input): {type(exc).__name__}: {one_line(str(exc))}; "
            f"{where}; rerun with 'bdh --debug ...' to print it",
            file=sys.stderr,
        )
        return 1
