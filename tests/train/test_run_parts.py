"""The trainer's own parts on their own: the stop signals, the run folder, the process of one run."""

from __future__ import annotations

import os
import signal
import threading

import pytest
import torch

from bdh.errors import UserError
from bdh.train.config import RunConfig
from bdh.train.run.folder import RunFolder, new_run_dir
from bdh.train.runtime.device import Runtime
from bdh.train.signals import StopSignals


def test_the_first_signal_asks_to_stop_the_second_stops_at_once_and_handlers_are_restored():
    if threading.current_thread() is not threading.main_thread():
        pytest.skip("signal handlers can only be installed in the main thread")
    before = signal.getsignal(signal.SIGTERM)
    with StopSignals() as signals:
        assert signals.received is None
        os.kill(os.getpid(), signal.SIGTERM)
        assert signals.received == signal.SIGTERM
        with pytest.raises(KeyboardInterrupt):
            os.kill(os.getpid(), signal.SIGINT)
    assert signal.getsignal(signal.SIGTERM) is before


def test_a_new_run_folder_is_named_by_time_and_name_and_never_reuses_one(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    first = new_run_dir("probe")
    assert first.parent.name == "runs" and first.name.endswith("-probe")
    first.mkdir(parents=True)
    second = new_run_dir("probe")
    assert second != first and second.name.startswith(first.name)  # -2 after the same timestamp (or a later one)


def test_a_run_folder_is_refused_when_not_empty_emptied_with_overwrite_and_written_into_the_config(tmp_path):
    config = RunConfig.from_dict({"run_dir": str(tmp_path / "run"), "train": {"device": "cpu"}})
    runtime = Runtime(config.train)
    folder = RunFolder(config, runtime, resume=None, overwrite=False)
    assert config.run_dir == str(tmp_path / "run") and folder.path.is_dir()
    (folder.path / "left.txt").write_text("x")
    folder.close()
    with pytest.raises(UserError, match="already exists and is not empty"):
        RunFolder(config, runtime, resume=None, overwrite=False)
    assert (folder.path / "left.txt").exists()  # refused: nothing touched
    again = RunFolder(config, runtime, resume=None, overwrite=True)
    assert not (folder.path / "left.txt").exists()
    again.close()


def test_the_runtime_of_one_process_has_no_collectives_to_make():
    runtime = Runtime(RunConfig.from_dict({"train": {"device": "cpu", "precision": "fp32"}}).train)
    assert runtime.parallel == "none" and runtime.amp_dtype is None and not runtime.sharded
    assert runtime.any(True) and not runtime.any(False)
    assert runtime.mean(2.5) == 2.5 and runtime.broadcast({"a": 1}) == {"a": 1}
    value = torch.tensor([3.0])
    assert runtime.gather(value)[0] is value and torch.equal(runtime.sum(value), value)
