"""The one ledger of every experiment: the record of each finished run, one JSON object per run below a folder
(``<run>.json``, or as ``layout`` places it), written atomically when the run (or each of its rows) ends and found
again by ``--resume``, which skips it. A missing record is a run to make; one read back is checked (an object, then
the experiment's own ``check``), and a damaged one is either a run to make again or, where the experiment says how
to rebuild it (``rebuild``), one line naming the file and that command."""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bdh.errors import UserError
from bdh.outputs import json_default, write_text

#: what is wrong with a record read back (an object), or None: the experiment's own checks
Check = Callable[[dict[str, Any]], "str | None"]


class RecordError(UserError):
    """A record that is not one the experiment wrote."""


@dataclass(frozen=True)
class Ledger:
    """The records below ``folder``: run ``r``'s at ``layout.format(run=r)``, written with ``sort_keys`` or not.
    ``rebuild``: the advice after a damaged record's problem (a `RecordError`); None: a damaged record is missing."""

    folder: Path
    layout: str = "{run}.json"
    sort_keys: bool = False
    rebuild: str | None = None

    def path(self, run: str) -> Path:
        return Path(self.folder) / self.layout.format(run=run)

    def find(self, run: str, check: Check | None = None) -> dict[str, Any] | None:
        """The record of ``run`` read back and checked, or None when it has none."""
        path = self.path(run)
        if not path.is_file():
            return None
        try:
            record = json.loads(path.read_text(encoding="utf-8"))
        except UnicodeDecodeError:
            record, problem = None, "is not text"
        except ValueError as exc:
            record, problem = None, f"is not JSON ({str(exc).splitlines()[0]})"
        except OSError:
            if self.rebuild is not None:
                raise
            return None
        else:
            problem = f"holds a JSON {type(record).__name__}, not an object" if not isinstance(record, dict) else None
            problem = problem or (check(record) if check is not None else None)
        if problem is None:
            return record
        if self.rebuild is None:
            return None
        raise RecordError(f"{path}: {problem}; {self.rebuild}")

    def add(self, run: str, record: dict[str, Any]) -> dict[str, Any]:
        """Record ``run`` (anew, or with the rows it holds so far); returns the record."""
        text = json.dumps(record, indent=1, sort_keys=self.sort_keys, default=json_default)
        write_text(self.path(run), text + "\n")
        return record

    def make_all(
        self,
        runs: Sequence[str],
        make: Callable[[str], dict[str, Any]],
        *,
        resume: bool,
        reused: Callable[[str], None] = lambda run: None,
    ) -> list[dict[str, Any]]:
        """The records of ``runs`` in order: with ``resume`` those found are reused (``reused(run)`` told), every
        other made by ``make(run)`` and recorded as it ends."""
        out = []
        for run in runs:
            found = self.find(run) if resume else None
            if found is not None:
                reused(run)
            out.append(found if found is not None else self.add(run, make(run)))
        return out
