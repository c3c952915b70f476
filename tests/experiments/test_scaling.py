"""The scaling experiment (paper section 4.2, Fig. 7): the smoke test end to end through the command line,
the parameter matching, the power-law fit, the verdicts, one-line errors and resume."""

from __future__ import annotations

import dataclasses
import json
import math
import shutil
from pathlib import Path

import numpy as np
import pytest

from bdh.cli import main
from bdh.experiments import scaling
from bdh.experiments.scaling import BDH_BETTER, GPT_BETTER, TIE, UNDECIDED


@pytest.fixture(scope="module")
def quick_out(tmp_path_factory) -> Path:
    """One ``--quick`` run through the command line, shared by the tests that read its outputs."""
    out = tmp_path_factory.mktemp("scaling") / "quick"
    assert main(["experiment", "scaling", "--quick", "--out", str(out)]) == 0
    return out


def test_quick_end_to_end_writes_report_results_and_figures(quick_out):
    results = json.loads((quick_out / "results.json").read_text())
    report = (quick_out / "report.md").read_text()
    assert len(results["ladder"]) == 2 and results["config"]["seeds"] == [0]
    for size in results["ladder"]:  # both parameter counts, matched within a few percent
        assert size["params"]["bdh"] > 0 and abs(size["params"]["gpt"] / size["params"]["bdh"] - 1) < 0.05
    for run in results["runs"]:  # the counts of the built models are the ladder's
        assert run["params"] == results["ladder"][run["size"]]["params"][run["model"]]
        assert run["tokens"] == results["tokens_per_run"] and run["curve"]["val"] and math.isfinite(run["val_loss"])
    # the sweep at the smallest size: every model at every rate; the other size only at the chosen rate
    lrs = results["config"]["lrs"]
    assert sorted((r["model"], r["lr"]) for r in results["runs"] if r["size"] == 0) == sorted(
        (m, lr) for m in ("bdh", "gpt") for lr in lrs
    )
    assert {r["lr"] for r in results["runs"] if r["size"] == 1 and r["model"] == "gpt"} == {results["chosen_lr"]["gpt"]}
    assert all(f["status"] == "under-determined" for f in results["fits"].values())  # 2 sizes cannot fit 3 numbers
    assert {f["held"] for f in results["findings"]} == {None}  # one seed decides nothing
    for name in ("params", "flops", "curves", "lr"):
        assert (quick_out / "figures" / f"scaling-{name}.png").is_file()
    assert "What matched the paper" in report and "under-determined" in report and "What it cannot say" in report


def test_resume_reuses_finished_runs_and_retrains_changed_ones(quick_out, tmp_path):
    out = tmp_path / "again"
    config = scaling.Config.preset("quick")
    first = json.loads((quick_out / "results.json").read_text())["runs"]
    shutil.copytree(quick_out, out)
    scaling.run(config, out, log=lambda m: None, resume=True)
    again = json.loads((out / "results.json").read_text())["runs"]
    assert all(r["reused"] for r in again)
    assert [r["val_loss"] for r in again] == [r["val_loss"] for r in first]
    scaling.run(config.replace(steps=config.steps + 2), out, log=lambda m: None, resume=True)
    changed = json.loads((out / "results.json").read_text())["runs"]
    assert not any(r["reused"] for r in changed) and all(r["steps"] == config.steps + 2 for r in changed)


def test_resume_refuses_a_foreign_folder(tmp_path, bdh):
    (tmp_path / "other").mkdir()
    (tmp_path / "other" / "x.txt").write_text("mine")
    r = bdh("experiment", "scaling", "--quick", "--resume", "--out", str(tmp_path / "other"))
    assert r.returncode == 2 and "not a scaling experiment folder" in r.stderr and r.stderr.count("\n") == 1


@pytest.mark.parametrize(
    "setting, field",
    [
        ("lrs=[1e-3,fast]", "scaling.lrs"),
        ("n_neurons=[256,128]", "scaling.n_neurons"),
        ("gpt_layers=[1]", "scaling.gpt_layers"),
        ("data=no/such/file", "scaling.data"),
        ("seeds=[0,0]", "scaling.seeds"),
        ("steps=0", "scaling.steps"),
        ("match_tolerance=nan", "scaling.match_tolerance"),
        ("stepz=3", "unknown field"),
    ],
)
def test_bad_set_values_are_one_line_errors(setting, field, bdh):
    r = bdh("experiment", "scaling", "--quick", "--show-config", "--set", setting)
    assert r.returncode == 2 and field in r.stderr and r.stderr.count("\n") == 1, r.stderr


def test_quick_and_full_exclude_each_other_and_full_prints_its_plan(bdh):
    r = bdh("experiment", "scaling", "--quick", "--full", "--show-config")
    assert r.returncode == 2 and r.stderr.count("\n") == 1
    r = bdh("experiment", "scaling", "--full", "--show-config")
    assert r.returncode == 0 and json.loads(r.stdout)["n_neurons"][-1] == 131072
    assert "scaling plan: 4 sizes" in r.stderr and "per run" in r.stderr


def test_lists_from_set_are_coerced_and_a_single_value_is_a_list_of_one():
    config = dataclasses.replace(scaling.Config.preset("quick"), lrs=["1e-3", 3e-3], seeds=2)  # as --set does
    assert config.lrs == (1e-3, 3e-3) and config.seeds == (2,)


@pytest.mark.parametrize("preset", ["__init__", "quick", "full"])
def test_ladders_match_parameters_within_the_tolerance(preset):
    config = scaling.Config() if preset == "__init__" else scaling.Config.preset(preset)
    rungs = scaling.build_ladder(config)
    assert len(rungs) == len(config.n_neurons)
    assert all(abs(r.mismatch) <= config.match_tolerance for r in rungs)
    if preset == "__init__":  # the CPU default spans at least 10x in parameters
        assert rungs[-1].params["bdh"] / rungs[0].params["bdh"] >= 10 and len(rungs) >= 4
    if preset == "full":  # the GPU ladder: 10M to 100M+
        assert rungs[0].params["bdh"] >= 10e6 and rungs[-1].params["bdh"] >= 100e6
    with pytest.raises(ValueError, match="closest 1-layer Transformer"):
        scaling.build_ladder(scaling.Config.preset("quick").replace(match_tolerance=1e-4))


def test_costs_follow_the_formulas():
    rung = scaling.build_ladder(scaling.Config.preset("quick"))[0]
    from bdh.baselines.gpt import GPT, GPTConfig

    gpt = GPTConfig(**{k: v for k, v in rung.gpt.items() if k != "name"})
    assert GPT(gpt).num_params() == rung.params["gpt"]
    long, short = (scaling.inference_cost("gpt", rung.gpt, c) for c in (1024, 64))
    assert long["state"] == 16 * short["state"] and long["flops"] > short["flops"]  # the KV cache grows
    a, b = (scaling.inference_cost("bdh", rung.bdh, c) for c in (1024, 64))
    assert a == b and a["state"] == rung.bdh["n_neurons"] * rung.bdh["n_embd"] * rung.bdh["n_layer"]
    d, m, L = gpt.n_embd, gpt.hidden, gpt.n_layer  # the module docstring's formula, 3x for training
    assert scaling.train_flops_per_token("gpt", rung.gpt, 64) == 3 * (
        L * (2 * (4 * d * d + 2 * d * m) + 4 * 64 * d) + 2 * d * 256
    )


def test_power_law_fit_recovers_known_parameters():
    n = np.geomspace(1e5, 3e7, 6)
    a, b, c = 0.8, 0.35, 1.2
    rng = np.random.default_rng(0)
    loss = a * (n / 1e6) ** (-b) + c
    params = np.repeat(n, 2)
    noisy = np.repeat(loss, 2) + rng.normal(0, 1e-3, size=12)
    fit = scaling.fit_power_law(params, noisy)
    assert fit.status == "ok" and fit.points == 12 and fit.sizes == 6
    assert fit.a == pytest.approx(a, rel=0.05) and fit.b == pytest.approx(b, rel=0.05)
    assert fit.c == pytest.approx(c, rel=0.02)
    assert all(lo < getattr(fit, k) < hi for k, (lo, hi) in fit.ci.items())
    assert fit.ci["b"][0] < b < fit.ci["b"][1]


def test_power_law_fit_says_when_it_is_not_determined():
    three = scaling.fit_power_law([1e5, 1e6, 1e7] * 2, [3.0, 2.5, 2.2, 3.1, 2.4, 2.3])
    assert three.status == "under-determined" and math.isnan(three.b) and "at least 4 sizes" in three.describe()
    flat = scaling.fit_power_law([1e5, 3e5, 1e6, 3e6] * 2, [2.0, 2.1, 1.9, 2.05, 2.1, 1.95, 2.02, 2.0])
    assert flat.status == "loose" and "not determined" in flat.describe()
    diverged = scaling.fit_power_law([1e5, 3e5, 1e6, 3e6], [math.nan, 2.5, 2.2, 2.1])
    assert diverged.status == "under-determined" and diverged.points == 3


def test_crossover_of_two_fitted_curves():
    n = np.geomspace(1e5, 1e7, 5)
    first = scaling.fit_power_law(n, 1.0 * (n / 1e6) ** -0.5 + 1.0)
    second = scaling.fit_power_law(n, 1.5 * (n / 1e6) ** -0.2 + 0.5)  # equal at N = 1M
    assert first.status == second.status == "ok"
    (cross,) = scaling.crossovers(first, second, 1e5, 1e7)
    assert cross == pytest.approx(1e6, rel=0.02)
    assert scaling.crossovers(first, second, 2e6, 1e7) == []


def test_verdict_is_a_tie_within_the_seed_spread_and_a_win_beyond_it():
    assert scaling.compare([2.00, 2.10], [2.05, 2.12]).verdict == TIE  # diff -0.035, spread 0.10
    win = scaling.compare([1.80, 1.82], [2.00, 2.05])
    assert win.verdict == BDH_BETTER and win.diff == pytest.approx(-0.215) and win.spread == pytest.approx(0.05)
    assert scaling.compare([2.3, 2.31], [2.0, 2.02]).verdict == GPT_BETTER
    assert scaling.compare([1.0], [2.0]).verdict == UNDECIDED  # one seed: no spread
    lost = scaling.compare([math.nan, 2.0], [2.1, 2.2])  # the diverged seed is BDH's worst: the ranges overlap
    assert lost.verdict == TIE and "BDH diverged" in lost.note
    assert scaling.compare([math.nan, 2.3], [2.1, 2.2]).verdict == GPT_BETTER  # beyond even BDH's finite seed


def test_findings_follow_the_numbers():
    labels = ["0.1M", "1M"]
    n = np.geomspace(1e5, 1e7, 5)
    fits = {m: scaling.fit_power_law(n, (n / 1e6) ** -0.3 + 1.0) for m in ("bdh", "gpt")}
    better = [scaling.compare([1.8, 1.82], [2.0, 2.05]), scaling.compare([1.6, 1.61], [1.8, 1.85])]
    improved = {m: scaling.decide([1.6, 1.61], [1.8, 1.82]) for m in ("bdh", "gpt")}
    found = {c: h for c, h, _ in scaling.findings(labels, better, better, fits, improved)}
    assert all(found.values()), found
    worse = [scaling.compare([2.3, 2.31], [2.0, 2.02]), scaling.compare([2.0, 2.1], [2.05, 2.12])]
    found = list(scaling.findings(labels, worse, worse, fits, improved))
    assert found[0][1] is False and found[1][1] is False  # GPT better at one size, a tie at the other
    one_seed = [scaling.compare([1.0], [2.0])] * 2
    assert scaling.findings(labels, one_seed, one_seed, fits, improved)[0][1] is None


def test_choose_lr_takes_the_best_mean_and_treats_divergence_as_a_loss():
    recs = [
        {"model": "bdh", "size": 0, "lr": lr, "val_loss": v}
        for lr, v in ((1e-3, 2.0), (1e-3, 2.2), (3e-3, 1.9), (3e-3, 2.0), (1e-2, math.nan), (1e-2, 1.0))
    ]
    lr, means = scaling.choose_lr(recs, "bdh", (1e-3, 3e-3, 1e-2))
    assert lr == 3e-3 and means[1e-2] == math.inf
    with pytest.raises(ValueError, match="diverged at every learning rate"):
        scaling.choose_lr([{**r, "val_loss": math.nan} for r in recs], "bdh", (1e-3, 3e-3, 1e-2))


def test_a_diverged_run_is_recorded_and_a_refused_config_is_raised(tmp_path, monkeypatch):
    import bdh.train
    from bdh.experiments.scaling.runs import RESULT, RunSpec, train_run

    rung = scaling.build_ladder(scaling.Config.preset("quick"))[0]
    spec = RunSpec(
        "gpt", 0, 0.5, 0, rung.gpt, {"name": "text", "seq_len": 64}, "shakespeare", 4, 2, None, 2, 1, 1, "cpu", "fp32"
    )

    def diverge(config):
        raise bdh.train.TrainingError("loss is nan at step 3; training stopped; the last good checkpoint is none")

    monkeypatch.setattr(bdh.train, "train", diverge)
    record = train_run(spec, tmp_path, resume=False, log=lambda m: None)
    assert record["diverged"] and math.isnan(record["val_loss"]) and "loss is nan" in record["error"]
    assert (tmp_path / "runs" / spec.name() / RESULT).is_file()
    assert train_run(spec, tmp_path, resume=True, log=lambda m: None)["reused"]  # not tried again on resume

    def refuse(config):
        raise bdh.train.TrainingError("model.causal: the task 'text' needs causal=True")

    monkeypatch.setattr(bdh.train, "train", refuse)
    with pytest.raises(bdh.train.TrainingError, match="model.causal"):
        train_run(spec, tmp_path, resume=False, log=lambda m: None)


def test_quick_on_the_translation_stream_reports_per_direction_target_losses(tmp_path, capsys):
    """data=translation (the paper's setting): every run scores held-out segments, target side, per direction."""
    from bdh.cli import main

    out = tmp_path / "tr"
    argv = ["experiment", "scaling", "--quick", "--set", "data=translation", "--set", "seq_len=192", "--out", str(out)]
    assert main(argv) == 0
    results = json.loads((out / "results.json").read_text())
    for run in results["runs"]:
        directions = run["directions"]
        assert set(directions) == {"en>es", "en>fr", "es>en", "fr>en"}
        assert all(math.isfinite(v) and 0 < v < 8 for v in directions.values())
    assert "target-side loss per direction" in (out / "report.md").read_text()


def test_figures_are_readable_and_in_bits_per_byte(tmp_path, readable_figures):
    """The four figures, drawn from a made-up summary of four sizes and two seeds (the quick run's two sizes
    cannot be fitted): readable at 100 % zoom, the losses in bits per byte with nats per byte beside them."""
    from bdh.experiments.scaling import figures
    from bdh.experiments.scaling.fits import fit_power_law

    params = [1e5, 4e5, 1.6e6, 6.4e6]
    final = {
        "bdh": [[3.0, 3.1], [2.6, 2.65], [2.3, 2.32], [2.15, 2.16]],
        "gpt": [[3.2, 3.2], [2.9, 2.95], [2.8, 2.7], [2.66, 2.64]],
    }
    sizes = [
        {"label": f"{n / 1e6:.1f}M", "params": {m: n for m in final}}
        | {m: {"final": final[m][i], "train_flops": 6 * n * 1e6} for m in final}
        for i, n in enumerate(params)
    ]
    fits = {m: fit_power_law([n for n in params for _ in (0, 1)], [v for f in final[m] for v in f]) for m in final}
    runs = {
        m: [
            {"size": i, "seed": s, "curve": {"val": [[10, 0, 4.0], [20, 0, final[m][i][s]]]}}
            for i in range(4)
            for s in (0, 1)
        ]
        for m in final
    }
    figures.loss_vs_params(sizes, fits, tmp_path / "params")
    figures.loss_vs_flops(sizes, tmp_path / "flops")
    figures.curves(runs, [s["label"] for s in sizes], tmp_path / "curves")
    figures.lr_sweep(
        {"bdh": {1e-3: 3.0, 3e-3: 2.9}, "gpt": {1e-3: 3.1, 3e-3: math.inf}}, {"bdh": 3e-3, "gpt": 1e-3}, tmp_path / "lr"
    )
    assert all(f.usable for f in fits.values())  # the fitted curves are drawn too
    assert set(readable_figures()) == {"params.png", "flops.png", "curves.png", "lr.png"}
    for name in ("params", "flops", "curves", "lr"):
        svg = (tmp_path / f"{name}.svg").read_text()
        assert "bits per byte" in svg and "nats per byte" in svg
