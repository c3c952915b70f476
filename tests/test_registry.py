"""The one registry: built-in names resolve lazily, a model's key is its model_type, extensions register once."""

from __future__ import annotations

import subprocess
import sys

import pytest
import torch

from bdh import registry
from bdh.errors import UserError


@pytest.mark.parametrize("name", registry.names("model"))
def test_every_builtin_model_is_keyed_by_its_model_type(name):
    cls = registry.get_model(name)
    assert cls.model_type == name
    assert hasattr(cls, "config_class")


@pytest.mark.parametrize("name", registry.names("task"))
def test_every_builtin_task_resolves_to_a_class_with_a_config(name):
    assert hasattr(registry.get_task(name), "config_class")


@pytest.mark.parametrize("kind, getter", [("model", registry.get_model), ("task", registry.get_task)])
def test_unknown_names_are_one_line_errors_listing_the_known_ones(kind, getter):
    with pytest.raises(UserError, match=f"unknown {kind} 'nope'; known {kind}s: ") as err:
        getter("nope")
    assert "\n" not in str(err.value)
    with pytest.raises(UserError, match=f"unknown {kind} 3"):
        getter(3)


def test_naming_a_model_imports_its_module_only():
    code = (
        "import sys; from bdh import registry; registry.get_model('gpt'); "
        "print(sorted(m for m in sys.modules if m.startswith('bdh.baselines') or m.startswith('bdh.tasks')))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert "bdh.baselines.gpt" in out and "bdh.baselines.hyperset" not in out and "bdh.tasks.mqar" not in out


def test_an_extension_registers_once_and_loads_from_its_folder(tmp_path):
    from bdh.baselines.gpt import GPT, GPTConfig
    from bdh.model.io import load_pretrained

    class TinyGPT(GPT):
        model_type = "test-tiny-gpt"

    try:
        assert registry.register_model(TinyGPT) is TinyGPT
        assert registry.register_model(TinyGPT) is TinyGPT  # the same class again: no change
        assert "test-tiny-gpt" in registry.names("model")
        model = TinyGPT(GPTConfig(n_layer=1, n_embd=8, n_head=2, vocab_size=16, seq_len=8))
        loaded = load_pretrained(model.save_pretrained(tmp_path / "m"))
        assert type(loaded) is TinyGPT
        idx = torch.randint(0, 16, (1, 5))
        assert torch.equal(loaded(idx), model.eval()(idx))

        class Other(GPT):
            model_type = "test-tiny-gpt"

        with pytest.raises(UserError, match="'test-tiny-gpt' is taken"):
            registry.register_model(Other)
        with pytest.raises(UserError, match="'gpt' is taken"):
            registry.register_model(GPT)
    finally:
        registry._ADDED["model"].pop("test-tiny-gpt", None)


def test_a_model_without_model_type_is_refused():
    with pytest.raises(UserError, match="has no model_type"):
        registry.register_model(type("Nameless", (), {}))


def test_a_task_added_as_contributing_md_says_trains(tmp_path):
    """CONTRIBUTING.md's recipe: a task class (here: the repeat task under a new name) plus one registration."""
    from bdh.tasks.repeat import RepeatTask
    from bdh.train import load_config, train

    class MyTask(RepeatTask):
        name = "test-mytask"

    registry.register_task("test-mytask", MyTask)
    try:
        overrides = [
            "task.name=test-mytask", "task.seq_len=32", "model.n_layer=1", "model.n_embd=16", "model.n_head=2",
            "model.n_neurons=64", "train.max_steps=3", "train.batch_size=2", "train.max_minutes=null",
            "eval.batches=1", "log.progress=none", "log.tensorboard=false", "sample.max_new_tokens=0",
            f"run_dir={tmp_path / 'run'}",
        ]  # fmt: skip
        result = train(load_config(None, overrides))
        assert result.step == 3 and "val_repeat_accuracy" in result.metrics
    finally:
        registry._ADDED["task"].pop("test-mytask", None)
