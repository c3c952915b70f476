"""The package's user-error class: `UserError` is a mistake in what the user gave, with a one-line message naming the
value or file; ``bdh`` prints it as ``bdh: error: ...`` (exit 2), any other exception is reported as a bug. It
subclasses `ValueError`, so code that catches ``ValueError`` keeps working."""

from __future__ import annotations

import difflib
import signal
from collections.abc import Iterable


class UserError(ValueError):
    """A mistake in the user's input (config, arguments, files); the message is one line."""


class ConfigWarning(UserWarning):
    """Something the user gave that works but may not be what they meant (a model folder's ``n_layer`` other than
    its weights were saved with); the ``bdh`` command prints it as one line ``bdh: warning: ...``."""


class Interrupted(KeyboardInterrupt):
    """A command stopped by SIGINT or SIGTERM, raised so that ``finally`` blocks run on either; ``bdh`` exits with
    `exit_status` (128 + the signal, as a shell reports it)."""

    def __init__(self, signum: int = signal.SIGINT):
        super().__init__(f"interrupted by {signal.Signals(signum).name}")
        self.signum = int(signum)


def exit_status(cause: KeyboardInterrupt | int) -> int:
    """The exit status after an interruption (or a signal number): 128 + the signal (130 for SIGINT, 143 for
    SIGTERM; a plain `KeyboardInterrupt` is SIGINT's)."""
    signum = cause if isinstance(cause, int) else getattr(cause, "signum", signal.SIGINT)
    return 128 + int(signum)


def one_line(message: object) -> str:
    """A message as one line: its lines joined with '; ' (nothing is cut)."""
    return "; ".join(part.strip() for part in str(message).splitlines() if part.strip())


def did_you_mean(name: object, known: Iterable[str]) -> str:
    """`` (did you mean 'x'?)`` for the known name closest to a mistyped ``name`` (`difflib`), or ``''`` when
    none is close (or ``name`` is not a string): the one way the package suggests a key, field or name."""
    if not isinstance(name, str):
        return ""
    close = difflib.get_close_matches(name, list(known), n=1, cutoff=0.6)
    return f" (did you mean {close[0]!r}?)" if close else ""
