"""Data parallel: ``torchrun --nproc_per_node=2 -m bdh train`` on CPU (gloo) matches one process, with
DistributedDataParallel (``train.parallel: ddp``) and with FSDP2 (``fsdp``)."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
import torch
from _train_helpers import set_args, subprocess_env, tiny, train_losses

from bdh.cli import main

# dropout off: the two processes draw their own dropout masks, one process draws one stream
WINDOW = ["train.max_steps=12", "eval.every=6", "checkpoint.every=6", "model.dropout=0.0"]
TBPTT = ["train.max_steps=6", "eval.every=0", "model.dropout=0.0", "train.bptt=tbptt"]


def _torchrun_cmd(*args: str) -> list[str]:
    return [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node=2", "-m", "bdh", *args]


def _torchrun(*args: str) -> subprocess.CompletedProcess:
    """``bdh`` under torchrun with two processes on this machine."""
    return subprocess.run(_torchrun_cmd(*args), capture_output=True, text=True, timeout=300, env=subprocess_env())


def _train_here(*args: str) -> None:
    """``bdh ARGS`` in this process (one PyTorch less to start than a subprocess)."""
    assert main(list(args)) == 0


# The one-process runs the two-process runs are compared with, each trained once for the tests that share it: the
# global batch of 4 in micro-batches of 1 (as each FSDP process of the 2-row halves takes them) or 2; the same sums
# in another order, which the tolerances of the comparisons allow for
@pytest.fixture(scope="module")
def single_window(corpus_file, tmp_path_factory):
    run = tmp_path_factory.mktemp("single-window") / "run"
    _train_here("train", *set_args(tiny(corpus_file, run, *WINDOW, "train.micro_batch_size=1")))
    return run


@pytest.fixture(scope="module")
def single_tbptt(corpus_file, tmp_path_factory):
    run = tmp_path_factory.mktemp("single-tbptt") / "run"
    _train_here("train", *set_args(tiny(corpus_file, run, *TBPTT, "train.micro_batch_size=2")))
    return run


def test_two_processes_match_one_with_the_same_global_batch(corpus_file, tmp_path, single_window):
    single = single_window
    ddp = tmp_path / "ddp"
    two = _torchrun("train", *set_args(tiny(corpus_file, ddp, *WINDOW)))
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


def test_two_processes_match_one_in_tbptt_mode(corpus_file, tmp_path, single_tbptt):
    # each process carries the recurrent state of its own lanes
    ddp = tmp_path / "ddp"
    two = _torchrun("train", *set_args(tiny(corpus_file, ddp, *TBPTT)))
    assert two.returncode == 0, two.stderr[-3000:]
    a, b = train_losses(single_tbptt), train_losses(ddp)
    assert sorted(a) == sorted(b) == list(range(1, 7))
    for step in a:
        assert b[step] == pytest.approx(a[step], rel=2e-4, abs=1e-5), step


# --------------------------------------------------------------------------- FSDP2 (train.parallel: fsdp)
def test_fsdp_matches_one_process_and_writes_full_checkpoints_that_load_anywhere(corpus_file, tmp_path, single_window):
    """Two processes shard the weights, gradients and AdamW moments (gloo); the losses are those of one process,
    the checkpoint holds full tensors (loadable by load_pretrained, resumable by one process or by FSDP)."""
    import shutil

    import bdh
    from bdh.model.io import load_tensors

    single = single_window
    fsdp = tmp_path / "fsdp"
    # micro-batches of 1 of the 2 rows per process: gradients accumulate locally before the reduce-scatter
    fsdp_args = tiny(corpus_file, fsdp, *WINDOW, "train.micro_batch_size=1", "train.parallel=fsdp")
    two = _torchrun("train", *set_args(fsdp_args))
    assert two.returncode == 0, two.stderr[-3000:]
    assert two.stdout.count("run folder:") == 1 and "parallel: fsdp" in (fsdp / "config.yaml").read_text()

    a, b = train_losses(single), train_losses(fsdp)
    assert sorted(a) == sorted(b) == list(range(1, 13))
    for step in a:  # the same sums in another order: fp32 rounding only
        assert b[step] == pytest.approx(a[step], rel=2e-4, abs=1e-5), step

    step12 = fsdp / "checkpoints" / "step-12"
    model = bdh.load_pretrained(step12)  # a plain model: the full tensors, not one process's shards
    ref = load_tensors(single / "checkpoints" / "step-12" / "model.safetensors")
    for name, value in model.state_dict().items():
        assert value.shape == ref[name].shape and torch.allclose(value, ref[name], atol=1e-5, rtol=1e-4), name
    state = load_tensors(step12 / "trainer_state.safetensors")
    assert state["optimizer.0.exp_avg"].shape == model.E.shape  # the AdamW moments are full too
    assert json.loads((step12 / "meta.json").read_text())["parallel"] == "fsdp"  # written by the sharded path
    assert (fsdp / "best" / "model.safetensors").is_file()

    # resumed by FSDP and, from a copy, by one process: the same next steps
    copy = tmp_path / "copy"
    shutil.copytree(fsdp, copy)
    more = subprocess.Popen(
        _torchrun_cmd("train", "--resume", str(fsdp), "--set", "train.max_steps=14"),
        env=subprocess_env(),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        _train_here("train", "--resume", str(copy), "--set", "train.max_steps=14")  # meanwhile, in this process
        _, err = more.communicate(timeout=300)
    finally:
        if more.poll() is None:
            more.kill()
            more.wait()
    assert more.returncode == 0, err[-3000:]
    c, d = train_losses(fsdp), train_losses(copy)
    assert sorted(c) == sorted(d) == list(range(1, 15))
    for step in (13, 14):
        assert c[step] == pytest.approx(d[step], rel=2e-4, abs=1e-5), step


def _overrides(corpus_file, run_dir, extra: list[str]) -> list[str]:
    """A tiny run with ``extra``; for another model than BDH, without the BDH fields of the tiny run."""
    args = tiny(corpus_file, run_dir, *extra)
    if any(item.startswith("model.name=") for item in extra):
        mine = {item.split("=", 1)[0] for item in extra}
        args = [a for a in args if not a.startswith("model.") or a.split("=", 1)[0] in mine]
    return set_args(args)


@pytest.mark.parametrize(
    "extra",
    [
        ["train.bptt=tbptt", "eval.every=0"],  # model.step gathers the weights like forward
        # the GPT baseline: one FSDP unit per block, the root holds the (tied) embedding
        ["model.name=gpt", "model.n_layer=2", "model.n_embd=32", "model.n_head=2", "eval.every=3"],
    ],
    ids=["bdh-tbptt", "gpt"],
)
def test_fsdp_matches_one_process_in_tbptt_mode_and_for_the_gpt_baseline(corpus_file, tmp_path, extra, request):
    single, fsdp = tmp_path / "single", tmp_path / "fsdp"
    if extra[0] == "train.bptt=tbptt":  # the run test_two_processes_match_one_in_tbptt_mode compares with
        single = request.getfixturevalue("single_tbptt")
    else:
        _train_here(
            "train", *_overrides(corpus_file, single, ["train.max_steps=6", *extra, "train.micro_batch_size=2"])
        )
    two = _torchrun("train", *_overrides(corpus_file, fsdp, ["train.max_steps=6", *extra, "train.parallel=fsdp"]))
    assert two.returncode == 0, two.stderr[-3000:]
    a, b = train_losses(single), train_losses(fsdp)
    assert sorted(a) == sorted(b) == list(range(1, 7))
    for step in a:
        assert b[step] == pytest.approx(a[step], rel=2e-4, abs=1e-5), step
