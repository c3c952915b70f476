"""End to end: each suite's tiny sweep through ``bdh bench``, resume, and bad arguments."""

import csv

import pytest

from bdh.bench.runner import BASE_COLUMNS
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
    assert len(runs) == 2 * len(models)  # every model at both learning rates
    assert sorted(r["model"] for r in results) == sorted(models)  # one row per (model, setting, width)
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
    table = (out / "results.md").read_text()
    assert table.count("\n| ") == 1 + len(models) and metric in table.splitlines()[2]
    for x in ("width", "state_size"):
        _drawn(out / "plots" / f"bench-{suite}-{x}.png")
    if suite == "sudoku":
        depth = _rows(out / "depth.csv")
        assert {r["model"] for r in depth} == {"bdh", "hyperset"}  # the weight-shared ones
        assert sorted({int(r["passes"]) for r in depth}) == [1, 2, 4]
        _drawn(out / "plots" / "depth-sudoku.png")
        assert (out / "data" / "train.csv").is_file()
        assert all(r["depth"] for r in results if r["model"] != "gpt")


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
    assert [r["steps"] for r in _rows(out / "results.csv")] == ["2"]


@pytest.mark.parametrize(
    "argv,msg",
    [
        (["bench", "recall", "--models", "bdh,hyperset"], "not in the recall suite"),
        (["bench", "boardpath", "--models", "baseconv"], "not in the boardpath suite"),
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
    assert "48 runs (24 model x setting x width" in stdout  # 4 settings x 2 widths x 3 models, x 2 learning rates
    assert stdout.count("width   32:") == 12 and "'name': 'baseconv'" in stdout
    assert "81,920 params" in stdout  # BDH at width 32: 3 n D + 2 V D with n = 512, V = 512
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
    assert len(_rows(out / "runs.csv")) == 2 and len(_rows(out / "results.csv")) == 1
