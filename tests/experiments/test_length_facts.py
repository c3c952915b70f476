"""``bdh experiment length``'s capacity map (``facts``, ``facts_read``): the counts' one-line refusals, which counts a
run reads, the facts kept on hand-made cells, and a tiny map end to end, resumed with more counts."""

from __future__ import annotations

import json

import pytest

from bdh.cli import main
from bdh.errors import UserError
from bdh.experiments.length import Config
from bdh.experiments.length.facts import fits, kept, map_cells, read_counts


@pytest.mark.parametrize(
    "fields, message",
    [
        ({"facts": (2, 2)}, "length.facts: give counts none repeated"),
        ({"facts_read": (0,)}, "length.facts_read"),
        ({"facts": (4,), "tasks": ("induction",)}, "length.facts: counts the facts of recall_gap"),
        ({"facts_read": (128,)}, "length.facts_read: 128 facts: 128 distinct keys do not fit"),  # V = 256: 127 keys
        ({"facts": (32,)}, "length: recall_gap with 32 facts: .*no room"),  # 4 x 32 > T = 64
        ({"facts": (2**64,)}, "length.facts: 18446744073709551616 facts: .* do not fit"),
    ],
)
def test_bad_counts_are_one_line(fields, message):
    with pytest.raises(UserError, match=message) as info:
        Config(**fields)
    assert "\n" not in str(info.value)


def test_the_counts_a_run_reads():
    config = Config(facts_read=(1, 8, 16))
    assert read_counts(config, {"task": "recall_gap"}) == [None, 1, 16]  # its own (recall_pairs = 8) first
    assert read_counts(config, {"task": "recall_gap", "facts": 4}) == [4, 1, 8, 16]
    assert read_counts(config, {"task": "induction"}) == [None]
    assert Config(facts=(1, 2)).trained_facts("recall_gap") == (1, 2)
    assert Config().trained_facts("recall_gap") == (None,)
    assert fits(16, 64) and not fits(17, 64)


def _cell(accuracy: float) -> dict:
    return {"accuracy": accuracy, "right": 0, "n": 1, "seeds": [accuracy], "status": "ok"}


def test_facts_kept_is_the_largest_count_with_every_smaller_one_held():
    rows = []
    for facts, accs in {1: (1.0, 0.95), 2: (0.92, 0.5), 4: (0.95, 0.9), 8: (0.2, 0.91)}.items():
        for length, acc in zip((64, 1024), accs):
            rows.append({"model": "m", "read": "state", "trained": 4, "facts": facts, "length": length, "status": "ok",
                         "right": round(acc * 100), "n": 100, "accuracy": acc})  # fmt: skip
    cells = map_cells(rows)
    assert kept(cells, ("m", "state", 4), 64) == 4  # 1, 2, 4 at >= 0.9, 8 not
    assert kept(cells, ("m", "state", 4), 1024) == 1  # 2 falls: 4 and 8 do not count past it
    assert kept(cells, ("m", "state", 4), 4096) is None  # nothing read there
    rows = [{**r, "right": 10, "accuracy": 0.1} for r in rows if r["facts"] == 1]
    assert kept(map_cells(rows), ("m", "state", 4), 64) == 0


def test_a_tiny_map_end_to_end_and_resumed_with_more_counts(tmp_path, capsys, readable_figures, monkeypatch):
    monkeypatch.setattr("bdh.experiments.length.facts.FRONTIER", (64,))  # the frontier at a length this map reads
    out = tmp_path / "length"
    args = ["experiment", "length", "--quick", "--out", str(out), "--threads", "1", "--set", "steps=3"]
    args += ["--set", "models=[bdh]", "--set", "tasks=[recall_gap]", "--set", "facts=[1,2]", "--set", "max_length=64"]
    args += ["--set", "stop_after_chance=0"]
    assert main([*args, "--set", "facts_read=[4]"]) == 0
    results = json.loads((out / "results.json").read_text())
    assert sorted(p.name for p in (out / "models").iterdir()) == ["bdh-recall_gap-D1-s0", "bdh-recall_gap-D2-s0"]
    got = sorted((r["facts"], r["length"]) for r in results["rows"] if r["model"] == "bdh")
    assert got == sorted([(d, n) for d in (1, 2) for n in (32, 64)] * 1 + [(4, 32), (4, 64)] * 2)
    assert all(r["n"] == 64 * r["facts"] for r in results["rows"])  # D questions per test sequence
    capacity = results["capacity"]
    assert set(capacity["kept"]) == {"bdh, trained at D = 1", "bdh, trained at D = 2"}
    assert capacity["state_sizes"]["bdh"] > 0
    report = (out / "report.md").read_text()
    assert "## The capacity map" in report and "4 (past the trained count)" in report
    assert set(readable_figures()) == {"facts_kept.png", "facts_frontier.png", "accuracy.png"}
    capsys.readouterr()
    assert main([*args, "--set", "facts_read=[4,8]", "--resume"]) == 0  # facts_read selects reads: no training
    err = capsys.readouterr().err
    assert "length: training" not in err and "(state, 8 facts)" in err and "(state, 4 facts)" not in err
    rows = json.loads((out / "results.json").read_text())["rows"]
    assert sorted({r["facts"] for r in rows}) == [1, 2, 4, 8]
    assert not any(r["facts"] == 8 and r["length"] == 16 for r in rows)


def test_a_length_no_model_was_read_at_says_so_in_its_panel(tmp_path, readable_figures, monkeypatch):
    """A run stopped at chance before 16k (Mamba's at BDH's state) had an empty frontier panel and a legend warning."""
    import warnings

    from matplotlib.text import Text

    from bdh.experiments.length import facts

    series = [("mamba", "state", 8)]
    kept_rows = {facts._label(series[0]): {1024: 0, 16384: None}}
    texts = []
    real_save = facts.save_figure

    def spy(fig, path):
        texts.extend(t.get_text() for t in fig.findobj(Text))
        return real_save(fig, path)

    monkeypatch.setattr(facts, "save_figure", spy)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # matplotlib's "No artists with labels found to put in legend"
        facts.frontier_figure(tmp_path, series, kept_rows, {"mamba": 32768}, [1024, 16384])
    assert any("no model was read at 16,384 tokens" in t for t in texts)
    assert not any("no model was read at 1,024" in t for t in texts)
