"""Runs that lose nothing: a real signal in the middle of training, then ``--resume`` continues exactly."""

from __future__ import annotations

import hashlib
import json
import shutil
import signal
import subprocess
import time
from pathlib import Path

import pytest
import yaml
from _train_helpers import bdh_cmd, run_bdh, set_args, subprocess_env, tiny, train_losses

from bdh.cli import main

STEPS = 72


def overrides(corpus_file: Path, run_dir: Path, bptt: str) -> list[str]:
    # dropout on, so that resuming must also restore the RNG; evaluations and periodic checkpoints mid-run;
    # "tbptt-streams": streams of 7 windows at random places, so the interruption falls inside a stream
    bptt, _, streams = bptt.partition("-") if bptt.startswith("tbptt") else (bptt, "", "")
    return tiny(
        corpus_file,
        run_dir,
        f"train.max_steps={STEPS}",
        "model.dropout=0.1",
        f"train.bptt={bptt}",
        *(["train.tbptt_windows=7", "model.damping=alibi"] if streams else []),
        "train.micro_batch_size=2",
        "eval.every=30",
        "checkpoint.every=24",
        "train.deterministic=true",
    )


def wait_for_step(run_dir: Path, step: int, proc: subprocess.Popen, timeout: float = 120) -> int:
    deadline = time.time() + timeout
    while time.time() < deadline:
        assert proc.poll() is None, proc.communicate()[1]
        path = run_dir / "metrics.jsonl"
        if path.is_file():
            lines = path.read_text().splitlines()
            if lines:
                try:
                    last = json.loads(lines[-1])["step"]
                except json.JSONDecodeError:
                    last = 0
                if last >= step:
                    return last
        time.sleep(0.02)
    raise AssertionError("the run did not get going")


@pytest.mark.parametrize(
    "bptt, sig",
    [
        ("window", signal.SIGINT),
        ("tbptt", signal.SIGTERM),
        ("tbptt-streams", signal.SIGTERM),
        ("state-passing", signal.SIGINT),
    ],
)
def test_interrupt_by_signal_then_resume_gives_the_same_losses(corpus_file, tmp_path, bptt, sig):
    def start(run_dir: Path) -> subprocess.Popen:
        cmd = bdh_cmd("train", *set_args(overrides(corpus_file, run_dir, bptt)))
        return subprocess.Popen(cmd, env=subprocess_env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)

    # the uninterrupted run alongside the interrupted one: both single-threaded, on a second core where there is one
    ref, run = tmp_path / "uninterrupted", tmp_path / "interrupted"
    done, proc = start(ref), start(run)
    try:
        wait_for_step(run, 27, proc)  # between the periodic checkpoints at 24 and 48
        proc.send_signal(sig)
        out, err = proc.communicate(timeout=120)
        assert proc.returncode == 128 + sig, err
        assert "interrupted at step" in err and "Traceback" not in err
        stopped = int(err.split("interrupted at step ")[1].split("/")[0])
        assert 27 <= stopped < STEPS
        assert (run / "checkpoints" / f"step-{stopped}" / "meta.json").is_file()
        resumed = run_bdh("train", "--resume", str(run))
        assert resumed.returncode == 0, resumed.stderr
        _, ref_err = done.communicate(timeout=240)
        assert done.returncode == 0, ref_err
    finally:
        for p in (done, proc):
            if p.poll() is None:
                p.kill()
                p.wait()
    expected = train_losses(ref)
    assert sorted(expected) == list(range(1, STEPS + 1))
    got = train_losses(run)
    assert sorted(got) == list(range(1, STEPS + 1))
    after = [s for s in got if s > stopped]
    assert after and all(got[s] == expected[s] for s in after), (
        "losses after resuming differ from the uninterrupted run"
    )
    assert all(got[s] == expected[s] for s in got)


def cli(capsys, *args: str) -> tuple[int, str]:
    """Run the ``bdh`` command in this process: (exit status, stderr)."""
    code = main(list(args))
    return code, capsys.readouterr().err


def test_corrupted_or_foreign_checkpoint_is_refused_and_the_previous_one_kept(corpus_file, tmp_path, capsys):
    run = tmp_path / "r"
    code, err = cli(
        capsys,
        "train",
        *set_args(
            tiny(corpus_file, run, "train.max_steps=20", "checkpoint.every=10", "checkpoint.keep=3", "eval.every=0")
        ),
    )
    assert code == 0, err
    latest = run / "checkpoints" / "step-20"
    weights = latest / "model.safetensors"
    weights.write_bytes(weights.read_bytes()[:-100])  # truncated
    code, err = cli(capsys, "train", "--resume", str(run), "--set", "train.max_steps=30")
    line = err.strip()
    assert code == 2 and "\n" not in line and line.startswith("bdh: error:")
    assert "corrupted" in line and "step-10" in line
    assert (run / "checkpoints" / "step-10" / "meta.json").is_file()
    code, err = cli(capsys, "train", "--resume", str(run), "--checkpoint", "step-10", "--set", "train.max_steps=12")
    assert code == 0, err

    other = tmp_path / "other"
    code, err = cli(
        capsys, "train", *set_args(tiny(corpus_file, other, "train.max_steps=5", "model.n_embd=16", "eval.every=0"))
    )
    assert code == 0, err
    shutil.copytree(other / "checkpoints" / "step-5", run / "checkpoints" / "step-99")
    code, err = cli(capsys, "train", "--resume", str(run))
    assert code == 2 and "another model" in err and "Traceback" not in err
    (run / "checkpoints" / "step-99" / "meta.json").write_text('{"format": "something-else"}')
    code, err = cli(capsys, "train", "--resume", str(run))
    assert code == 2 and "not a bdh training checkpoint" in err


def snapshot(folder: Path) -> dict[str, str]:
    """Every path under ``folder`` (hidden ones too) with the SHA-256 of its bytes ("dir" for a folder)."""
    return {
        str(p.relative_to(folder)): hashlib.sha256(p.read_bytes()).hexdigest() if p.is_file() else "dir"
        for p in sorted(folder.rglob("*"))
    }


@pytest.fixture
def finished(corpus_file, tmp_path, capsys) -> Path:
    """A run of 6 steps that ran to its end (evaluations, checkpoints and TensorBoard files written)."""
    run = tmp_path / "done"
    code, err = cli(
        capsys,
        "train",
        *set_args(
            tiny(corpus_file, run, "train.max_steps=6", "eval.every=3", "checkpoint.every=3", "log.tensorboard=true")
        ),
    )
    assert code == 0, err
    return run


def test_resuming_a_finished_run_touches_nothing(finished, capsys):
    before = snapshot(finished)
    code = main(["train", "--resume", str(finished)])
    captured = capsys.readouterr()
    assert code == 0, captured.err
    assert captured.out == (
        f"{finished}: finished at step 6 of 6; nothing to do (to train longer: "
        f"bdh train --resume {finished} --set train.max_steps=M with M > 6)\n"
    )
    assert snapshot(finished) == before


def test_a_step_limit_below_the_checkpoint_is_refused(finished, capsys):
    before = snapshot(finished)
    code, err = cli(capsys, "train", "--resume", str(finished), "--set", "train.max_steps=4")
    assert code == 2 and err.startswith("bdh: error: train.max_steps:") and err.count("\n") == 1, err
    assert "step 6" in err
    assert snapshot(finished) == before


def test_a_finished_run_trains_on_to_a_larger_step_limit(finished, capsys):
    code, err = cli(capsys, "train", "--resume", str(finished), "--set", "train.max_steps=9")
    assert code == 0, err
    assert sorted(train_losses(finished)) == list(range(1, 10))
    evals = [json.loads(l)["step"] for l in (finished / "metrics.jsonl").read_text().splitlines() if '"eval"' in l]
    assert evals == [3, 6, 9]
    assert (finished / "checkpoints" / "step-9" / "meta.json").is_file()


def test_checkpoints_keep_every_field_and_other_runtime_fields_resume(finished, capsys):
    """config.json of a checkpoint keeps every model field of the run; one with other runtime fields (or none,
    as an earlier bdh wrote it) resumes: they say how the model runs, not what it is."""
    from bdh import BDHConfig

    latest = finished / "checkpoints" / "step-6"
    stored = json.loads((latest / "config.json").read_text())
    run_model = yaml.safe_load((finished / "config.yaml").read_text())["model"]
    assert stored["model_type"] == "bdh" and {k: stored[k] for k in run_model if k != "name"} == {
        k: v for k, v in run_model.items() if k != "name"
    }
    old = {k: v for k, v in stored.items() if k not in BDHConfig.RUNTIME_FIELDS} | {"attention": "chunked"}
    (latest / "config.json").write_text(json.dumps(old, indent=2, sort_keys=True))
    meta = json.loads((latest / "meta.json").read_text())
    meta["files"]["config.json"] = hashlib.sha256((latest / "config.json").read_bytes()).hexdigest()
    (latest / "meta.json").write_text(json.dumps(meta))
    code, err = cli(capsys, "train", "--resume", str(finished), "--set", "train.max_steps=8")
    assert code == 0, err
    assert sorted(train_losses(finished)) == list(range(1, 9))
    assert json.loads((finished / "checkpoints" / "step-8" / "config.json").read_text()) == stored
    (latest / "config.json").write_text(json.dumps({**old, "n_layer": old["n_layer"] + 1}))  # the architecture differs
    meta["files"]["config.json"] = hashlib.sha256((latest / "config.json").read_bytes()).hexdigest()
    (latest / "meta.json").write_text(json.dumps(meta))
    shutil.rmtree(finished / "checkpoints" / "step-8")
    code, err = cli(capsys, "train", "--resume", str(finished), "--set", "train.max_steps=8")
    assert code == 2 and "another model" in err and "n_layer" in err


def test_a_checkpoint_written_before_a_field_existed_resumes_with_its_default(finished, capsys):
    """A field added to the model config since a checkpoint was written (absent from its config.json) reads as its
    default, as an older model folder does; a field absent whose run value is not the default is refused."""
    from bdh import BDHConfig

    latest = finished / "checkpoints" / "step-6"
    stored = json.loads((latest / "config.json").read_text())
    defaults = BDHConfig()
    absent = [k for k in ("attend", "write_keys", "write_topk") if k in stored and stored[k] == getattr(defaults, k)]
    assert absent, "the test needs model fields at their defaults"
    meta = json.loads((latest / "meta.json").read_text())

    def write(config: dict) -> None:
        (latest / "config.json").write_text(json.dumps(config, indent=2, sort_keys=True))
        meta["files"]["config.json"] = hashlib.sha256((latest / "config.json").read_bytes()).hexdigest()
        (latest / "meta.json").write_text(json.dumps(meta))

    write({k: v for k, v in stored.items() if k not in absent})
    code, err = cli(capsys, "train", "--resume", str(finished), "--set", "train.max_steps=8")
    assert code == 0, err
    assert sorted(train_losses(finished)) == list(range(1, 9))
    shutil.rmtree(finished / "checkpoints" / "step-8")
    write({k: v for k, v in stored.items() if k != "n_layer"})  # n_layer has a default, but not the run's value
    code, err = cli(capsys, "train", "--resume", str(finished), "--set", "train.max_steps=8")
    assert code == 2 and "another model" in err and "n_layer" in err, err


def test_a_larger_step_limit_wins_over_the_length_a_time_budget_fixed(corpus_file, tmp_path, capsys):
    run = tmp_path / "budget"
    # a time budget: after the calibration steps the length of the run is fixed and saved in checkpoints
    code, err = cli(
        capsys, "train", *set_args(tiny(corpus_file, run, "train.max_steps=16", "train.max_minutes=30", "eval.every=0"))
    )
    assert code == 0, err
    meta = json.loads((run / "checkpoints" / "step-16" / "meta.json").read_text())
    assert meta["budget_fixed"] and meta["total_steps"] == 16
    code, out = main(["train", "--resume", str(run)]), capsys.readouterr().out
    assert code == 0 and "finished at step 16 of 16" in out
    code, err = cli(capsys, "train", "--resume", str(run), "--set", "train.max_steps=20")
    assert code == 0, err
    assert sorted(train_losses(run)) == list(range(1, 21))
    assert json.loads((run / "checkpoints" / "step-20" / "meta.json").read_text())["total_steps"] == 20
