"""The mean-field lab's files assembled in a temporary folder and swapped in together (`atomic_folder`)."""

from __future__ import annotations

import contextlib
import io
import json
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np

from bdh.outputs import atomic_folder, json_default


class OutputDir:
    """Write named files into a folder being assembled: ``out.json("a.json", {...})``, ``out.npz("b.npz", x=...)``."""

    def __init__(self, tmp: Path):
        self.tmp = tmp

    @classmethod
    @contextlib.contextmanager
    def create(cls, path: str | os.PathLike) -> Iterator[OutputDir]:
        """``with OutputDir.create(path) as out:`` the folder replaces ``path`` when the block succeeds."""
        with atomic_folder(path) as tmp:
            yield cls(tmp)

    def file(self, name: str) -> Path:
        """A path inside the folder being assembled to write ``name`` to."""
        return self.tmp / name

    def json(self, name: str, data: Any) -> None:
        self.file(name).write_text(json.dumps(data, indent=2, default=json_default) + "\n", encoding="utf-8")

    def npz(self, name: str, **arrays: np.ndarray) -> None:
        buf = io.BytesIO()
        np.savez_compressed(buf, **arrays)
        self.file(name).write_bytes(buf.getvalue())

    def figure(self, name: str, fig) -> None:
        """Write ``fig`` as the PNG ``name`` (``NAME.png``), readable at 100 % zoom (`bdh.plotting.save_figure`)."""
        from bdh.plotting import save_figure

        save_figure(fig, self.file(name).with_suffix(""), ("png",), tight=False)
