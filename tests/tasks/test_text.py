"""The byte-level text task: embedded corpus, files and folders, splits, batches, consecutive windows."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from bdh.errors import UserError
from bdh.registry import get_task
from bdh.tasks.text import TextConfig, TextTask, embedded_corpus


def test_embedded_corpus_is_plain_shakespeare_without_boilerplate():
    text = embedded_corpus()
    assert 3_000_000 < len(text) < 10_000_000
    lowered = text.lower()
    assert b"gutenberg" not in lowered and b"copyright" not in lowered
    assert b"To be, or not to be" in text and b"ROMEO" in text
    assert get_task("text") is TextTask


def test_batches_are_pure_functions_of_the_index():
    task = TextTask(TextConfig(seq_len=64))
    a = task.batch("train", 5, 4, seed=1)
    b = task.batch("train", 5, 4, seed=1)
    c = task.batch("train", 6, 4, seed=1)
    assert torch.equal(a[0], b[0]) and torch.equal(a[1], b[1])
    assert not torch.equal(a[0], c[0])
    inputs, targets = a
    assert inputs.shape == targets.shape == (4, 64) and inputs.dtype == torch.int64
    assert torch.equal(inputs[:, 1:], targets[:, :-1])  # targets are the next bytes


def test_train_and_val_do_not_overlap(tmp_path):
    data = np.random.default_rng(0).integers(0, 256, 10240, dtype=np.uint8).tobytes()  # not UTF-8
    path = tmp_path / "bin.dat"
    path.write_bytes(data)
    task = TextTask(TextConfig(data=str(path), seq_len=16, val_fraction=0.25))
    assert task.n_train == 7680
    stream = np.frombuffer(data, dtype=np.uint8)
    for i in range(12):
        x, y = task.batch("train", i, 8, seed=0)
        for row_x, row_y in zip(x, y):  # locate each window: it must lie inside [0, n_train)
            row = torch.cat([row_x, row_y[-1:]]).numpy()
            starts = [
                s for s in range(0, len(stream) - 16) if stream[s] == row[0] and np.array_equal(stream[s : s + 17], row)
            ]
            assert len(starts) == 1 and starts[0] + 17 <= task.n_train
    n = task.num_batches("val", 8)
    seen = torch.cat([task.batch("val", i, 8, seed=0)[0] for i in range(n)])
    assert seen.shape[0] == (2560 - 1) // 16  # every validation window exactly once (short last batch)
    assert int(seen[0, 0]) == data[7680]


def test_folder_of_files_is_one_stream(tmp_path):
    (tmp_path / "b").mkdir()
    (tmp_path / "a.txt").write_bytes(b"A" * 300)
    (tmp_path / "b" / "c.txt").write_bytes(b"\xff\xfe" * 200)
    (tmp_path / "empty.txt").write_bytes(b"")
    task = TextTask(TextConfig(data=str(tmp_path), seq_len=8, val_fraction=0.5))
    assert len(task.stream) == 700
    assert task.stream.read(296, 8).tolist() == [65] * 4 + [255, 254, 255, 254]  # a window crossing two files


def test_bad_data_gives_one_line_errors(tmp_path):
    with pytest.raises(FileNotFoundError, match="no such file"):
        TextTask(TextConfig(data=str(tmp_path / "missing.txt")))
    empty = tmp_path / "empty.txt"
    empty.write_bytes(b"")
    with pytest.raises(ValueError, match="empty"):
        TextTask(TextConfig(data=str(empty)))
    short = tmp_path / "short.txt"
    short.write_bytes(b"x" * 300)
    with pytest.raises(ValueError, match="shorter than one window"):
        TextTask(TextConfig(data=str(short), seq_len=64))
    (tmp_path / "hollow").mkdir()
    with pytest.raises(ValueError, match="no files"):
        TextTask(TextConfig(data=str(tmp_path / "hollow")))
    with pytest.raises(ValueError, match="TextConfig.seq_len"):
        TextConfig(seq_len=0)


def test_stream_batches_continue_each_other(tmp_path):
    path = tmp_path / "t.txt"
    path.write_bytes(embedded_corpus()[:20_000])
    task = TextTask(TextConfig(data=str(path), seq_len=32, val_fraction=0.1))
    windows = task.lane_windows("train", 4)
    x0, y0, reset0 = task.stream_batch("train", 0, 4, seed=3)
    x1, y1, reset1 = task.stream_batch("train", 1, 4, seed=3)
    assert reset0 and not reset1
    assert torch.equal(y0[:, -1], x1[:, 0])  # row b of batch 1 starts where row b of batch 0 ended
    _, _, reset_next = task.stream_batch("train", windows, 4, seed=3)
    assert reset_next  # a new pass over the lanes
    assert all(int(x.max()) < 256 for x in (x0, x1))


def test_random_streams_restart_every_k_windows(tmp_path):
    """``stream_windows`` K: rows continue each other within a stream of K windows, a new stream starts every K
    batches (reset) somewhere else, and every batch is a pure function of its index (exact resume)."""
    path = tmp_path / "t.txt"
    path.write_bytes(embedded_corpus()[:50_000])
    task = TextTask(TextConfig(data=str(path), seq_len=32, val_fraction=0.1))
    batches = [task.stream_batch("train", i, 4, seed=3, stream_windows=3) for i in range(7)]
    assert [b[2] for b in batches] == [True, False, False, True, False, False, True]
    for i in (0, 1, 3, 4):
        assert torch.equal(batches[i][1][:, -1], batches[i + 1][0][:, 0])  # within a stream: continued
    assert not torch.equal(batches[2][1][:, -1], batches[3][0][:, 0])  # a new stream: elsewhere
    again = task.stream_batch("train", 4, 4, seed=3, stream_windows=3)
    assert torch.equal(again[0], batches[4][0]) and again[2] == batches[4][2]
    other = task.stream_batch("train", 4, 4, seed=4, stream_windows=3)
    assert not torch.equal(other[0], batches[4][0])
    rows = {bytes(r.tolist()) for r in batches[0][0]}
    assert len(rows) == 4  # each row its own place
    with pytest.raises(UserError, match="train.tbptt_windows: a stream of 10000 windows"):
        task.stream_batch("train", 0, 4, seed=3, stream_windows=10_000)


@pytest.mark.parametrize("count", [1, 2, 474 * 8 - 3, 3792, 10_007])
def test_evaluation_order_is_a_permutation_spread_over_the_split(count):
    """The training-time estimate scores the first batches of the evaluation order: those must be spread over the
    whole split (not one stretch of one play), and a full pass must still score every window once."""
    from bdh.tasks.text import spread

    order = spread(np.arange(count), count)
    assert sorted(order.tolist()) == list(range(count))
    for k in (16, 128):
        if k < count:
            first = np.sort(order[:k])
            gaps = np.diff(np.concatenate([first, [first[0] + count]]))
            assert gaps.max() <= 3 * count / k  # golden-ratio points: gaps within a small factor of count / k
