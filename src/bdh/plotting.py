"""The one place that loads matplotlib and writes figures: `pyplot` imports it on first use (Agg), `save` writes
atomically, `READABLE` sizes figures for 100 % zoom, `bits` and `nats_axis` draw losses in bits."""

from __future__ import annotations

import math
import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from bdh.outputs import atomic_path

#: the readable figures' resolution, smallest font (points) and smallest width (inches): 8.5 x 150 = 1275 px
DPI, MIN_FONT, MIN_WIDTH = 150, 11.0, 8.5
#: the keywords of `save` / `save_file` for figures read at 100 % zoom
READABLE: dict[str, Any] = {"dpi": DPI, "min_font": MIN_FONT}

#: nats per bit: a loss in nats divided by it is in bits
LN2 = math.log(2.0)

#: backends kept as they are; any other (an interactive one) is replaced by Agg
_KEEP_BACKENDS = ("agg", "module://matplotlib_inline.backend_inline")


def pyplot() -> Any:
    """``matplotlib.pyplot``, imported now (not when this module is), on the Agg backend."""
    import matplotlib

    if matplotlib.get_backend().lower() not in _KEEP_BACKENDS:
        matplotlib.use("Agg", force=True)
    import matplotlib.pyplot as plt

    return plt


def bits(nats: float) -> float:
    """A loss (or any log-likelihood) in nats, in bits."""
    return nats / LN2


def nats_axis(ax: Any, label: str = "nats per byte") -> Any:
    """A right-hand y axis in nats beside ``ax``'s in bits (the same scale times ln 2); returns it."""
    axis = ax.secondary_yaxis("right", functions=(lambda b: b * LN2, lambda n: n / LN2))
    axis.set_ylabel(label)
    return axis


def raise_fonts(fig: Any, min_font: float) -> None:
    """Every text of ``fig`` (titles, labels, ticks, legends, colour bars) at least ``min_font`` points."""
    from matplotlib.text import Text

    panels = [*fig.axes, *(child for ax in fig.axes for child in ax.child_axes)]  # child: a secondary axis
    for ax in panels:  # tick labels are made when the figure is drawn: set their size on the axis
        for axis in (ax.xaxis, ax.yaxis):
            ticks = axis.get_major_ticks() + axis.get_minor_ticks()
            if any(t.label1.get_fontsize() < min_font for t in ticks):
                axis.set_tick_params(which="both", labelsize=min_font)
    for text in fig.findobj(Text):
        if text.get_text() and text.get_fontsize() < min_font:
            text.set_fontsize(min_font)


def _write(fig: Any, path: Path, fmt: str, dpi: float | str, tight: bool, min_font: float | None = None) -> Path:
    """Write ``fig`` to ``path`` in format ``fmt``, atomically, making the parent folders."""
    if min_font is not None:
        raise_fonts(fig, min_font)
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
    min_font: float | None = None,
) -> list[Path]:
    """Write ``fig`` as ``stem.<format>`` per format and close it; ``tight`` crops, ``min_font`` raises small texts."""
    stem = Path(stem)
    try:
        return [_write(fig, stem.with_name(f"{stem.name}.{fmt}"), fmt, dpi, tight, min_font) for fmt in formats]
    finally:
        pyplot().close(fig)


def save_file(
    fig: Any,
    path: str | os.PathLike,
    *,
    fmt: str | None = None,
    dpi: float | str = "figure",
    tight: bool = False,
    min_font: float | None = None,
) -> Path:
    """Write ``fig`` to ``path`` (format ``fmt``, else the path's suffix) and close it; returns ``path``."""
    path = Path(path)
    try:
        return _write(fig, path, fmt or path.suffix.lstrip(".") or "png", dpi, tight, min_font)
    finally:
        pyplot().close(fig)


def save_figure(
    fig: Any, stem: str | os.PathLike, formats: Sequence[str] = ("png", "svg"), *, tight: bool = True
) -> Path:
    """Write a `READABLE` figure (`save`) and close it; returns the first file's path."""
    return save(fig, stem, formats, tight=tight, **READABLE)[0]
