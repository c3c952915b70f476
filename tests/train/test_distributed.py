"""Data parallel: ``torchrun --nproc_per_node=2 -m bdh train`` on CPU (gloo) matches one process."""

from __future__ import annotations

import subprocess
import sys

import pytest
from _train_helpers import run_bdh, set_args, subprocess_env, tiny, train_losses


def _torchrun(*args: str) -> subprocess.CompletedProcess:
    """``bdh`` under torchrun with two processes on this machine."""
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node=2", "-m", "bdh", *args]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=300, env=subprocess_env())


def test_two_processes_match_one_with_the_same_global_batch(corpus_file, tmp_path):
    # dropout off: the two processes draw their own dropout masks, one process draws one stream
    common = ["train.max_steps=12", "eval.every=6", "checkpoint.every=6", "model.dropout=0.0"]
    single = tmp_path / "single"
    one = run_bdh("train", *set_args(tiny(corpus_file, single, *common, "train.micro_batch_size=2")))
    assert one.returncode == 0, one.stderr

    ddp = tmp_path / "ddp"
    two = _torchrun("train", *set_args(tiny(corpus_file, ddp, *common)))
    assert two.returncode == 0, two.stderr[-3000:]
    assert two.stdout.count("run folder:") == 1  # only rank 0 reports

    a, b = train_losses(single), train_losses(ddp)
    assert sorted(a) == sorted(b) == list(range(1, 13))
    for step in a:
        assert b[step] == pytest.approx(a[step], rel=2e-4, abs=1e-5), step
    # only rank 0 wrote: one metrics file, checkpoints with the state of both processes
    from bdh.model.io import load_tensors

    state = load_tensors(ddp / "checkpoints" / "step-12" / "trainer_state.safetensors")
    assert "rng.0.torch_cpu" in state and "rng.1.torch_cpu" in state

    # resume works the same under torchrun
    more = _torchrun("train", "--resume", str(ddp), "--set", "train.max_steps=14")
    assert more.returncode == 0, more.stderr[-3000:]
    assert sorted(train_losses(ddp)) == list(range(1, 15))


def test_two_processes_match_one_in_tbptt_mode(corpus_file, tmp_path):
    # each process carries the recurrent state of its own lanes
    common = ["train.max_steps=6", "eval.every=0", "model.dropout=0.0", "train.bptt=tbptt"]
    single = tmp_path / "single"
    one = run_bdh("train", *set_args(tiny(corpus_file, single, *common, "train.micro_batch_size=2")))
    assert one.returncode == 0, one.stderr
    ddp = tmp_path / "ddp"
    two = _torchrun("train", *set_args(tiny(corpus_file, ddp, *common)))
    assert two.returncode == 0, two.stderr[-3000:]
    a, b = train_losses(single), train_losses(ddp)
    assert sorted(a) == sorted(b) == list(range(1, 7))
    for step in a:
        assert b[step] == pytest.approx(a[step], rel=2e-4, abs=1e-5), step
