"""`bdh.analysis.evaluation.data`: what an evaluation reads is decided in the library, from the run's own config."""

from types import SimpleNamespace

import pytest

from bdh.analysis.evaluation.data import EVAL_BATCHES, eval_data
from bdh.errors import UserError
from bdh.train.config import load_config


def byte_model(vocab_size=256):
    return SimpleNamespace(config=SimpleNamespace(vocab_size=vocab_size))


def test_a_run_is_read_as_its_training_evaluated_it(tmp_path):
    overrides = ["task.seq_len=64", "train.batch_size=6", "train.seed=5", "eval.batches=3"]
    (tmp_path / "config.yaml").write_text(load_config(None, overrides).to_yaml())  # written whole, as a run does
    ev = eval_data(tmp_path, byte_model())
    # the batches of the run's final evaluation (the number it printed): four times eval.batches by default
    assert (ev.split, ev.seed, ev.batch_size, ev.batches, ev.unit) == ("val", 5, 6, 12, "byte")
    assert ev.task.seq_len == 64 and "validation split" in ev.description
    (tmp_path / "config.yaml").write_text(load_config(None, [*overrides, "eval.final_batches=5"]).to_yaml())
    assert eval_data(tmp_path, byte_model()).batches == 5
    (tmp_path / "config.yaml").write_text(load_config(None, [*overrides, "eval.batches=null"]).to_yaml())
    assert eval_data(tmp_path, byte_model()).batches is None  # the run evaluated the whole split, and so does eval


def test_a_text_file_is_read_whole_in_the_runs_windows_or_the_default(tmp_path):
    text = tmp_path / "t.txt"
    text.write_bytes(b"to be or not to be " * 200)
    folder = tmp_path / "model"
    folder.mkdir()
    ev = eval_data(folder, byte_model(), text)
    assert (ev.split, ev.seed, ev.batch_size, ev.batches) == ("all", 0, 8, EVAL_BATCHES)
    with pytest.raises(UserError, match="read as bytes"):
        eval_data(folder, byte_model(vocab_size=64), text)
    with pytest.raises(UserError, match="not a run folder"):
        eval_data(folder, byte_model())
