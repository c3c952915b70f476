"""The one place that loads matplotlib and writes figures (every figure of ``bdh`` goes through here).

* `pyplot` imports ``matplotlib.pyplot`` on first use, on the non-interactive Agg backend (a notebook's
  inline backend is kept), so that importing a plotting module, and ``bdh --help``, stays fast.
* `save` writes a figure under a stem in several formats (``stem.png``, ``stem.svg``) and closes it;
  `save_file` writes it to one path. Each file is written atomically through `bdh.outputs` (a temporary
  file beside it, then a rename), so a reader never sees half a figure; missing parent folders are made.

This module knows figures only; the model package knows nothing of it.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from bdh.outputs import atomic_path

#: backends kept as they are; any other (an interactive one) is replaced by Agg
_KEEP_BACKENDS = ("agg", "module://matplotlib_inline.backend_inline")


def pyplot() -> Any:
    """``matplotlib.pyplot``, imported now (not when this module is), on the Agg backend."""
    import matplotlib

    if matplotlib.get_backend().lower() not in _KEEP_BACKENDS:
        matplotlib.use("Agg", force=True)
    import matplotlib.pyplot as plt

    return plt


def _write(fig: Any, path: Path, fmt: str, dpi: float | str, tight: bool) -> Path:
    """Write ``fig`` to ``path`` in format ``fmt``, atomically, making the parent folders."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with atomic_path(path) as tmp:
        fig.savefig(tmp, format=fmt, dpi=dpi, bbox_inches="tight" if tight else None)
    return path


def save(
    fig: Any,
    stem: str | os.PathLike,
    formats: Sequence[str] = ("png", "svg"),
    *,
    dpi: float | str = 110,
    tight: bool = True,
) -> list[Path]:
    """Write ``fig`` as ``stem.<format>`` for each of ``formats`` and close it (also when writing fails).

    ``dpi`` is matplotlib's (``"figure"``: the figure's own); ``tight`` crops the margins
    (``bbox_inches="tight"``). Returns the paths written, in the order of ``formats``.
    """
    stem = Path(stem)
    try:
        return [_write(fig, stem.with_name(f"{stem.name}.{fmt}"), fmt, dpi, tight) for fmt in formats]
    finally:
        pyplot().close(fig)


def save_file(
    fig: Any, path: str | os.PathLike, *, fmt: str | None = None, dpi: float | str = "figure", tight: bool = False
) -> Path:
    """Write ``fig`` to ``path`` (format ``fmt``, else the path's suffix) and close it; returns ``path``."""
    path = Path(path)
    try:
        return _write(fig, path, fmt or path.suffix.lstrip(".") or "png", dpi, tight)
    finally:
        pyplot().close(fig)
