"""benchmarks/carried_heads.py (which heads' carried state costs bits on text) on a tiny delta-rule run."""

from __future__ import annotations

import pytest
from _train_helpers import set_args, tiny

from bdh.cli import main


@pytest.fixture(scope="module")
def delta_run(tmp_path_factory, corpus_file):
    run = tmp_path_factory.mktemp("runs") / "delta"
    extra = ["train.max_steps=3", "eval.every=0", "model.state_write=delta", "model.damping=local-global"]
    assert main(["train", *set_args(tiny(corpus_file, run, *extra, "model.positional=none"))]) == 0
    return run


def _table(out: str) -> dict[str, list[float]]:
    rows = [line.split("|")[1:-1] for line in out.splitlines() if line.startswith("| ") and "positions" not in line]
    return {cells[0].strip(): [float(c) for c in cells[1:]] for cells in rows}


def test_the_rows_read_the_same_streams(load_benchmark, delta_run, capsys):
    """Every row is there, the first window (nothing carried yet) scores the same in each, and emptying heads
    changes what follows; the carried row is what ``bdh eval --carry-state`` prints for the same lanes."""
    bench = load_benchmark("carried_heads")
    assert bench.main([str(delta_run), "--length", "256", "--lanes", "2", "--hard-gate"]) == 0
    table = _table(capsys.readouterr().out)
    names = list(table)
    assert names[:2] == ["windowed (every head emptied each window)", "carried"]
    assert names[2:] == [
        "undamped heads 1 emptied each window",
        "damped heads 0 emptied each window",
        "carried, hard write gate",
    ]
    first = [row[0] for name, row in table.items() if "hard" not in name]
    assert max(first) - min(first) < 2e-3  # the same first window from an empty state (printed to 3 digits)
    assert table["carried"][-1] != table["windowed (every head emptied each window)"][-1]
    assert (
        main(["eval", str(delta_run), "--carry-state", "--length", "256", "--batch-size", "2", "--progress", "none"])
        == 0
    )
    carried_line = next(line for line in capsys.readouterr().out.splitlines() if line.startswith("| state carried"))
    assert [float(c) for c in carried_line.split("|")[2:-1]] == pytest.approx(table["carried"], abs=1.5e-3)


def test_bad_input_is_one_line(load_benchmark, delta_run, corpus_file, tmp_path, capsys):
    bench = load_benchmark("carried_heads")
    gpt = tmp_path / "gpt"
    overrides = [o for o in tiny(corpus_file, gpt, "train.max_steps=1", "eval.every=0") if not o.startswith("model.")]
    overrides += ["model.name=gpt", "model.n_layer=1", "model.n_embd=16", "model.n_head=2"]
    assert main(["train", *set_args(overrides)]) == 0
    capsys.readouterr()
    assert bench.main([str(gpt)]) == 2
    assert capsys.readouterr().err == "error: " + f"{gpt}: the run's model is a GPT, not a BDH\n"
    plain = tmp_path / "plain"
    assert main(["train", *set_args(tiny(corpus_file, plain, "train.max_steps=1", "eval.every=0"))]) == 0
    capsys.readouterr()
    assert bench.main([str(plain), "--hard-gate"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "sigmoid gate" in err
    assert bench.main([str(delta_run), "--length", "10000000"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "need more text than the split has" in err
    with pytest.raises(SystemExit):
        bench.main([str(delta_run), "--lanes", "0"])
