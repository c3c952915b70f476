"""The task protocol: every registered task is a `Task`; the optional stream capability is declared by
`StreamTask`, which the trainer checks instead of probing for methods."""

from __future__ import annotations

import pytest

from bdh import registry
from bdh.tasks.base import StreamTask, Task
from bdh.train.config import build_section_config

TASKS = registry.names("task")


def _task(name: str):
    cls, config = build_section_config("task", {"name": name})
    return cls(config)


@pytest.mark.parametrize("name", TASKS)
def test_every_registered_task_is_a_task(name):
    assert isinstance(_task(name), Task)


def test_the_text_task_declares_consecutive_windows_and_the_others_do_not():
    streams = [name for name in TASKS if isinstance(_task(name), StreamTask)]
    assert streams == ["text"]


def test_a_task_with_stream_batch_but_no_lane_windows_is_not_a_stream_task():
    class Half:
        name, vocab_size, seq_len, causal, target_metric = "half", 4, 3, True, ("acc", True)

        def batch(self, split, index, batch_size, seed): ...

        def num_batches(self, split, batch_size): ...

        def metrics(self, logits, targets, inputs): ...

        def stream_batch(self, split, index, batch_size, seed): ...

    assert isinstance(Half(), Task) and not isinstance(Half(), StreamTask)
    Half.lane_windows = lambda self, split, batch_size: 1
    assert isinstance(Half(), StreamTask)
