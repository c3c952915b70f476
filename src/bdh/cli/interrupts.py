"""Interrupted commands: exit status 128 + the signal for every command, and one line saying how to continue;
`terminate_raises` makes SIGTERM raise like SIGINT, so ``finally`` blocks run."""

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
    """``bdh ARGV`` continued into ``out``: without ``--overwrite``/``--force``, with ``--out OUT
    --resume``, shell-quoted."""
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
    """One line for an interrupted ``what``: the signal, what was ``kept``, the command that continues; the
    exit status."""
    print(
        f"bdh: {what} interrupted ({signal_name(exc)}); {kept}; continue with: {continue_command(argv, out)}",
        file=sys.stderr,
        flush=True,
    )
    return exit_status(exc)
