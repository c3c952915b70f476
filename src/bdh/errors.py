"""The package's user-error class.

`UserError` is raised for a mistake in what the user gave: a config value, a shape, a file, a token,
a command-line argument. Its message is one line that names the offending value or file. The ``bdh``
command prints it as ``bdh: error: ...`` and exits with status 2; any other exception is a bug in
``bdh`` and is reported as one (exit status 1, the traceback kept in a file).

It subclasses `ValueError`, so code that catches ``ValueError`` around a library call keeps working.
"""

from __future__ import annotations

import difflib
from collections.abc import Iterable


class UserError(ValueError):
    """A mistake in the user's input (config, arguments, files); the message is one line."""


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
