"""The ``bdh`` command line. Thin: it parses, calls the library, prints.

Each command group lives in its own module with a ``register(subparsers)`` function that adds its
commands; every command is a function ``(args) -> int`` stored as ``args.func``. Errors the user can
fix (bad arguments, files, configs) are printed as one line on stderr with exit status 2.
"""

from __future__ import annotations

import argparse
import sys
from typing import Sequence

from bdh import __version__

from . import bench_cmds, data_cmds, dmft_cmds, experiment_cmds, inspect_cmds, model_cmds, synapse_cmds, train_cmds, viz_cmds

#: command-group modules, in the order their commands are listed by ``bdh --help``
GROUPS = [model_cmds, train_cmds, data_cmds, dmft_cmds, inspect_cmds, viz_cmds, bench_cmds, experiment_cmds, synapse_cmds]


class UsageError(Exception):
    """An error in what the user asked for; printed as one line, exit status 2."""


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> None:  # one line instead of usage + message
        raise UsageError(f"{message} (see '{self.prog} --help')")


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(prog="bdh", description="The Dragon Hatchling (BDH): train, compare and look inside BDH models.")
    parser.add_argument("--version", action="version", version=f"bdh {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=_Parser)
    for group in GROUPS:
        group.register(sub)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``bdh`` console script; returns the exit status."""
    from bdh.model.io import CheckpointError

    parser = build_parser()
    try:
        args = parser.parse_args(argv)
        if not getattr(args, "func", None):
            parser.print_help()
            return 0
        return int(args.func(args) or 0)
    except UsageError as exc:
        print(f"bdh: error: {exc}", file=sys.stderr)
        return 2
    except (ValueError, CheckpointError, FileNotFoundError, IsADirectoryError, PermissionError) as exc:
        print(f"bdh: error: {str(exc).splitlines()[0] if str(exc) else type(exc).__name__}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("bdh: interrupted", file=sys.stderr)
        return 130
