"""Every check a run makes before training is made once: on the config alone when it is read (`load_config`), on
this machine, the processes and the task by `plan_run`; ``--print-config`` refuses exactly what the run would
refuse, with one line naming the key, and nothing is written."""

from __future__ import annotations

import pytest
import torch
from _train_helpers import tiny

from bdh.cli import main
from bdh.errors import UserError
from bdh.train import load_config
from bdh.train.build import check_run_config
from bdh.train.config import ConfigError
from bdh.train.trainer import Trainer, TrainingError

NOT_FINITE = [
    ("optim.lr=nan", "optim.lr: must be a finite number, got nan"),
    ("optim.lr=.nan", "optim.lr: must be a finite number, got nan"),
    ("optim.lr=inf", "optim.lr: must be a finite number, got inf"),
    ("optim.lr=1e400", "optim.lr: must be a finite number, got inf"),  # YAML reads 1e400 as inf
    ("optim.min_lr=nan", "optim.min_lr: must be a finite number"),
    ("optim.weight_decay=inf", "optim.weight_decay: must be a finite number"),
    ("optim.eps=nan", "optim.eps: must be a finite number"),
    ("optim.betas=[0.9, nan]", "optim.betas: must be a finite number"),
    ("optim.grad_clip=inf", "optim.grad_clip: must be a finite number"),
    ("train.max_minutes=inf", "train.max_minutes: must be a finite number"),
    ("train.target=nan", "train.target: must be a finite number"),
    ("sample.temperature=-inf", "sample.temperature: must be a finite number"),
    ("model.dropout=.nan", "dropout"),  # the model class refuses it first, naming its field
]

REFUSED = [
    *NOT_FINITE,
    ("train.device=banana", "train.device"),
    ("train.micro_batch_size=3", "train.micro_batch_size: 3 does not divide"),
    ("sample.prompt=", "sample.prompt"),
    ("train.seed=-1", "train.seed"),
    ("train.threads=1099511627776", "train.threads"),
]


def cli(capsys, *args: str) -> tuple[int, str, str]:
    code = main(list(args))
    captured = capsys.readouterr()
    return code, captured.out, captured.err


@pytest.mark.parametrize("override, fragment", REFUSED)
def test_print_config_refuses_what_the_run_refuses(override, fragment, capsys):
    code, out, err = cli(capsys, "train", "--set", override, "--print-config")
    assert code == 2 and out == ""
    assert err.startswith("bdh: error: ") and err.count("\n") == 1 and fragment in err, err
    with pytest.raises(UserError, match=fragment.split(":")[0]):  # the config alone, or the run's checks
        check_run_config(load_config(None, [override]))


@pytest.mark.parametrize("device", ["cuda", "cuda:0", "cuda:3"])
def test_an_absent_device_is_refused_by_print_config(device, capsys):
    if torch.cuda.is_available() and (device == "cuda" or int(device[5:]) < torch.cuda.device_count()):
        pytest.skip(f"{device} is present on this machine")
    code, _, err = cli(capsys, "train", "--set", f"train.device={device}", "--print-config")
    assert code == 2 and err.startswith("bdh: error: train.device:") and err.count("\n") == 1, err


def test_finite_numbers_still_pass(capsys):
    code, out, err = cli(
        capsys,
        "train",
        "--set",
        "optim.lr=1e-3",
        "--set",
        "train.max_minutes=null",
        "--set",
        "sample.temperature=0",
        "--set",
        "train.device=cpu",
        "--print-config",
    )
    assert code == 0, err
    assert "lr: 0.001" in out


def test_micro_batches_are_checked_against_the_processes_of_the_environment(monkeypatch, capsys):
    monkeypatch.setenv("WORLD_SIZE", "2")
    code, _, err = cli(capsys, "train", "--set", "train.batch_size=5", "--print-config")
    assert code == 2 and "train.batch_size: 5 sequences cannot be split evenly over 2 processes" in err
    code, _, err = cli(
        capsys, "train", "--set", "train.batch_size=8", "--set", "train.micro_batch_size=8", "--print-config"
    )
    assert code == 2 and "train.micro_batch_size: 8 does not divide the 4 sequences per process" in err
    code, _, err = cli(
        capsys, "train", "--set", "train.batch_size=8", "--set", "train.micro_batch_size=2", "--print-config"
    )
    assert code == 0, err


def test_a_config_changed_after_loading_is_checked_again(corpus_file, tmp_path):
    config = load_config(None, tiny(corpus_file, tmp_path / "r"))
    config.optim.lr = float("nan")
    with pytest.raises(ConfigError, match="optim.lr: must be a finite number, got nan"):
        config.validate()  # the trainer takes a checked config: what changes it checks it again
    config = load_config(None, tiny(corpus_file, tmp_path / "r"))
    config.train.micro_batch_size = 3
    with pytest.raises(ConfigError, match="train.micro_batch_size"):
        Trainer(config)
    assert not (tmp_path / "r").exists()


def test_an_endless_validation_split_needs_eval_batches(corpus_file, tmp_path, monkeypatch):
    from bdh.tasks.text import TextTask

    monkeypatch.setattr(TextTask, "num_batches", lambda self, split, batch_size: None)
    config = load_config(None, tiny(corpus_file, tmp_path / "r", "eval.batches=null"))
    with pytest.raises(TrainingError, match="eval.batches"):
        Trainer(config)
    assert not (tmp_path / "r").exists()


def test_the_config_of_a_run_made_elsewhere_can_still_be_read(capsys):
    from bdh.train.config import RunConfig

    data = {"train": {"device": "cuda:7"}}
    if torch.cuda.device_count() > 7:
        pytest.skip("this machine has a cuda:7")
    assert RunConfig.from_dict(data).train.device == "cuda:7"  # bdh eval reads it on a machine without it
    with pytest.raises(UserError, match="train.device"):
        check_run_config(RunConfig.from_dict(data))
    code, _, err = cli(capsys, "train", "--set", "train.device=cuda:7", "--print-config")
    assert code == 2 and "train.device" in err
