"""Writing results: every command's files are written into a fresh temporary folder beside the
target and moved into place only when all of them are complete (one ``os.replace`` per file), so a
crash or an interrupt never leaves a half-written file in the output folder."""

from __future__ import annotations

import io
import json
import os
import shutil
import tempfile
from pathlib import Path
from typing import Any

import numpy as np


class OutputDir:
    """``with OutputDir(path) as out: out.json("a.json", {...}); out.npz("b.npz", x=...)``."""

    def __init__(self, path: str | os.PathLike):
        self.path = Path(path)
        if self.path.exists() and not self.path.is_dir():
            raise ValueError(f"output path {self.path} exists and is not a folder")
        self.tmp: Path | None = None
        self.files: list[str] = []

    def __enter__(self) -> "OutputDir":
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self.tmp = Path(tempfile.mkdtemp(prefix=f".{self.path.name}-tmp-", dir=self.path.parent))
        return self

    def file(self, name: str) -> Path:
        """A path inside the temporary folder to write ``name`` to."""
        assert self.tmp is not None
        self.files.append(name)
        return self.tmp / name

    def json(self, name: str, data: Any) -> None:
        self.file(name).write_text(json.dumps(data, indent=2, default=_jsonable) + "\n")

    def npz(self, name: str, **arrays: np.ndarray) -> None:
        buf = io.BytesIO()
        np.savez_compressed(buf, **arrays)
        self.file(name).write_bytes(buf.getvalue())

    def figure(self, name: str, fig, dpi: int = 90) -> None:
        from .plots import save_figure

        save_figure(fig, self.file(name), dpi=dpi)

    def __exit__(self, exc_type, exc, tb) -> None:
        assert self.tmp is not None
        try:
            if exc_type is None:
                self.path.mkdir(parents=True, exist_ok=True)
                for name in self.files:
                    os.replace(self.tmp / name, self.path / name)
        finally:
            shutil.rmtree(self.tmp, ignore_errors=True)


def _jsonable(x: Any) -> Any:
    if isinstance(x, np.generic):
        return x.item()
    if isinstance(x, np.ndarray):
        return x.tolist()
    if isinstance(x, Path):
        return str(x)
    raise TypeError(f"not JSON serialisable: {type(x).__name__}")
