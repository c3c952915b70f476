"""The bench plots draw the mean over seeds as a line and the seeds' min–max range as a band."""

import matplotlib.colors as mcolors
import numpy as np
import pytest

from bdh.viz import plots


@pytest.fixture
def drawn(monkeypatch):
    """The figures `bench_plots` makes, by file stem (nothing is written)."""
    figs = {}

    def keep(fig, stem, **options):
        figs[stem.name] = fig
        return [stem]

    monkeypatch.setattr(plots, "save", keep)
    yield figs
    from bdh.plotting import pyplot

    for fig in figs.values():
        pyplot().close(fig)


def _rows(accs):
    """Recall result rows from {(model, width): accuracy per seed}, as CSV text."""
    return [
        {
            "suite": "recall",
            "model": m,
            "setting": "N64-D4",
            "width": str(w),
            "state_size": str(8 * w),
            "seed": str(seed),
            "accuracy": str(a),
        }
        for (m, w), per_seed in accs.items()
        for seed, a in enumerate(per_seed)
    ]


def _range(points):
    """{x: (low, high)} of (x, y) points."""
    out = {}
    for x, y in points:
        lo, hi = out.get(float(x), (np.inf, -np.inf))
        out[float(x)] = (min(lo, float(y)), max(hi, float(y)))
    return out


def _band(ax, color):
    """{x: (low, high)} of the band filled in ``color``."""
    from matplotlib.collections import PolyCollection

    rgb = mcolors.to_rgb(color)
    bands = [c for c in ax.collections if isinstance(c, PolyCollection) and np.allclose(c.get_facecolor()[0][:3], rgb)]
    assert len(bands) == 1
    return _range(bands[0].get_paths()[0].vertices)


def _bars(ax, color):
    """{x: (low, high)} of the error bars drawn in ``color``."""
    from matplotlib.collections import LineCollection

    rgb = mcolors.to_rgb(color)
    bars = [c for c in ax.collections if isinstance(c, LineCollection) and np.allclose(c.get_color()[0][:3], rgb)]
    assert len(bars) == 1
    return _range(v for seg in bars[0].get_segments() for v in seg)


def test_bench_plots_draw_the_seed_mean_and_its_min_max_band(drawn):
    accs = {("bdh", 32): (0.2, 0.4), ("bdh", 64): (0.5, 0.9), ("gpt", 32): (0.1, 0.3), ("gpt", 64): (0.6, 0.6)}
    files, skipped = plots.bench_plots(_rows(accs), "plots")
    assert skipped == [] and sorted(drawn) == ["bench-recall-state_size", "bench-recall-width"]
    ax = drawn["bench-recall-width"].axes[0]
    lines = {line.get_label(): line for line in ax.get_lines() if not line.get_label().startswith("_")}
    assert sorted(lines) == ["BDH", "GPT"]  # the models' names, not the column's values
    assert [t.get_text() for t in ax.get_legend().get_texts()] == ["BDH", "GPT"]
    for model in ("bdh", "gpt"):
        line = lines[plots.MODEL_NAMES[model]]
        assert list(line.get_xdata()) == [32.0, 64.0]
        means = [np.mean(accs[(model, w)]) for w in (32, 64)]
        assert np.allclose(line.get_ydata(), means)
        band, bars = _band(ax, line.get_color()), _bars(ax, line.get_color())
        for w in (32, 64):
            assert band[float(w)] == pytest.approx((min(accs[(model, w)]), max(accs[(model, w)])))
            assert bars[float(w)] == pytest.approx((min(accs[(model, w)]), max(accs[(model, w)])))


def test_a_single_width_shows_the_range_as_a_bar(drawn):
    plots.bench_plots(_rows({("bdh", 32): (0.2, 0.6)}), "plots")
    ax = drawn["bench-recall-width"].axes[0]
    (line,) = [line for line in ax.get_lines() if line.get_label() == "BDH"]
    assert _bars(ax, line.get_color()) == {32.0: pytest.approx((0.2, 0.6))}


def test_one_seed_draws_no_band(drawn):
    plots.bench_plots(_rows({("bdh", 32): (0.2,), ("bdh", 64): (0.5,)}), "plots")
    ax = drawn["bench-recall-width"].axes[0]
    assert len(ax.get_lines()) == 1 and len(ax.collections) == 0


def test_the_trivial_row_is_a_dashed_line_in_each_panel(drawn):
    rows = _rows({("bdh", 32): (0.2, 0.4), ("bdh", 64): (0.5, 0.9)})
    rows += [{**r, "setting": "N128-D4"} for r in rows]
    # the trivial answer: no training, state size 0, the same score at every width and seed of a setting
    for setting, acc in (("N64-D4", 0.05), ("N128-D4", 0.1)):
        rows += [
            {"suite": "recall", "model": "trivial", "setting": setting, "width": str(w), "state_size": "0",
             "seed": str(s), "accuracy": str(acc)}
            for w in (32, 64) for s in (0, 1)
        ]  # fmt: skip
    plots.bench_plots(rows, "plots")
    for stem in ("bench-recall-width", "bench-recall-state_size"):
        for ax, acc in zip(drawn[stem].axes, (0.1, 0.05), strict=True):  # panels sorted by setting: N128, N64
            (ref,) = [line for line in ax.get_lines() if line.get_label() == "trivial answer"]
            assert ref.get_linestyle() == "--" and list(ref.get_ydata()) == [acc, acc]
            assert "trivial answer" in [t.get_text() for t in ax.get_legend().get_texts()]
            # it is not a series: the bdh line keeps its points, and no point sits at state size 0
            (line,) = [line for line in ax.get_lines() if line.get_label() == "BDH"]
            assert 0.0 not in list(line.get_xdata())
    # without a trivial row there is no dashed line
    drawn.clear()
    plots.bench_plots(_rows({("bdh", 32): (0.2, 0.4)}), "plots")
    lines = drawn["bench-recall-width"].axes[0].get_lines()
    assert "trivial answer" not in [line.get_label() for line in lines]
    assert "--" not in [x.get_linestyle() for x in lines]


def test_bench_figures_are_readable_and_say_what_they_measure(tmp_path, readable_figures):
    """Written for real: readable at 100 % zoom, the axes labelled with what the columns measure, the
    panels sharing one accuracy scale, and a few widths ticked where they are."""
    accs = {("bdh", 32): (0.2, 0.4), ("bdh", 64): (0.5, 0.9), ("gpt", 32): (0.1, 0.3), ("gpt", 64): (0.6, 0.6)}
    rows = _rows(accs) + [{**r, "setting": "N128-D4"} for r in _rows(accs)]
    files, skipped = plots.bench_plots(rows, tmp_path)
    assert skipped == [] and len(files) == 4
    assert "recall: accuracy against width" in readable_figures()["bench-recall-width.png"]
    svg = (tmp_path / "bench-recall-width.svg").read_text()
    assert plots.COLUMN_LABELS["width"] in svg and plots.COLUMN_LABELS["accuracy"] in svg
    assert plots.column_label("val_loss") == "val loss"  # a column without a label: its name in words


def test_a_few_values_are_ticked_where_they_are_and_a_wide_range_is_logarithmic(drawn):
    plots.bench_plots(_rows({("bdh", 32): (0.2,), ("bdh", 48): (0.5,), ("gpt", 64): (0.6,)}), "plots")
    ax = drawn["bench-recall-width"].axes[0]
    assert list(ax.get_xticks()) == [32.0, 48.0, 64.0] and ax.get_xscale() == "linear"
    drawn.clear()
    plots.bench_plots(_rows({("bdh", 32): (0.2,), ("bdh", 128): (0.5,), ("gpt", 512): (0.6,)}), "plots")
    assert drawn["bench-recall-width"].axes[0].get_xscale() == "log"


def test_suite_plot_log_x_names_and_more_than_ten_series(drawn, tmp_path):
    """``log_x`` makes the x axis logarithmic whatever the spread, and series past the tenth colour are drawn dashed
    so that no two lines look the same."""
    models = ["bdh", *(f"m{i:02d}" for i in range(1, 12))]
    rows = _rows({(m, w): (0.1 * i, 0.1 * i + 0.05) for i, m in enumerate(models) for w in (32, 64)})
    plots.suite_plot(rows, tmp_path / "s", "state_size", "accuracy", log_x=True)
    plots.suite_plot(rows, tmp_path / "lin", "state_size", "accuracy")
    (ax,) = drawn["s"].axes
    assert ax.get_xscale() == "log" and drawn["lin"].axes[0].get_xscale() == "linear"  # 256..512: a factor of 2
    # twelve series: one legend beside the panel (none inside, where it would hide lines), every series in it
    assert ax.get_legend() is None and len(drawn["s"].legends) == 1
    labels = [t.get_text() for t in drawn["s"].legends[0].get_texts()]
    assert "BDH" in labels and "m01" in labels and len(labels) == 12  # the legend names of MODEL_NAMES
    few = _rows({(m, w): (0.1, 0.2) for m in models[: plots.LEGEND_INSIDE] for w in (32, 64)})
    plots.suite_plot(few, tmp_path / "few", "state_size", "accuracy")
    assert drawn["few"].axes[0].get_legend() is not None and not drawn["few"].legends  # few series: inside
    styles = {line.get_label(): (line.get_color(), line.get_linestyle()) for line in ax.get_lines()}
    assert len({styles[m] for m in ["BDH", *models[1:]]}) == 12  # twelve different looks


def test_series_at_the_same_points_stay_visible(drawn, tmp_path):
    """Two models both at chance (``bdh bench recall --quick``): BDH's marker was hidden under GPT's. Each series
    has its own marker shape, each later one smaller, so a marker drawn over another leaves it in sight."""
    rows = _rows({(m, w): (0.02,) for m in ("bdh", "gpt", "mamba") for w in (8, 16)})
    plots.suite_plot(rows, tmp_path / "same", "width", "accuracy")
    lines = [line for line in drawn["same"].axes[0].get_lines() if line.get_marker() not in (None, "None", "")]
    assert len(lines) == 3
    assert len({line.get_marker() for line in lines}) == 3
    sizes = [line.get_markersize() for line in lines]  # in drawing order: the later on top
    assert sizes == sorted(sizes, reverse=True) and len(set(sizes)) == 3
