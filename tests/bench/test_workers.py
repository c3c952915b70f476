"""Runs trained several at once (``bdh bench --jobs``, `bdh.bench.workers`): the same rows as one after the other,
errors and a dead worker raised in the parent, and a real SIGTERM that loses nothing a resume cannot redo."""

from __future__ import annotations

import csv
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from bdh.bench.runner import BenchOptions
from bdh.bench.workers import GRACE_S, Job, run_jobs
from bdh.errors import Interrupted, UserError

SRC = Path(__file__).resolve().parents[2] / "src"
QUICK = ["--quick", "--steps", "3", "--threads", "1"]


def _rows(path):
    with open(path, newline="", encoding="utf-8") as f:
        return list(csv.DictReader(f))


# ------------------------------------------------------------------ run_jobs, with stand-in training functions
def square(spec, run_dir):
    time.sleep(0.05 * (spec % 3))  # finish out of order
    return {"spec": spec, "square": spec * spec, "pid": os.getpid()}


def refuse(spec, run_dir):
    if spec == 2:
        raise UserError("run 2: a bad setting")
    return {"spec": spec}


def crash(spec, run_dir):
    if spec == 1:
        raise ZeroDivisionError("deep inside")
    return {"spec": spec}


def die(spec, run_dir):
    os._exit(3)


def stopped(spec, run_dir):
    raise Interrupted(signal.SIGTERM)


def _jobs(n, tmp_path):
    return [Job(i, i, tmp_path / f"run{i}") for i in range(1, n + 1)]


def test_run_jobs_trains_every_job_in_worker_processes(tmp_path):
    started, done = [], {}
    run_jobs(_jobs(5, tmp_path), square, 2, lambda j: started.append(j.index), lambda j, r: done.update({j.index: r}))
    assert sorted(started) == [1, 2, 3, 4, 5] and sorted(done) == [1, 2, 3, 4, 5]
    assert all(r["square"] == i * i for i, r in done.items())
    pids = {r["pid"] for r in done.values()}
    assert os.getpid() not in pids and len(pids) == 2  # two workers, reused across the runs


@pytest.mark.parametrize(
    "train,kind,words",
    [
        (refuse, UserError, "run 2: a bad setting"),  # the same one-line error
        (crash, RuntimeError, "ZeroDivisionError: deep inside"),  # with the worker's traceback
        (die, RuntimeError, "a worker process ended (exit code 3)"),
        (stopped, Interrupted, "SIGTERM"),
    ],
)
def test_a_failed_job_is_raised_in_the_parent(tmp_path, train, kind, words):
    done = []
    with pytest.raises(kind) as caught:
        run_jobs(_jobs(4, tmp_path), train, 2, lambda j: None, lambda j, r: done.append(j.index))
    assert words in str(caught.value)
    if kind is RuntimeError and train is crash:
        assert "Traceback" in str(caught.value)


def test_worker_threads_share_this_process_threads(monkeypatch):
    import torch

    monkeypatch.setattr(torch, "get_num_threads", lambda: 8)
    assert BenchOptions(jobs=1).worker_threads() is None  # one job: PyTorch's default, as before
    assert BenchOptions(jobs=2).worker_threads() == 4
    assert BenchOptions(jobs=16).worker_threads() == 1  # at least one each
    assert BenchOptions(jobs=2, threads=3).worker_threads() == 3  # given: every run gets it


def test_jobs_below_one_is_a_one_line_error(tmp_path, capsys):
    from bdh.cli import main

    assert main(["bench", "recall", "--jobs", "0", "--out", str(tmp_path / "o")]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "--jobs" in err


# ------------------------------------------------------------------ bdh bench --jobs
def test_two_jobs_give_the_rows_of_one_job(tmp_path, capsys):
    from bdh.cli import main

    argv = ["bench", "recall", *QUICK, "--models", "bdh,gpt", "--lrs", "1e-3,3e-3"]
    assert main([*argv, "--out", str(tmp_path / "one")]) == 0
    assert main([*argv, "--jobs", "2", "--out", str(tmp_path / "two")]) == 0
    err = capsys.readouterr().err
    assert "[4/4] " in err and "seed 0: " in err  # a finished run names itself when runs overlap
    one = {(r["model"], r["lr"]): r for r in _rows(tmp_path / "one" / "runs.csv")}
    two = {(r["model"], r["lr"]): r for r in _rows(tmp_path / "two" / "runs.csv")}
    assert one.keys() == two.keys() and len(one) == 4
    for key, a in one.items():
        b = two[key]
        assert (a["params"], a["state_size"], a["steps"], a["config"]) == (
            b["params"],
            b["state_size"],
            b["steps"],
            b["config"],
        )
        # the same computation on one thread in another process; 1e-5 covers a different summation order in a
        # reduction (the losses are about 4, float32 rounds at 5e-7 of that), and an accuracy differs by a whole
        # example (1/512) or not at all
        assert abs(float(a["val_loss"]) - float(b["val_loss"])) < 1e-5
        assert abs(float(a["accuracy"]) - float(b["accuracy"])) < 1.5 / 512
        assert b["run_dir"] == a["run_dir"] and (tmp_path / "two" / b["run_dir"]).is_dir()
    # results in the plan's order whichever run finished first
    assert [r["model"] for r in _rows(tmp_path / "one" / "results.csv")] == [
        r["model"] for r in _rows(tmp_path / "two" / "results.csv")
    ]


def test_sigterm_stops_every_worker_and_resume_trains_what_was_not_recorded(tmp_path):
    env = dict(os.environ, OMP_NUM_THREADS="1", PYTHONUNBUFFERED="1")
    env["PYTHONPATH"] = str(SRC) + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    out = tmp_path / "bench"
    argv = [sys.executable, "-m", "bdh", "bench", "recall", "--quick", "--steps", "100", "--threads", "1"]
    argv += ["--models", "bdh", "--lrs", "1e-3,3e-3", "--seeds", "0,1", "--jobs", "2", "--out", str(out)]
    proc = subprocess.Popen(argv, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    ledger = out / "runs.csv"
    deadline = time.time() + 180
    while not (ledger.is_file() and len(_rows(ledger)) >= 1):
        assert proc.poll() is None and time.time() < deadline, proc.communicate()
        time.sleep(0.05)
    proc.send_signal(signal.SIGTERM)
    _, err = proc.communicate(timeout=120)  # workers hold the pipes too: returns once they all ended
    assert proc.returncode == 143, err
    assert "--resume" in err and "Traceback" not in err
    recorded = len(_rows(ledger))
    assert 1 <= recorded < 4
    done = subprocess.run([*argv, "--resume"], env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    assert done.stderr.count("bench recall [") == 4 - recorded  # only the runs not recorded are trained
    rows = _rows(ledger)
    assert len(rows) == 4 and len({(r["lr"], r["seed"]) for r in rows}) == 4


# ------------------------------------------------------------------ workers end with their parent
#: a parent of two workers: each writes its pid into its run folder and trains until stopped (a SIGTERM ends its
#: "run" after a step, as the trainer's handler does); the parent raises on SIGTERM as ``bdh`` does
PARENT = """
import os, signal, sys, time
from pathlib import Path
from bdh.bench.workers import GRACE_S, Job, run_jobs
from bdh.cli.interrupts import terminate_raises


def hold(spec, run_dir):
    stop = []
    signal.signal(signal.SIGTERM, lambda *a: stop.append(1))
    run_dir.mkdir(parents=True, exist_ok=True)
    (run_dir / "pid").write_text(str(os.getpid()))
    while not stop:
        time.sleep(0.05)
    return {"spec": spec}


if __name__ == "__main__":
    out = Path(sys.argv[1])
    with terminate_raises():
        run_jobs([Job(i, i, out / f"run{i}") for i in range(4)], hold, 2, lambda j: None, lambda j, r: None)
"""


def _running(pid: int) -> bool:
    """Whether ``pid`` runs (a zombie no longer does: nobody may have reaped an orphan yet)."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except FileNotFoundError:
        return False
    except OSError:
        from bdh.outputs import pid_alive

        return pid_alive(pid)


def _start_parent(tmp_path):
    script = tmp_path / "parent.py"
    script.write_text(PARENT)
    env = dict(os.environ, PYTHONPATH=str(SRC) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    with open(tmp_path / "err.txt", "wb") as err:  # a file: workers that outlive the parent do not hold a pipe
        proc = subprocess.Popen([sys.executable, str(script), str(tmp_path / "out")], env=env, stderr=err)
    files = [tmp_path / "out" / f"run{i}" / "pid" for i in range(2)]
    deadline = time.time() + 60
    while not all(f.is_file() and f.read_text() for f in files):
        assert proc.poll() is None and time.time() < deadline, (tmp_path / "err.txt").read_text()
        time.sleep(0.05)
    return proc, [int(f.read_text()) for f in files]


def _gone_within(pids, seconds):
    deadline = time.time() + seconds
    while any(_running(p) for p in pids) and time.time() < deadline:
        time.sleep(0.05)
    return [p for p in pids if _running(p)]


@pytest.mark.parametrize("sig", [signal.SIGKILL, signal.SIGTERM])
def test_workers_end_with_their_parent(tmp_path, sig):
    """kill -9 of the parent (no finally runs): the kernel or the worker's watch ends the workers at once;
    SIGTERM: each worker ends its run and then its process, well before the parent's grace period is over."""
    proc, pids = _start_parent(tmp_path)
    try:
        proc.send_signal(sig)
        proc.wait(timeout=GRACE_S / 2)
        left = _gone_within(pids, 10)
        assert not left, f"workers {left} outlived their parent ({signal.Signals(sig).name})"
    finally:
        for pid in pids:
            if _running(pid):
                os.kill(pid, signal.SIGKILL)
        if proc.poll() is None:
            proc.kill()
            proc.wait()
