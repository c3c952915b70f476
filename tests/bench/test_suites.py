"""End to end: each suite's tiny sweep through ``bdh bench``, resume, and bad arguments."""

import csv

import pytest

from bdh.bench.spec import BASE_COLUMNS
from bdh.cli import main


def _rows(path):
    with open(path, newline="", encoding="utf-8") as f:
        return list(csv.DictReader(f))


def _drawn(path):
    assert path.is_file() and path.stat().st_size > 1000, path


QUICK = ["--quick", "--steps", "3", "--threads", "1"]


@pytest.mark.parametrize(
    "suite,models,metric,setting_cols",
    [
        ("recall", ["bdh", "gpt", "baseconv"], "accuracy", ["seq_len", "num_pairs"]),
        ("boardpath", ["bdh", "gpt", "hyperset"], "path_validity", ["board_size"]),
        ("sudoku", ["bdh", "gpt", "hyperset"], "cell_accuracy", ["givens"]),
    ],
)
def test_suite_end_to_end(tmp_path, capsys, suite, models, metric, setting_cols):
    out = tmp_path / "bench"
    code = main(["bench", suite, *QUICK, "--lrs", "1e-3,3e-3", "--out", str(out)])
    stdout, err = capsys.readouterr()
    assert code == 0, err
    runs, results = _rows(out / "runs.csv"), _rows(out / "results.csv")
    assert len(runs) == 2 * len(models)  # every model at both learning rates; the trivial row is not a run
    # one row per (model, setting, width), and the trivial answer's reference row
    assert sorted(r["model"] for r in results) == sorted([*models, "trivial"])
    (trivial,) = [r for r in results if r["model"] == "trivial"]
    results = [r for r in results if r["model"] != "trivial"]
    assert trivial["params"] == trivial["state_size"] == "0" and trivial["lr"] == "" and trivial["seed"] == "0"
    assert trivial["reference"].startswith("trivial (") and 0.0 <= float(trivial[metric]) <= 1.0
    header = list(results[0])
    for col in BASE_COLUMNS + setting_cols + [metric, "val_loss", "config", "run_dir", "lrs_tried"]:
        assert col in header, col
    for r in results:
        assert r["suite"] == suite and r["lrs_tried"] == "0.001;0.003"
        assert (
            int(r["params"]) > 0 and int(r["state_size"]) > 0 and float(r["tok_per_s"]) > 0 and float(r["wall_s"]) > 0
        )
        assert int(r["steps"]) == 3 and r["seed"] == "0"
        assert 0.0 <= float(r[metric]) <= 1.0
        assert (out / r["run_dir"] / "config.yaml").is_file()
        # the kept row is the learning rate with the best score among this model's runs
        mine = [x for x in runs if x["model"] == r["model"]]
        score = [
            c
            for c in {
                "recall": ["accuracy"],
                "boardpath": ["path_validity", "cell_accuracy"],
                "sudoku": ["board_accuracy", "cell_accuracy"],
            }[suite]
        ]
        best = max(mine, key=lambda x: (tuple(float(x[c]) for c in score), -float(x["lr"])))
        assert r["lr"] == best["lr"]
    # parameter matching: the baselines are within 15% of BDH's count at the same width
    bdh = next(int(r["params"]) for r in results if r["model"] == "bdh")
    for r in results:
        assert abs(int(r["params"]) - bdh) / bdh < 0.15, (r["model"], r["params"], bdh)
    # one seed (--quick): the summary has one row per model, and no winner is declared
    summary = _rows(out / "summary.csv")
    assert [r["model"] for r in summary] == [*sorted(models), "trivial"]  # the reference row last
    for r in summary:
        assert r["seeds"] == "0" and r["winner"] == "—" and r["winner_note"] == "one seed: no spread"
        mine = next(x for x in [*results, trivial] if x["model"] == r["model"])
        assert (
            float(r[f"{metric}_mean"]) == float(r[f"{metric}_min"]) == float(r[f"{metric}_max"]) == float(mine[metric])
        )
    assert summary[-1]["reference"] == trivial["reference"]
    table = (out / "results.md").read_text()
    head = next(line for line in table.splitlines() if line.startswith("| model |"))
    assert table.count("\n| ") == 2 + len(models) and metric in head and "One seed: no spread" in table
    assert f"\n| {trivial['reference']} |" in table
    for x in ("width", "state_size"):
        _drawn(out / "plots" / f"bench-{suite}-{x}.png")
    if suite == "sudoku":
        depth = _rows(out / "depth.csv")
        assert {r["model"] for r in depth} == {"bdh", "gpt", "hyperset"}  # all weight-shared in the recipe
        assert sorted({int(r["passes"]) for r in depth}) == [1, 2, 4, 8]
        assert all(1 <= float(r["mean_passes"]) <= int(r["passes"]) for r in depth)  # stopped once settled
        assert {r["rung"] for r in depth} == {"45-50"}  # --quick's one rung
        assert "exact solver" in (out / "ladder.md").read_text() and (out / "depth.md").is_file()
        assert all(0.0 <= float(r["board_45_50"]) <= 1.0 for r in [*results, trivial])  # the trivial row's too
        _drawn(out / "plots" / "depth-sudoku.png")
        assert (out / "data" / "train.csv").is_file()
        assert all(r["depth"] for r in results)


def test_resume_skips_runs_already_in_the_csv(tmp_path, capsys):
    out = tmp_path / "bench"
    assert main(["bench", "recall", *QUICK, "--models", "bdh", "--lrs", "3e-3", "--out", str(out)]) == 0
    first = _rows(out / "runs.csv")
    capsys.readouterr()
    # without --resume an existing folder is refused
    assert main(["bench", "recall", *QUICK, "--models", "bdh", "--out", str(out)]) == 2
    assert "--resume" in capsys.readouterr().err
    assert (
        main(["bench", "recall", *QUICK, "--models", "bdh", "--lrs", "1e-3,3e-3", "--out", str(out), "--resume"]) == 0
    )
    err = capsys.readouterr().err
    assert "1 run(s) already in" in err and err.count("bench recall [") == 1  # only the new learning rate trained
    runs = _rows(out / "runs.csv")
    assert len(runs) == 2 and runs[0] == first[0]
    assert _rows(out / "results.csv")[0]["lrs_tried"] == "0.001;0.003"
    # another run length is another result: trained again, and only rows of this length are reported
    assert (
        main(
            [
                "bench",
                "recall",
                "--quick",
                "--steps",
                "2",
                "--threads",
                "1",
                "--models",
                "bdh",
                "--lrs",
                "3e-3",
                "--out",
                str(out),
                "--resume",
            ]
        )
        == 0
    )
    assert len(_rows(out / "runs.csv")) == 3
    assert [(r["model"], r["steps"]) for r in _rows(out / "results.csv")] == [("bdh", "2"), ("trivial", "0")]


@pytest.mark.parametrize(
    "argv,msg",
    [
        (["bench", "recall", "--models", "bdh,nosuch"], "--models: must be one of bdh, baseconv, "),
        (
            ["bench", "recall", "--models", "bdh,hyperset"],
            "--models: 'hyperset' cannot run in the recall suite: HyperSETConfig.causal: ",
        ),
        (["bench", "boardpath", "--models", "baseconv"], "--models: 'baseconv' cannot run in the boardpath suite: "),
        (["bench", "recall", "--lrs", "fast"], "not a number"),
        (["bench", "sudoku", "--seeds", "0,x"], "not an integer"),
        (["bench", "recall", "--steps", "0"], "--steps"),
        (["bench", "recall", "--widths", "10"], "multiples of 4"),
        (["bench", "recall", "--quick", "--full"], "not allowed with"),
        (["bench", "recall", "--device", "tpu"], "--device"),
        (["bench", "nosuch"], "invalid choice"),
        (["bench"], "give a suite"),
    ],
)
def test_bad_arguments_are_one_line_errors(tmp_path, capsys, argv, msg):
    assert main([*argv, "--out", str(tmp_path / "o")] if len(argv) > 2 else argv) == 2
    err = capsys.readouterr().err
    assert msg in err and err.count("\n") == 1 and err.startswith("bdh: error:")
    assert not (tmp_path / "o").exists()


def test_dry_run_lists_the_runs_without_training(tmp_path, capsys):
    assert main(["bench", "recall", "--dry-run", "--out", str(tmp_path / "o")]) == 0
    stdout = capsys.readouterr().out
    # 3 settings (D = 2, 4, 8 at N = 32) x 1 width x 3 models, x 1 learning rate x 2 seeds
    assert "18 runs (9 model x setting x width" in stdout
    assert stdout.count("width   32:") == 9 and "'name': 'baseconv'" in stdout
    assert "57,344 params" in stdout  # BDH at width 32: 3 n D + 2 V D with n = 512, V = 128
    assert not (tmp_path / "o").exists()


def test_an_interrupted_run_is_not_recorded_and_resume_trains_it(tmp_path, capsys, monkeypatch):
    from bdh.bench import runner

    real = runner.train_one
    calls = []

    def stopped_on_second(spec, *a, **k):
        calls.append(spec.lr)
        if len(calls) == 2:
            raise runner.BenchInterrupted(2)
        return real(spec, *a, **k)

    monkeypatch.setattr(runner, "train_one", stopped_on_second)
    out = tmp_path / "bench"
    argv = ["bench", "recall", *QUICK, "--models", "bdh", "--lrs", "1e-3,3e-3", "--out", str(out)]
    assert main(argv) == 130
    assert "--resume" in capsys.readouterr().err
    assert [r["lr"] for r in _rows(out / "runs.csv")] == ["0.001"]
    assert not (out / "results.csv").exists()
    assert main([*argv, "--resume"]) == 0
    assert calls == [1e-3, 3e-3, 3e-3]  # only the interrupted run is trained again
    assert len(_rows(out / "runs.csv")) == 2 and [r["model"] for r in _rows(out / "results.csv")] == ["bdh", "trivial"]


def test_recall_with_two_seeds_and_the_longer_evaluation(tmp_path, capsys):
    """Two seeds: results.csv keeps one row per seed, summary.csv and results.md their mean and range; the
    longer evaluation adds longer_len and accuracy_longer, and GPT and BaseConv take that length."""
    import dataclasses

    from bdh.bench import recall, runner

    sweep = dataclasses.replace(
        recall.RecallSweep.preset("quick"), vocab_size=128, eval_length_factor=2, seeds=(0, 1), lrs=(3e-3,), steps=2
    )
    out = tmp_path / "bench"
    done = runner.run_suite(
        recall.suite_def(sweep), recall.plan(sweep), runner.BenchOptions(out=out, threads=1, plots=False)
    )
    results, summary = _rows(out / "results.csv"), _rows(out / "summary.csv")
    assert len(results) == 8 and sorted((r["model"], r["seed"]) for r in results) == sorted(
        (m, s) for m in ("bdh", "gpt", "baseconv", "trivial") for s in ("0", "1")
    )
    for r in results:
        assert r["longer_len"] == "64" and 0.0 <= float(r["accuracy_longer"]) <= 1.0
    assert len(summary) == 4 and len(done["summary"]) == 4 and summary[-1]["model"] == "trivial"
    for r in summary:
        mine = [float(x["accuracy_longer"]) for x in results if x["model"] == r["model"]]
        assert r["seeds"] == "0;1" and r["longer_len"] == "64"
        assert float(r["accuracy_longer_mean"]) == pytest.approx(sum(mine) / 2)
        assert float(r["accuracy_longer_min"]) == min(mine) and float(r["accuracy_longer_max"]) == max(mine)
        assert r["winner"] in ("—", "bdh", "gpt", "baseconv")
    assert len({r["winner"] for r in summary}) == 1  # one (setting, width): one verdict
    table = (out / "results.md").read_text()
    assert "accuracy_longer" in table and "–" in table and "One seed: no spread" not in table
