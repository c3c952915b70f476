"""`UserError`: a mistake in what the user gave, one line naming it; ``bdh`` prints ``bdh: error: ...`` (exit 2)."""

from __future__ import annotations

import difflib
import signal
from collections.abc import Iterable


class UserError(ValueError):
    """A mistake in the user's input (config, arguments, files); the message is one line."""


class ConfigWarning(UserWarning):
    """Something given that works but may not be meant; printed as one line ``bdh: warning: ...``."""


class Interrupted(KeyboardInterrupt):
    """A command stopped by SIGINT or SIGTERM (so ``finally`` blocks run); ``bdh`` exits with `exit_status`."""

    def __init__(self, signum: int = signal.SIGINT):
        super().__init__(f"interrupted by {signal.Signals(signum).name}")
        self.signum = int(signum)


def exit_status(cause: KeyboardInterrupt | int) -> int:
    """128 + the signal (130 for SIGINT, 143 for SIGTERM; a plain `KeyboardInterrupt` is SIGINT's)."""
    signum = cause if isinstance(cause, int) else getattr(cause, "signum", signal.SIGINT)
    return 128 + int(signum)


def one_line(message: object) -> str:
    """A message as one line: its lines joined with '; ' (nothing is cut)."""
    return "; ".join(part.strip() for part in str(message).splitlines() if part.strip())


def did_you_mean(name: object, known: Iterable[str]) -> str:
    """`` (did you mean 'x'?)`` for the known name closest to ``name``, or ``''``: the one way a name is suggested."""
    if not isinstance(name, str):
        return ""
    close = difflib.get_close_matches(name, list(known), n=1, cutoff=0.6)
    return f" (did you mean {close[0]!r}?)" if close else ""
