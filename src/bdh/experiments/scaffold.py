"""What every experiment shares besides its science: the progress log and its output folder marked as its own (what
``--resume`` continues, only with the same config); the records of its finished runs, what ``--resume`` skips, are
its `bdh.experiments.ledger.Ledger`. An experiment is then its ``Config``, its runs and its verdict (CONTRIBUTING.md,
"Adding an experiment")."""

from __future__ import annotations

import json
import shlex
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bdh.errors import UserError
from bdh.outputs import check_output, folder_entries, json_ready, write_text

#: where an experiment writes its progress lines (``print`` on the command line)
Log = Callable[[str], None]


def no_log(line: str) -> None:
    """A `Log` that says nothing."""


@dataclass(frozen=True)
class ExperimentFolder:
    """The output folder of experiment ``name``, marked as its own by ``<name>.json`` (the `marker`), which holds
    the config the folder was made with. ``selectors``: the config fields that only choose which runs are made, which
    a resumed folder may change; None: the marker's config is not compared (each run's record holds its own)."""

    name: str
    selectors: tuple[str, ...] | None = None

    @property
    def marker(self) -> str:
        return f"{self.name}.json"

    def prepare_resume(self, out: str | Path) -> Path:
        """The output folder of ``--resume``: new, empty, or an earlier folder of this experiment (kept as it is)."""
        out = check_output(out, overwrite=True, folder=True)
        if out.is_dir() and folder_entries(out) and not (out / self.marker).is_file():
            raise UserError(
                f"--resume: {out} is not a {self.name} experiment folder (no {self.marker}); give another --out"
            )
        out.mkdir(parents=True, exist_ok=True)
        return out

    def mark(self, config: dict[str, Any], out: Path, resume: bool, defaults: dict[str, Any] | None = None) -> None:
        """Write the marker with ``config`` (the config's `to_dict`); under ``resume``, first refuse a folder made
        with another config (one that differs outside the ``selectors``; a field the marker lacks, added since the
        folder was made, counts at its value in ``defaults``)."""
        path = out / self.marker
        if resume and self.selectors is not None and path.is_file():
            theirs = {**(defaults or {}), **self._made_with(path)}
            changed = sorted(k for k in config if k not in self.selectors and config[k] != theirs.get(k))
            if changed:
                raise UserError(
                    f"--resume: {out} was made with another config (differs in {', '.join(changed)}); "
                    "give the same --set values or another --out"
                )
        write_text(path, json.dumps({"experiment": self.name, "config": config}, indent=1) + "\n")

    def refuse_another_preset(self, config: Any, out: Path) -> None:
        """Under ``--resume``: refuse ``config`` when ``out`` was made with another config, in one line giving the
        command that continues the folder: the preset it was made with (``--quick``, ``--full`` or none: the one
        nearest its config) and a ``--set`` for each field that differs from it (the selectors left as given)."""
        path = out / self.marker
        if self.selectors is None or not path.is_file():
            return
        cls, ours = type(config), config.to_dict()
        theirs = {**cls().to_dict(), **self._made_with(path)}

        def differ(values: dict[str, Any]) -> list[str]:
            return [k for k in ours if k not in self.selectors and json_ready(values.get(k)) != json_ready(theirs[k])]

        if not differ(ours):
            return
        name = min((None, *cls.PRESETS), key=lambda p: len(differ(cls.preset(p).to_dict())))
        sets = [w for k in differ(cls.preset(name).to_dict()) for w in ("--set", f"{k}={_text(theirs[k])}")]
        flag = [f"--{name}"] if name else []
        command = shlex.join(["bdh", "experiment", self.name, *flag, *sets, "--out", str(out), "--resume"])
        raise UserError(
            f"--resume: {out} was made with another config (differs in {', '.join(differ(ours))}); continue it with: "
            f"{command}, or give another --out"
        )

    @staticmethod
    def _made_with(path: Path) -> dict[str, Any]:
        """The config a marker holds; a damaged marker is one line saying so."""
        try:
            theirs = json.loads(path.read_text(encoding="utf-8"))["config"]
        except (ValueError, KeyError, TypeError):  # not UTF-8, not JSON, not the object written: the config is lost
            theirs = None
        if not isinstance(theirs, dict):
            raise UserError(
                f"{path}: damaged (not the JSON object bdh writes); the config this folder was made with cannot be "
                "compared: start it anew with --overwrite instead of --resume, or give another --out"
            )
        return theirs


def _text(value: Any) -> str:
    """A config value as ``--set`` reads it back (YAML): a string as it is, anything else as compact JSON."""
    return value if isinstance(value, str) else json.dumps(json_ready(value), separators=(",", ":"))
