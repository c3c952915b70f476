"""benchmarks/gpu_all.py --plan science (benchmarks/gpu_science.py): every step end to end at tiny sizes on the CPU,
the GPU commands accepted by the experiments they call, the time budget, and the answers read back."""

from __future__ import annotations

import dataclasses
import importlib.util
import json
import sys
import tarfile
from pathlib import Path

import pytest
import torch

BENCHMARKS = Path(__file__).resolve().parents[1] / "benchmarks"


@pytest.fixture
def gpu_all(load_benchmark):
    """benchmarks/gpu_all.py as a module (it loads gpu_science.py from its own folder)."""
    return load_benchmark("gpu_all")


def test_the_science_plan_runs_every_step_at_tiny_sizes(gpu_all, tmp_path, monkeypatch):
    """Each experiment step as its own process at tiny sizes, its answer read back into summary.md (the compile
    step, torch.compile on the CPU, is the slow test below)."""
    if torch.cuda.is_available():
        pytest.skip("this machine has a GPU: --device cpu would not be what runs there")
    monkeypatch.setenv("OMP_NUM_THREADS", "1")
    out = tmp_path / "science"
    argv = ["--plan", "science", "--device", "cpu", "--quick", "--skip", "compile", "--out", str(out), "--tar"]
    assert gpu_all.main(argv) == 0
    for step in ("fig7", "fact", "state"):
        assert (out / step / "results.json").is_file() and (out / f"{step}.log").is_file(), step
    summary = (out / "summary.md").read_text()
    for step, status in [("fig7", "ok"), ("fact", "ok"), ("state", "ok"), ("compile", "skipped")]:
        assert f"| {step} | {status} |" in summary, summary
    assert "same tokens: BDH " in summary and "same wall-clock: BDH " in summary and "2 seeds" in summary
    assert "induction read by state at 256: **" in summary and "95 % interval" in summary
    assert "nopos-lg-delta-sp (1 seeds), cut minus carried bits/byte by position: 0-32: " in summary
    assert "### compile" in summary and "no answer (skipped" in summary
    assert tarfile.is_tarfile(f"{out}.tar.gz")


@pytest.mark.slow
def test_the_compile_step_runs_at_tiny_sizes(gpu_all, tmp_path, monkeypatch):
    """torch.compile on the CPU takes minutes: the compile step alone (also run by the GPU call itself), with the
    time a shared 2-core machine needs to compile both models."""
    monkeypatch.setenv("OMP_NUM_THREADS", "1")
    monkeypatch.setattr(gpu_all, "QUICK_SCIENCE_LIMIT", 1200)
    out = tmp_path / "science"
    skip = ["fig7", "fact", "state"]
    assert gpu_all.main(["--plan", "science", "--device", "cpu", "--quick", "--skip", *skip, "--out", str(out)]) == 0
    summary = (out / "summary.md").read_text()
    assert "| compile | ok |" in summary and "compiled **" in summary, summary


def test_the_gpu_commands_are_accepted_by_their_experiments(gpu_all):
    """Each experiment step's ``--full --set ...`` resolved and checked by its config as ``bdh experiment`` does
    (`resolve_config`; nothing is trained): every field arrives with the plan's value."""
    from bdh.cli.experiment_cmds import experiment_module, resolve_config

    plan = gpu_all.science()
    for step in plan.PLAN:
        if step.experiment is None:
            continue
        argv = plan.argv(step, sys.executable, Path("unused"), False, "cuda", None)
        assert argv[3:6] == ["experiment", step.experiment, "--full"] and argv[-2] == "--out"
        sets = [a for flag, a in zip(argv, argv[1:]) if flag == "--set"]
        config = dataclasses.asdict(resolve_config(experiment_module(step.experiment), False, sets, full=True))
        for key, value in step.fields.items():
            assert config[key] == (tuple(value) if isinstance(value, list) else value), (step.name, key)


def test_the_plan_fits_nine_minutes_and_names_every_step(gpu_all):
    plan = gpu_all.science()
    assert sum(s.limit for s in plan.PLAN) <= 540  # 9 minutes of steps: the command within a 10-minute call
    assert [s.name for s in plan.PLAN] == ["fig7", "fact", "state", "compile"]  # the rank order
    compile_argv = plan.argv(plan.PLAN[-1], "python", Path("o"), False, "cuda", Path("official"))
    assert compile_argv[2] == "official" and "--compile" in compile_argv and "2048" in compile_argv


def test_the_compile_answer_is_compiled_over_eager_per_loop(gpu_all, tmp_path):
    plan = gpu_all.science()
    (tmp_path / "compile").mkdir()
    rows = [
        {"T": 2048, "loop": "ours", "setting": "bf16", "form": "chunked", "tok_s": 100.0},
        {"T": 2048, "loop": "ours", "setting": "bf16+compile", "form": "chunked", "tok_s": 150.0},
        {"T": 2048, "loop": "gpt", "setting": "bf16", "form": "sdpa", "tok_s": 200.0},
        {"T": 2048, "loop": "gpt", "setting": "bf16+compile", "form": "sdpa", "tok_s": "OOM"},
    ]
    (tmp_path / "compile" / "compile.json").write_text(json.dumps({"training": rows}))
    lines = plan._compile(tmp_path / "compile")
    assert lines == ["T=2048 ours chunked: compiled **1.50x** eager", "T=2048 gpt sdpa: compiled OOM, eager 200.0"]


def test_a_step_without_results_shows_its_status_and_the_end_of_its_log(gpu_all, tmp_path):
    plan = gpu_all.science()
    (tmp_path / "fig7.log").write_text("line 1\n[scaling] bdh size 1/2 lr 0.001 seed 0: val 1.2 nats/byte\n")
    results = [{"step": "fig7", "status": "timed out after 200 s", "seconds": 200.0, "log": "fig7.log"}]
    text = "\n".join(plan.answers(tmp_path, results))
    assert "- no answer (timed out after 200 s; FileNotFoundError" in text
    assert "    [scaling] bdh size 1/2 lr 0.001 seed 0: val 1.2 nats/byte" in text
    assert "### state" in text and "no answer (not run" in text


def test_gpu_py_measures_the_windows_it_is_given_and_refuses_a_bad_one(monkeypatch, tmp_path, capsys):
    """``--blocks``: the compile step's one window T (the table's rows are at those windows only)."""
    monkeypatch.syspath_prepend(str(BENCHMARKS))  # gpu.py imports _shared from its folder
    spec = importlib.util.spec_from_file_location("bdh_gpu_benchmark_blocks", BENCHMARKS / "gpu.py")
    gpu = importlib.util.module_from_spec(spec)
    monkeypatch.setitem(sys.modules, spec.name, gpu)
    spec.loader.exec_module(gpu)
    assert gpu.main(["--device", "cpu", "--quick", "--blocks", "0"]) == 2
    assert "--blocks must be positive" in capsys.readouterr().err
    out = tmp_path / "t.json"
    assert gpu.main(["--device", "cpu", "--quick", "--part", "training", "--blocks", "16", "--out", str(out)]) == 0
    assert {r["T"] for r in json.loads(out.read_text())["training"]} == {16}


def test_the_perf_summary_ends_with_the_roofline_beside_the_training_table(gpu_all, tmp_path):
    """Every perf run checks the roofline's prediction (benchmarks/roofline.py, `versus`)."""
    import argparse

    from bdh import BDHConfig

    rows = [{"T": 2048, "batch": 8, "loop": "ours", "form": "chunked (triton)", "tok_s": 60_000.0}]
    results = {"bdh": BDHConfig(n_neurons=32768, n_embd=256).to_dict(), "peak_tflops": 700.0, "training": rows}
    (tmp_path / "training.json").write_text(json.dumps(results))
    args = argparse.Namespace(plan="perf", out=tmp_path)
    text = gpu_all.summary(args, None, [])
    assert "## The roofline's prediction (benchmarks/roofline.py) against the training table" in text
    assert "| 2048 | 8 | 60,000 |" in text
    (tmp_path / "training.json").unlink()
    assert "(no training.json: the training step did not finish)" in gpu_all.summary(args, None, [])
