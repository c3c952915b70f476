"""Interrupted commands: the same exit status after the same signal for every command (128 + the signal, as a
shell reports it), and for the commands that can continue one line saying what was kept and how to continue.
`terminate_raises` makes SIGTERM raise like SIGINT, so ``finally`` blocks run on both (atomic writes rolled
back, locks released).
"""

from __future__ import annotations

import contextlib
import shlex
import signal
import sys
import threading
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

from bdh.errors import Interrupted, exit_status


def _raise_interrupted(signum: int, frame: Any) -> None:
    raise Interrupted(signum)


@contextlib.contextmanager
def terminate_raises() -> Iterator[None]:
    """Within the block, SIGTERM raises `Interrupted` (in the main thread; elsewhere nothing changes)."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = signal.signal(signal.SIGTERM, _raise_interrupted)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


def signal_name(exc: KeyboardInterrupt) -> str:
    """``SIGINT`` or ``SIGTERM``: the signal that interrupted the command."""
    return signal.Signals(getattr(exc, "signum", signal.SIGINT)).name


def continue_command(argv: Sequence[str], out: str | Path) -> str:
    """The command that continues an interrupted ``bdh ARGV`` writing into ``out``: the same arguments without
    ``--overwrite``/``--force`` (they would empty the folder), with ``--out OUT`` and ``--resume``; quoted for
    a POSIX shell."""
    words, skip = [], False
    for word in argv:
        if skip:
            skip = False
            continue
        if word in ("--overwrite", "--force", "--resume"):
            continue
        if word == "--out":
            skip = True
            continue
        if word.startswith("--out="):
            continue
        words.append(word)
    return shlex.join(["bdh", *words, "--out", str(out), "--resume"])


def report(what: str, exc: KeyboardInterrupt, kept: str, argv: Sequence[str], out: str | Path) -> int:
    """One line on stderr for an interrupted ``what`` that can continue: the signal, what was ``kept`` and the
    command that continues (`continue_command`); returns the exit status (`bdh.errors.exit_status`)."""
    print(
        f"bdh: {what} interrupted ({signal_name(exc)}); {kept}; continue with: {continue_command(argv, out)}",
        file=sys.stderr,
        flush=True,
    )
    return exit_status(exc)
