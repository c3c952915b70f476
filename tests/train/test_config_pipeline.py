"""One config pipeline: the run config's typed model and task sections are built once, when the config is read,
and travel down to the model as they are; what the trainer needs of a model config is `bdh.model_api`'s protocol;
every config's presets are `TypedConfig.PRESETS`."""

from __future__ import annotations

import dataclasses
import importlib
from dataclasses import dataclass
from typing import ClassVar

import pytest
import yaml
from _train_helpers import TINY

from bdh import model_api, registry
from bdh.baselines.gpt import GPT, GPTConfig
from bdh.errors import UserError
from bdh.model.config import BDHConfig
from bdh.tasks.base import MODEL_FIELDS, decided_fields
from bdh.train.config import ConfigError, RunConfig, Section, load_config
from bdh.train.runtime import memory
from bdh.typed_config import TypedConfig, bounded

QUICK_RUN = [*TINY, "train.max_steps=1", "eval.every=0", "eval.batches=1", "eval.final_batches=1"]


def test_the_model_config_built_when_the_config_is_read_is_the_one_the_model_gets(tmp_path):
    from bdh.train import train

    config = load_config(None, [*QUICK_RUN, f"run_dir={tmp_path / 'run'}"])
    built = config.model.config
    assert isinstance(built, BDHConfig) and config.model.name == "bdh"
    result = train(config)
    assert result.model.config is built and config.model.config is built  # never rebuilt, never written back
    saved = yaml.safe_load((tmp_path / "run" / "config.yaml").read_text())
    assert saved["model"] == {"name": "bdh", **built.to_dict()}  # the whole model section
    assert saved["task"] == {"name": "text", "seq_len": 32}  # the task fields as given


@pytest.mark.parametrize(
    "overrides, expected",
    [
        (["task.name=boardpath"], {"causal": False}),  # BDH reads a board bidirectionally
        (["task.name=mqar", "model.name=gpt"], {"vocab_size": 8192, "seq_len": 64, "causal": True}),
        (["task.name=mqar", "model.name=gpt", "model.vocab_size=9000"], {"vocab_size": 9000, "seq_len": 64}),
        (["task.seq_len=64", "model.name=gpt"], {"vocab_size": 256, "seq_len": 64}),
    ],
)
def test_the_fields_the_task_decides_are_the_tasks_where_the_run_leaves_them_out(overrides, expected):
    config = load_config(None, overrides)
    assert {k: getattr(config.model.config, k) for k in expected} == expected


def test_a_model_that_disagrees_with_its_task_is_refused_when_the_run_starts():
    from bdh.train.build import plan_run

    config = load_config(None, ["task.name=mqar", "model.name=gpt", "model.vocab_size=100"])
    with pytest.raises(UserError, match=r"model.vocab_size: 100 is smaller than the task's vocabulary"):
        plan_run(config, process_group=False)


@pytest.mark.parametrize("name", registry.names("task"))
def test_what_a_task_decides_is_what_the_built_task_has(name):
    cls = registry.get_task(name)
    config = cls.config_class()
    task = cls(config)
    assert decided_fields(cls, config) == {key: getattr(task, key) for key in MODEL_FIELDS}


@pytest.mark.parametrize(
    "name, fields",
    [
        ("mqar", {"train_slices": [[16, 2], [32, 4]], "val_slices": [[32, 4]], "vocab_size": 100}),  # PAD counted
        ("mqar", {"input_seq_len": 24, "num_kv_pairs": 3, "vocab_size": 50}),
        ("boardpath", {"board_size": 5}),
        ("repeat", {"seq_len": 40}),
        ("induction", {"seq_len": 33, "vocab_size": 20}),
        ("recall_gap", {"seq_len": 64, "vocab_size": 40}),
    ],
)
def test_model_fields_say_what_the_task_built_on_that_config_has(name, fields):
    """Every built-in task says its model fields from its config alone, so a run config never builds a task to
    read them; they are the built task's, on configs other than the defaults too."""
    cls = registry.get_task(name)
    config = cls.config_class.from_dict(fields)
    task = cls(config)
    assert cls.model_fields(config) == {key: getattr(task, key) for key in MODEL_FIELDS}


def test_every_built_in_task_has_model_fields():
    assert [name for name in registry.BUILTIN_TASKS if not hasattr(registry.get_task(name), "model_fields")] == []


def test_an_old_config_yaml_loads_and_writes_back_the_same():
    # config.yaml of a run: the model section whole (as the trainer wrote it), the task's fields as given
    written = load_config(None, ["task.name=mqar", "model.name=gpt"]).to_yaml()
    assert RunConfig.from_dict(yaml.safe_load(written)).to_yaml() == written
    # an older config.yaml whose model section the trainer had not completed: completed from the task now
    old = {"model": {"name": "gpt", "n_embd": 16}, "task": {"name": "mqar", "num_kv_pairs": 4}}
    config = RunConfig.from_dict(old)
    model, task = config.model.config, config.task.config
    assert (model.n_embd, model.vocab_size, task.num_kv_pairs) == (16, 8192, 4)
    assert config.to_dict()["task"] == old["task"]


def test_a_typed_section_must_be_the_config_of_the_name_it_goes_with():
    assert RunConfig(model=Section("gpt", GPTConfig())).model.name == "gpt"
    with pytest.raises(ConfigError, match="model: a GPTConfig is not the config of the model 'bdh'"):
        RunConfig(model=Section("bdh", GPTConfig()))


# ---------------------------------------------------------------------- the model protocol
@dataclass
class StandInConfig(TypedConfig):
    """A model config that implements `bdh.model_api.ModelConfigAPI` itself (no shared defaults)."""

    RUNTIME_FIELDS: ClassVar[frozenset[str]] = frozenset({"dropout"})

    vocab_size: int = bounded(256, ge=1)
    seq_len: int = bounded(32, ge=1)
    n_layer: int = bounded(1, ge=1)
    n_embd: int = bounded(16, ge=1)
    n_head: int = bounded(2, ge=1)
    dropout: float = bounded(0.0, ge=0, lt=1)
    causal: bool = True
    positional: str = "learned"
    share_layers: bool = False
    random_depth: tuple[int, int] | None = None  # read by GPT's forward, which StandIn inherits
    estimate: int | None = None  # what train_memory_bytes says, per token of a micro-batch

    REPLACES: ClassVar[dict[str, tuple[str, ...]]] = {}

    def train_memory_bytes(self, micro_batch, seq_len, *, form=None, dtype="fp32", shards=1):
        return None if self.estimate is None else self.estimate * micro_batch * seq_len

    def gpt(self) -> GPTConfig:
        return GPTConfig(
            **{f.name: getattr(self, f.name) for f in dataclasses.fields(GPTConfig) if hasattr(self, f.name)}
        )


class StandIn(GPT):
    """A GPT built from a `StandInConfig`: a model the trainer knows only through the registry and the protocol."""

    model_type = "test-stand-in"
    config_class = StandInConfig

    def __init__(self, config: StandInConfig):
        super().__init__(config.gpt())
        self.config = config


@pytest.fixture
def stand_in():
    registry.register_model(StandIn)
    try:
        yield StandIn
    finally:
        registry._ADDED["model"].pop(StandIn.model_type, None)


def test_a_model_known_only_by_the_protocol_trains_and_estimates_its_memory(stand_in, tmp_path, monkeypatch):
    from bdh.train import train

    small = [f"model.name={stand_in.model_type}", "task.seq_len=32", *QUICK_RUN[5:]]
    config = load_config(None, [*small, f"run_dir={tmp_path / 'a'}"])
    built = config.model.config
    assert isinstance(built, StandInConfig) and memory.estimate_bytes(built, 4, 32, None) is None
    assert train(config).model.config is built
    sized = load_config(None, [*small, "model.estimate=1000", "train.device=cpu"]).model.config
    assert memory.estimate_bytes(sized, 4, 32, None) == 1000 * 4 * 32
    monkeypatch.setattr(memory, "available_bytes", lambda device: 1000 * 4 * 32 - 1)
    with pytest.raises(UserError, match="train.micro_batch_size: a micro-batch of 4 x 32 tokens"):
        memory.check_fits(sized, 4, 32, device=None, amp_dtype=None)


def test_the_protocol_has_defaults_for_a_config_that_implements_none_of_it():
    @dataclass
    class Bare:
        dropout: float = 0.0

    assert model_api.runtime_fields(Bare) == model_api.ModelConfig.RUNTIME_FIELDS
    assert model_api.complete(Bare, {"a": 1, "b": 1}, {"b": 2}) == {"a": 1, "b": 2}
    assert model_api.memory_estimate(Bare(), 4, 32) is None
    assert model_api.memory_estimate(GPTConfig(), 4, 32) is None  # a baseline: the shared default, unknown
    assert model_api.memory_estimate(BDHConfig(), 4, 32) > 0
    assert isinstance(BDHConfig(), model_api.ModelConfigAPI) and isinstance(GPTConfig(), model_api.ModelConfigAPI)


def test_bdh_completes_a_partial_section_by_its_neuron_count_rule():
    default = {"n_neurons": 2048, "n_layer": 4}
    assert model_api.complete(BDHConfig, default, {"mlp_internal_dim_multiplier": 8}) == {
        "n_layer": 4,
        "mlp_internal_dim_multiplier": 8,
    }
    assert model_api.complete(BDHConfig, default, {"no_expansion": True}) == {"n_layer": 4, "no_expansion": True}
    assert model_api.complete(BDHConfig, default, {"no_expansion": False}) == {**default, "no_expansion": False}
    assert model_api.complete(BDHConfig, default, {"n_neurons": None}) == {**default, "n_neurons": None}


# ---------------------------------------------------------------------- presets
def _preset_classes() -> list[type]:
    modules = {
        "bdh.bench.recall": "RecallSweep",
        "bdh.bench.boardpath": "BoardPathSweep",
        "bdh.bench.sudoku": "SudokuSweep",
        "bdh.experiments.nobptt": "Config",
        "bdh.experiments.merge": "Config",
        "bdh.experiments.synapses.experiment": "Config",
        "bdh.experiments.longcontext.config": "Config",
        "bdh.experiments.relatives.config": "Config",
        "bdh.experiments.scaling.config": "Config",
    }
    return [getattr(importlib.import_module(m), c) for m, c in modules.items()]


@pytest.mark.parametrize("cls", _preset_classes(), ids=lambda c: f"{c.__module__}.{c.__name__}")
def test_every_preset_builds_what_its_values_say(cls):
    assert "quick" in cls.PRESETS
    assert cls.preset() == cls()
    for name, values in cls.PRESETS.items():
        built = cls.preset(name)
        assert built == cls(**values)  # from_dict's typed path gives what the constructor gives
        assert built.to_dict() == cls(**values).to_dict()


def test_the_run_configs_quick_preset_is_bdh_train_quick():
    from bdh.cli.train_cmds import QUICK

    quick = RunConfig.preset("quick")
    assert quick.to_dict() == load_config(None, list(QUICK)).to_dict() == load_config(preset="quick").to_dict()
    assert (quick.train.max_steps, quick.model) == (300, RunConfig().model)  # the main job's model, shortened
    assert load_config(None, ["train.max_steps=7"], preset="quick").train.max_steps == 7  # --set wins


@pytest.mark.parametrize("cls", [RunConfig, *_preset_classes()[:1]])
def test_an_unknown_preset_is_one_line_naming_the_known_ones(cls):
    with pytest.raises(ConfigError) as info:
        cls.preset("quik")
    message = str(info.value)
    assert "unknown preset 'quik' (did you mean 'quick'?); known presets: " in message and "\n" not in message
    assert all(name in message for name in cls.PRESETS)
