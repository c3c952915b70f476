"""`bdh.experiments.launch.run_experiment`: a Python caller gets what ``bdh experiment`` printed, and an
interruption of an experiment that can continue comes back as a result (any other is raised)."""

from __future__ import annotations

import dataclasses
import types

import pytest

from bdh.cli import main
from bdh.experiments import launch
from bdh.registry import get_experiment

TINY_MERGE = {"base_steps": 2, "tune_steps": 2, "uncond_steps": 2, "joint_steps": 1, "corpus_bytes": 20000}


def _frozen_clock(monkeypatch):
    """Both runs take 0.0 minutes, so that the printed line and the summary can be compared whole."""
    monkeypatch.setattr(launch, "time", types.SimpleNamespace(time=lambda: 0.0))


def test_a_python_caller_gets_what_the_command_printed(tmp_path, capsys, monkeypatch):
    _frozen_clock(monkeypatch)
    sets = [w for key, value in TINY_MERGE.items() for w in ("--set", f"{key}={value}")]
    assert main(["experiment", "merge", "--quick", *sets, "--out", str(tmp_path / "cli")]) == 0
    printed = capsys.readouterr().out
    config = dataclasses.replace(get_experiment("merge").Config.preset("quick"), **TINY_MERGE)
    run = launch.run_experiment("merge", config, tmp_path / "lib", log=lambda line: None)
    assert run.interrupted is None and run.report == tmp_path / "lib" / "report.md" and run.report.is_file()
    assert printed == run.summary().replace(str(tmp_path / "lib"), str(tmp_path / "cli")) + "\n"
    # the folder now holds a run: refused, and (merge cannot continue) without advising --resume
    with pytest.raises(ValueError, match="pass --overwrite to replace it") as refused:
        launch.run_experiment("merge", config, tmp_path / "lib")
    assert "--resume" not in str(refused.value)


def _interrupting(monkeypatch, name: str) -> None:
    def run(config, out, *, log, resume=False):
        (out / "runs").mkdir()
        raise KeyboardInterrupt

    monkeypatch.setattr(get_experiment(name), "run", run)


def test_an_interrupted_experiment_that_can_continue_says_what_was_kept(tmp_path, capsys, monkeypatch):
    _interrupting(monkeypatch, "scaling")
    config = get_experiment("scaling").Config.preset("quick")
    run = launch.run_experiment("scaling", config, tmp_path / "lib")
    assert isinstance(run.interrupted, KeyboardInterrupt) and run.report is None
    assert run.kept == f"the finished runs are kept in {tmp_path / 'lib' / 'runs'}"
    assert main(["experiment", "scaling", "--quick", "--out", str(tmp_path / "cli")]) == 130
    err = capsys.readouterr().err
    assert f"interrupted (SIGINT); {run.kept.replace('lib', 'cli')}; continue with: bdh experiment scaling" in err


def test_an_interrupted_experiment_that_cannot_continue_is_raised(tmp_path, monkeypatch):
    _interrupting(monkeypatch, "merge")
    with pytest.raises(KeyboardInterrupt):
        launch.run_experiment("merge", get_experiment("merge").Config.preset("quick"), tmp_path / "lib")


def test_an_interrupted_experiment_names_only_what_it_kept(tmp_path):
    """relatives keeps its runs in its suites' ledgers, not in runs/ (the message named a folder that did not
    exist)."""
    out = tmp_path / "rel"
    out.mkdir()
    assert launch.kept_runs(out) == "no run had finished yet"
    for suite in ("frontier", "lm"):
        (out / suite).mkdir()
        (out / suite / "runs.csv").write_text("suite,model\n")
    assert launch.kept_runs(out) == f"the finished runs are kept in {out / 'frontier' / 'runs.csv'} and " + str(
        out / "lm" / "runs.csv"
    )


def test_a_full_disk_in_an_experiment_that_can_continue_advises_its_resume(tmp_path, capsys, monkeypatch):
    """Running the same command again would refuse the folder it made: the advice is the --resume command."""
    import errno

    from bdh.outputs import DiskFull

    def run(config, out, *, log, resume=False):
        (out / "runs").mkdir()
        raise DiskFull(out / "runs" / "x.json", errno.ENOSPC)

    monkeypatch.setattr(get_experiment("scaling"), "run", run)
    assert main(["experiment", "scaling", "--quick", "--out", str(tmp_path / "s")]) == 2
    err = capsys.readouterr().err
    assert "No space left on device" in err and "continue with: bdh experiment scaling" in err, err
    assert err.rstrip().endswith(f"--out {tmp_path / 's'} --resume"), err
