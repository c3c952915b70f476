"""Figures: each is written as PNG and SVG with something drawn, bdh plot says what it skipped."""

from __future__ import annotations

import xml.etree.ElementTree as ET
from pathlib import Path

import numpy as np
import pytest

from bdh.cli import main
from bdh.train.run.log import read_metrics
from bdh.viz import plots


def drawn(paths: list[Path]) -> None:
    """Both files exist; the PNG is not a blank canvas; the SVG parses."""
    from PIL import Image

    assert sorted(p.suffix for p in paths) == [".png", ".svg"]
    png = next(p for p in paths if p.suffix == ".png")
    img = np.asarray(Image.open(png).convert("L"), dtype=np.float32)
    assert img.std() > 5.0
    ET.parse(next(p for p in paths if p.suffix == ".svg"))
    assert not list(png.parent.glob(".*.tmp"))  # no temporary file left


def test_training_curves(text_run, tmp_path):
    drawn(plots.training_curves(read_metrics(text_run / "metrics.jsonl"), tmp_path / "c"))
    with pytest.raises(ValueError, match="no training or validation loss"):
        plots.training_curves([{"kind": "train", "step": 1}], tmp_path / "d")


def test_sparsity_and_heatmap(tmp_path):
    drawn(plots.sparsity_by_layer([0.3, 0.2, 0.1], [0.05, 0.04, 0.03], tmp_path / "s"))
    with pytest.raises(ValueError):
        plots.sparsity_by_layer([0.3], [0.1, 0.2], tmp_path / "s2")
    rng = np.random.default_rng(0)
    x = np.maximum(rng.normal(size=(12, 300)), 0)
    drawn(plots.activation_heatmap(x, x * (rng.random(x.shape) < 0.1), list("abcdefghijkl"), tmp_path / "h", top=20))
    with pytest.raises(ValueError, match="one label per token"):
        plots.activation_heatmap(x, x, ["a"], tmp_path / "h2")


def test_degree_distribution_draws_the_fitted_power_law(tmp_path):
    from bdh.analysis.stats import fit_degrees

    rng = np.random.default_rng(0)
    k = np.floor(rng.pareto(1.5, size=3000) * 3 + 1).astype(int)  # alpha ~ 2.5
    fit = fit_degrees(k).to_dict()
    assert 2.0 < fit["alpha"] < 3.2
    paths = plots.degree_distribution({"in": k, "out": k}, {"in": fit, "out": None}, tmp_path / "deg")
    drawn(paths)
    svg = next(p for p in paths if p.suffix == ".svg").read_text()
    assert f"alpha={fit['alpha']:.2f}" in svg  # the fit is drawn and labelled


def test_the_power_law_line_stays_within_the_measured_probabilities(tmp_path, monkeypatch):
    """The fitted line ran from k_min to the largest degree, two decades below the rarest point measured: it now ends
    where it falls below the smallest probability the data shows (one node of that degree)."""
    from bdh.analysis.stats import fit_degrees

    figs = []
    monkeypatch.setattr(plots, "save", lambda fig, stem, **options: figs.append(fig) or [])
    k = np.floor(np.random.default_rng(0).pareto(1.5, size=3000) * 3 + 1).astype(int)
    plots.degree_distribution({"in": k, "out": k}, {"in": fit_degrees(k).to_dict(), "out": None}, tmp_path / "deg")
    (fig,) = figs
    lowest = 1 / k.size  # a degree held by one node
    (line,) = [l for l in fig.axes[0].get_lines() if l.get_label().startswith("power-law fit")]
    ys = np.asarray(line.get_ydata())
    assert ys.size > 5 and ys.min() >= lowest * (1 - 1e-9)  # relative rounding of the float comparison only
    assert np.asarray(line.get_xdata()).max() <= k.max()
    plots.pyplot().close(fig)


def test_degree_legends_hide_no_point(tmp_path, monkeypatch):
    """The legend sat in a corner of each panel, over points of some models: it is now below the panel."""
    figs = []
    monkeypatch.setattr(plots, "save", lambda fig, stem, **options: figs.append(fig) or [])
    k = np.floor(np.random.default_rng(0).pareto(1.5, size=3000) * 3 + 1).astype(int)
    plots.degree_distribution({"in": k, "out": k}, {"in": None, "out": None}, tmp_path / "deg", reference={"in": k})
    (fig,) = figs
    fig.canvas.draw()
    renderer = fig.canvas.get_renderer()
    for ax in fig.axes:
        legend, frame = ax.get_legend().get_window_extent(renderer), ax.get_window_extent(renderer)
        assert legend.y1 <= frame.y0 + 1, (legend, frame)  # entirely below the axes (1 pixel of rounding)
    plots.pyplot().close(fig)


def test_bench_plots_from_rows(tmp_path):
    rows = [
        {
            "suite": "recall",
            "model": m,
            "setting": f"N{L}-D{p}",
            "width": str(w),
            "state_size": str(w * k),
            "accuracy": str(acc),
            "seed": str(s),
        }
        for m, base, k in (("bdh", 0.9, 16), ("gpt", 0.8, 4))
        for p, L in ((4, 64), (8, 128))
        for w in (32, 64, 128)
        for s in (0, 1)
        for acc in [base - 0.001 * L / p + 0.01 * s + w / 1000]
    ]
    rows += [
        {
            "suite": "sudoku",
            "model": "bdh",
            "width": str(d),
            "state_size": str(16 * d * d),
            "cell_accuracy": str(d / 100),
        }
        for d in (16, 32, 64)
    ]
    rows += [{"suite": "boardpath", "model": "bdh", "width": "x", "state_size": "", "path_validity": ""}]
    rows += [{"suite": "unknown", "model": "bdh"}]
    files, skipped = plots.bench_plots(rows, tmp_path)
    names = sorted(p.name for p in files)
    assert names == sorted(
        f"bench-{s}-{x}.{e}" for s in ("recall", "sudoku") for x in ("width", "state_size") for e in ("png", "svg")
    )
    drawn([tmp_path / "bench-recall-width.png", tmp_path / "bench-recall-state_size.svg"])
    assert sum("'boardpath'" in s and "no rows with numeric" in s for s in skipped) == 2  # both of its figures
    assert any("'unknown'" in s and "no axes known" in s for s in skipped)
    svg = (tmp_path / "bench-recall-width.svg").read_text()
    assert "setting = N64-D4" in svg and "setting = N128-D8" in svg  # one panel per facet
    assert plots.COLUMN_LABELS["state_size"] in (tmp_path / "bench-recall-state_size.svg").read_text()


def test_bdh_plot_run(text_run, tmp_path, capsys):
    csv = tmp_path / "bench.csv"
    csv.write_text(
        "suite,model,width,state_size,cell_accuracy\nsudoku,bdh,16,4096,0.1\nsudoku,bdh,32,16384,0.3\n",
        encoding="utf-8",
    )
    out = tmp_path / "plots"
    code = main(["plot", str(text_run), "--prompt", "a short prompt", "--bench", str(csv), "--out", str(out)])
    stdout, err = capsys.readouterr()
    assert code == 0, err
    for stem in ("curves", "sparsity", "heatmap", "degrees", "bench-sudoku-width", "bench-sudoku-state_size"):
        drawn([out / f"{stem}.png", out / f"{stem}.svg"])
    assert "skipped" not in stdout


def test_bdh_plot_says_what_it_skipped(board_run, tmp_path, capsys):
    # a model folder without metrics or bench results: the model figures only, default board input
    code = main(["plot", str(board_run / "best"), "--out", str(tmp_path / "p")])
    stdout, err = capsys.readouterr()
    assert code == 0, err
    assert "skipped curves: no records in" not in stdout  # the run's metrics are found from best/
    assert "bench" not in stdout  # none asked for: nothing to say
    empty = tmp_path / "empty-run"
    empty.mkdir()
    code = main(["plot", str(empty), "--out", str(tmp_path / "q")])
    stdout, err = capsys.readouterr()
    assert code == 0
    assert "skipped curves: no records in" in stdout and "skipped model figures" in stdout
    code = main(["plot", str(tmp_path / "missing")])
    _, err = capsys.readouterr()
    assert code == 2 and err.count("\n") == 1 and "no such run or model folder" in err
    code = main(["plot", str(board_run), "--bench", str(tmp_path / "none.csv")])
    _, err = capsys.readouterr()
    assert code == 2 and "no such results file" in err


def test_plot_figures_are_readable_in_bits_and_name_the_probe_and_the_inspected_head(
    text_run, tmp_path, capsys, readable_figures
):
    """Issue 27: readable at 100 % zoom, losses in bits per byte, the default probe named, the degree plot's
    legend says what it means, and the head drawn is the one bdh inspect analyses."""
    import torch

    from bdh import load_pretrained
    from bdh.analysis import neurograph as ng
    from bdh.analysis.probe import PROBE_NAME
    from bdh.analysis.report import InspectOptions, inspect_model

    out = tmp_path / "p"
    assert main(["plot", str(text_run), "--out", str(out)]) == 0, capsys.readouterr().err
    titles = readable_figures()
    assert PROBE_NAME in titles["sparsity.png"] and PROBE_NAME in titles["heatmap.png"]
    curves = (out / "curves.svg").read_text()
    assert "bits per byte" in curves and "nats" not in curves
    degrees = (out / "degrees.svg").read_text()
    assert "power-law fit, alpha=" in degrees and "tail best described by" in degrees
    model = load_pretrained(text_run / "best")
    tokens = torch.randint(0, 256, (1, 32))
    with torch.no_grad():
        report, _ = inspect_model(model, tokens, InspectOptions(max_nodes=64, seeds=1))
    head = report["graphs"]["x"]["head"]
    assert head == ng.default_head(model) and f"G_x head {head} " in titles["degrees.png"]


def test_training_curves_share_one_whole_step_axis(tmp_path, monkeypatch):
    """The metrics panel of a run with one evaluation (at the step the time budget ended it) showed steps
    187.5 to 207.5; both panels now share the loss panel's axis, with whole steps as ticks."""
    figures = []
    monkeypatch.setattr(plots, "save", lambda fig, stem, **kw: figures.append(fig) or [])
    records = [{"kind": "train", "step": s, "loss": 5.0 - s / 100} for s in range(1, 199)]
    records.append({"kind": "eval", "step": 198, "val_loss": 2.14, "val_bpb": 3.09, "val_acc": 0.4})
    plots.training_curves(records, tmp_path / "c")
    loss, metrics = figures[0].axes[:2]
    assert metrics.get_xlim() == loss.get_xlim()
    assert loss.get_xlim()[0] < 10  # the metric's one point is placed on the whole run's steps
    ticks = [t for t in metrics.get_xticks() if metrics.get_xlim()[0] <= t <= metrics.get_xlim()[1]]
    assert ticks and all(float(t).is_integer() for t in ticks)
