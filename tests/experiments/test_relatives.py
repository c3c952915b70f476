"""``bdh experiment relatives``: the smoke test end to end, resume after an interrupt, one-line errors for bad
``--set`` values, the verdicts on synthetic rows, the models by label, the byte unigram and the plan."""

from __future__ import annotations

import csv
import json
import math
from pathlib import Path

import numpy as np
import pytest
import torch

from bdh.bench import runner
from bdh.bench.spec import RunSpec, run_key
from bdh.cli import main
from bdh.errors import UserError
from bdh.experiments import relatives
from bdh.experiments.relatives import costs, zoo
from bdh.experiments.relatives.verdict import BETTER, WORSE, compare, tally

#: a quicker smoke test still: the equal-clock runs take 1.2 s each
FAST = ["--quick", "--threads", "1", "--set", "lm_minutes=0.02"]


def _rows(path: Path) -> list[dict]:
    with open(path, newline="", encoding="utf-8") as f:
        return list(csv.DictReader(f))


@pytest.fixture(scope="module")
def quick_out(tmp_path_factory) -> Path:
    """One ``--quick`` run through the command line, shared by the tests that read its outputs."""
    out = tmp_path_factory.mktemp("relatives") / "quick"
    assert main(["experiment", "relatives", *FAST, "--out", str(out)]) == 0
    return out


def test_quick_end_to_end_writes_both_suites_the_verdicts_and_the_figures(quick_out):
    config = relatives.Config.preset("quick")
    frontier, lm = _rows(quick_out / "frontier" / "runs.csv"), _rows(quick_out / "lm" / "runs.csv")
    assert len(frontier) == len(config.models) * len(config.widths) * len(config.seq_lens)  # one seed, one lr
    assert {r["model"] for r in frontier} == set(config.models) and {r["seq_len"] for r in frontier} == {"16"}
    assert all(float(r["cpu_s_per_step"]) > 0 and int(r["state_size"]) > 0 for r in frontier)
    # the language model: every model at equal tokens (exactly lm_steps steps) and at equal wall-clock (a budget)
    assert sorted((r["model"], r["budget"]) for r in lm) == sorted(
        (m, b) for m in config.models for b in ("tokens", "clock")
    )
    for r in lm:
        assert math.isfinite(float(r["bpb"])) and r["width"] == str(config.lm_width)
        if r["budget"] == "tokens":
            assert int(r["steps"]) == config.lm_steps and r["max_minutes"] == ""
        else:
            assert float(r["max_minutes"]) == 0.02 and int(r["steps"]) >= 1
    lm_results = _rows(quick_out / "lm" / "results.csv")
    (unigram, _) = sorted((r for r in lm_results if r["model"] == "trivial"), key=lambda r: r["budget"])
    assert "byte unigram" in unigram["reference"] and 3.0 < float(unigram["bpb"]) < 8.0
    results = json.loads((quick_out / "results.json").read_text())
    assert {v["model"] for v in results["verdicts"]} == {"gpt", "baseconv"}
    assert {v["verdict"] for v in results["verdicts"]} == {"one seed: no spread"}
    assert len(results["verdicts"]) == 2 * (len(config.widths) + 2)  # two models x (frontier cells + two budgets)
    report = (quick_out / "report.md").read_text()
    for part in ("## Targets", "Against BDH", "(a) MQAR frontier", "(b) Byte-level", "cpu_s_per_step", "cannot say"):
        assert part in report, part
    # the run time is the ledgers' (a resumed folder counts the runs of every process), printed as duration() does
    ledgers = sum(float(r["wall_s"]) for r in frontier + lm)
    assert f"the runs took {costs.duration(ledgers)} of wall time by the ledgers" in report
    for stem in ("frontier-width", "frontier-state", "lm-bpb"):
        assert (quick_out / "figures" / f"{stem}.png").stat().st_size > 1000
    assert json.loads((quick_out / relatives.MARKER).read_text())["config"]["models"] == list(config.models)


def test_an_interrupt_keeps_finished_runs_and_resume_trains_only_the_rest(tmp_path, capsys, monkeypatch):
    real, calls = runner.train_one, []

    def stopped_on_third(spec, *a, **k):
        calls.append((spec.suite, spec.model, spec.width))
        if len(calls) == 3:
            raise runner.BenchInterrupted(2)
        return real(spec, *a, **k)

    monkeypatch.setattr(runner, "train_one", stopped_on_third)
    out = tmp_path / "rel"
    argv = ["experiment", "relatives", *FAST, "--set", "models=[bdh,gpt]", "--out", str(out)]
    assert main(argv) == 130
    err = capsys.readouterr().err
    assert "--resume" in err and "relatives" in err
    assert len(_rows(out / "frontier" / "runs.csv")) == 2 and not (out / "report.md").exists()
    assert main([*argv, "--resume"]) == 0
    # 4 frontier runs (2 models x 2 widths) and 4 language-model runs; only the interrupted one twice
    assert len(calls) == 9 and calls.count(calls[2]) == 2
    assert len(_rows(out / "frontier" / "runs.csv")) == 4 and len(_rows(out / "lm" / "runs.csv")) == 4
    assert (out / "report.md").is_file()
    # a resume with another config is refused in one line; one that only selects models is not
    assert main([*argv, "--resume", "--set", "mqar_steps=21"]) == 2
    assert "differs in mqar_steps" in capsys.readouterr().err


def test_resume_refuses_a_foreign_folder(tmp_path, capsys):
    (tmp_path / "other").mkdir()
    (tmp_path / "other" / "x.txt").write_text("mine")
    assert main(["experiment", "relatives", "--quick", "--resume", "--out", str(tmp_path / "other")]) == 2
    err = capsys.readouterr().err
    assert "not a relatives experiment folder" in err and err.count("\n") == 1


@pytest.mark.parametrize(
    "setting, field",
    [
        ("models=[gpt,baseconv]", "relatives.models"),
        ("models=[bdh,nosuch]", "relatives.models"),
        ("models=[bdh,bdh]", "relatives.models"),
        ("num_pairs=[2,4]", "relatives.num_pairs"),
        ("num_pairs=[8]", "relatives.num_pairs"),
        ("seeds=[0,0]", "relatives.seeds"),
        ("widths=[]", "relatives.widths"),
        ("n_head=3", "relatives.widths"),
        ("lm_neurons=100", "relatives.lm_neurons"),
        ("mqar_steps=0", "relatives.mqar_steps"),
        ("lm_minutes=0", "relatives.lm_minutes"),
        ("mqar_lrs=[1e-3,fast]", "relatives.mqar_lrs"),
        ("seq_lens=[15]", "frontier: sequence lengths must be even"),
        ("stepz=3", "unknown field"),
    ],
)
def test_bad_set_values_are_one_line_errors(setting, field, capsys):
    assert main(["experiment", "relatives", "--quick", "--show-config", "--set", setting]) == 2
    err = capsys.readouterr().err
    assert field in err and err.count("\n") == 1, err


def test_show_config_prints_the_plan_with_timed_steps(capsys):
    assert main(["experiment", "relatives", "--quick", "--threads", "1", "--show-config"]) == 0
    captured = capsys.readouterr()
    assert json.loads(captured.out)["models"] == ["bdh", "gpt", "baseconv"]
    assert "relatives plan: (a) MQAR frontier: 3 models x 2 widths" in captured.err
    assert (
        "ms/step" in captured.err and "total 12 runs" in captured.err and "of training and evaluation" in captured.err
    )


def test_full_show_config_lists_zoologys_sweep_without_timing_it(capsys):
    assert main(["experiment", "relatives", "--full", "--show-config"]) == 0
    err = capsys.readouterr().err
    # 12 models x 4 widths x 4 (N, D) x 4 learning rates x 2 seeds, and 12 models x 2 budgets x 2 seeds
    assert "frontier bdh           128 runs" in err and "ms/step" not in err and "total 1584 runs" in err


def test_the_cpu_default_and_full_presets():
    default, full = relatives.Config(), relatives.Config.preset("full")
    assert len(default.widths) >= 3 and len(default.seq_lens) == 2 and default.seeds == (0, 1)
    assert default.frontier_sweep().settings() == [(16, 2), (32, 4)]
    # the language model is the main job's BDH: L = 4, D = 128, h = 4, n = 2048, windows of 128 bytes
    bdh = {s.model: s.model_section for s in relatives.parts(default)["lm"][1]}["bdh"]
    assert bdh == {**bdh, "n_layer": 4, "n_embd": 128, "n_head": 4, "n_neurons": 2048}
    assert full.frontier_sweep().settings() == [(64, 4), (128, 8), (256, 16), (512, 64)]
    assert full.widths == (64, 128, 256, 512) and full.vocab_size == 8192 and len(full.mqar_lrs) == 4


# ---------------------------------------------------------------------- verdicts on synthetic rows
def _row(model: str, seed: int, score: float, setting: str = "N16-D2", width: int = 8, metric: str = "accuracy"):
    return {"model": model, "setting": setting, "width": width, "seed": seed, metric: score, "cpu_s_per_step": 0.01}


def test_verdicts_follow_the_seed_spread_in_the_suites_direction():
    rows = [
        *(_row("bdh", s, v) for s, v in enumerate([0.50, 0.60])),
        *(_row("better", s, v) for s, v in enumerate([0.70, 0.65])),  # worst 0.65 > BDH's best 0.60
        *(_row("worse", s, v) for s, v in enumerate([0.40, 0.45])),  # best 0.45 < BDH's worst 0.50
        *(_row("overlap", s, v) for s, v in enumerate([0.55, 0.80])),  # 0.55 within BDH's 0.50-0.60
        _row("single", 0, 0.9),
        _row("nan", 0, float("nan")),
        _row("nan", 1, 0.9),
        {"model": "trivial", "setting": "N16-D2", "width": 8, "seed": 0, "accuracy": 0.01},
    ]
    got = {v.model: v for v in compare(rows, "frontier", "accuracy", True)}
    assert set(got) == {"better", "worse", "overlap", "single", "nan"}  # the reference row is no model
    assert got["better"].verdict == BETTER and got["worse"].verdict == WORSE
    assert got["overlap"].verdict == "within the spread" and got["single"].verdict == "one seed: no spread"
    assert got["nan"].verdict == "within the spread"  # a NaN seed is the worst: it cannot beat BDH
    # the difference of the means, and seed by seed: seed 0 +0.20, seed 1 +0.05 (float sums: 1e-12 is plenty)
    b = got["better"]
    assert b.diff == pytest.approx(0.125, abs=1e-12) and (b.diff_min, b.diff_max) == pytest.approx((0.05, 0.2))
    assert b.reference == pytest.approx(0.55) and b.value == pytest.approx(0.675) and b.cpu_s_per_step == 0.01
    # bits per byte: lower is better, so the same numbers swap the verdicts
    lm = [{**r, "bpb": r["accuracy"]} for r in rows]
    flipped = {v.model: v.verdict for v in compare(lm, "lm", "bpb", False)}
    assert flipped["better"] == WORSE and flipped["worse"] == BETTER and flipped["overlap"] == "within the spread"
    counts = tally(compare(rows, "frontier", "accuracy", True))
    assert counts["better"]["frontier"] == {"better": 1, "worse": 0, "within": 0, "cells": 1}
    assert counts["overlap"]["frontier"]["within"] == 1


def test_verdicts_are_per_setting_and_width_and_need_bdh_there():
    rows = [_row("bdh", s, 0.5, width=8) for s in (0, 1)] + [
        _row("gpt", s, 0.9, width=w) for s in (0, 1) for w in (8, 16)
    ]
    (only,) = compare(rows, "frontier", "accuracy", True)  # no BDH at width 16: nothing to compare with
    assert (only.width, only.verdict) == (8, BETTER)


# ---------------------------------------------------------------------- models by label
def test_models_are_the_benchs_names_ablated_rows_included():
    assert zoo.MODELS[0] == "bdh" and len(zoo.MODELS) == 12 and "bdh-qk" in zoo.MODELS and "mamba" in zoo.MODELS
    config = relatives.Config.preset("quick").replace(models=("bdh", "bdh-qk", "bdh-nogate"))
    specs = relatives.parts(config)["frontier"][1]
    assert [s.model for s in specs] == ["bdh", "bdh-qk", "bdh-nogate"] * 2
    plain, keys, ungated = (s.model_section for s in specs[:3])
    assert keys == {**plain, "separate_keys": True} and ungated == {
        **plain,
        "ungated": True,
    }  # the same BDH, one part off
    with pytest.raises(UserError, match="relatives.models: 'nosuch' is not a registered model"):
        zoo.check_labels(["bdh", "nosuch"])


def test_a_budget_run_is_identified_by_its_minutes_not_the_steps_it_planned():
    spec = RunSpec("lm", "gpt", "clock", {"budget": "clock"}, 128, 1e-3, 0, {}, {}, 100_000, 8, max_minutes=0.5)
    row = {"model": "gpt", "setting": "clock", "width": "128", "lr": "0.001", "seed": "0", "steps": "37"}
    assert run_key({**row, "batch_size": "8", "max_minutes": "0.5"}) == spec.key()
    assert run_key({**row, "batch_size": "8", "max_minutes": ""})[5] == "37"  # a fixed-length row: its steps
    assert "0.5min" in spec.run_name()


# ---------------------------------------------------------------------- the byte unigram and the plan
def test_byte_unigram_scores_the_training_frequencies(tmp_path):
    from bdh.bench.results import evaluate_examples
    from bdh.tasks.text import TextConfig, TextTask

    rng = np.random.default_rng(0)
    data = rng.choice(np.frombuffer(b"aabbbbcdde", dtype=np.uint8), size=4000).tobytes()
    (tmp_path / "t.txt").write_bytes(data)
    task = TextTask(TextConfig(data=str(tmp_path / "t.txt"), seq_len=16, val_fraction=0.25))
    model = relatives.byte_unigram(task, task.n_train, seed=0)
    counts = np.bincount(np.frombuffer(data[: task.n_train], dtype=np.uint8), minlength=256) + 1.0
    logp = np.log(counts / counts.sum())
    assert torch.equal(model.table.weight[0], model.table.weight[97])  # every input byte: the same distribution
    np.testing.assert_allclose(model.table.weight[0].numpy(), logp, rtol=1e-6)  # float32 of a float64 log
    # scored by the bench's evaluation: the code length of the validation windows under those frequencies
    got = evaluate_examples(model, task, batch_size=8, batches=None, seed=0)
    val = np.frombuffer(data[task.n_train :], dtype=np.uint8)
    windows = (len(val) - 1) // 16
    targets = np.concatenate([val[w * 16 + 1 : w * 16 + 17] for w in range(windows)])
    direct = -logp[targets].mean() / math.log(2)
    assert got["bpb"] == pytest.approx(direct, rel=1e-5)  # float32 logits summed over ~1,000 targets


def test_run_seconds_counts_steps_or_the_budget_and_the_evaluation():
    spec = RunSpec("lm", "bdh", "tokens", {}, 128, 1e-3, 0, {}, {}, 60, 8)
    assert costs.run_seconds(spec, 0.5, eval_rows=24) == pytest.approx(60 * 0.5 + 0.5 * 24 / 8 / 3)
    timed = RunSpec("lm", "bdh", "clock", {}, 128, 1e-3, 0, {}, {}, 100_000, 8, max_minutes=0.5)
    assert costs.run_seconds(timed, 0.5, eval_rows=0) == pytest.approx(30.0)
    assert costs.duration(30) == "30 s" and costs.duration(90) == "1.5 min" and costs.duration(7200) == "2.0 h"
