"""The repeated-word figure (`bdh.analysis.figures.sparsity_repeat`, sparsity_repeat.png): its legends sat over the
traces of the layers; now each is right of its panel, covering none. Synthetic traces: no model is run."""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import torch

from bdh.analysis import figures


def test_the_repeat_figure_s_legends_cover_no_trace(tmp_path, monkeypatch):
    figs = []
    monkeypatch.setattr(figures, "save_file", lambda fig, path, **options: figs.append(fig) or path)
    L, K, T = 4, 8, 96
    rng = np.random.default_rng(0)
    trained = SimpleNamespace(
        y_token=rng.random((L, T)) * 0.1,
        y_bucket=rng.random((L, K, T)) * 0.1,
        periods=[(2.0**b, 2.0 ** (b + 1)) for b in range(K)],
        surprisal=rng.random(T) * 8,
    )
    control = SimpleNamespace(y_token=rng.random((L, T)) * 0.1, surprisal=rng.random(T) * 8)
    phase = torch.tensor([0] * 16 + [1] * 8 + [2] * (T - 24))
    figures.sparsity_repeat({"trained": trained, "control": control, "phase": phase}, tmp_path / "s.png")
    (fig,) = figs
    fig.canvas.draw()
    renderer = fig.canvas.get_renderer()
    for ax in fig.axes:
        legend, frame = ax.get_legend().get_window_extent(renderer), ax.get_window_extent(renderer)
        assert legend.x0 >= frame.x1 - 1, (legend, frame)  # right of the panel (1 pixel of rounding)
        assert legend.x1 <= fig.bbox.x1 + 1  # and inside the figure
    figures.pyplot().close(fig)
