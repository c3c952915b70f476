"""Run configs: YAML/JSON files, --set overrides, refusal of unknown keys and wrong types."""

from __future__ import annotations

import json
import re

import pytest
import yaml

from bdh.train.config import ConfigError, RunConfig, apply_overrides, load_config, sweep_run_config


def test_defaults_are_the_main_job():
    config = load_config()
    assert config.model.name == "bdh" and config.task.name == "text"
    assert config.task.config.data is None  # the embedded corpus
    assert config.optim.decay == "linear" and config.optim.weight_decay == 0.1


def test_yaml_file_and_overrides(tmp_path):
    path = tmp_path / "run.yaml"
    path.write_text("model:\n  n_layer: 2\noptim:\n  lr: 1e-3\n  decay: cosine\ntrain:\n  max_steps: 7\n")
    config = load_config(path, ["optim.lr=3e-4", "train.bptt=tbptt", "model.n_embd=64"])
    assert config.optim.lr == pytest.approx(3e-4)  # YAML's "3e-4" string is read as a number
    assert config.optim.decay == "cosine"
    assert config.train.max_steps == 7 and config.train.bptt == "tbptt"
    assert config.model.config.n_layer == 2 and config.model.config.n_embd == 64


def test_json_file_and_round_trip(tmp_path):
    path = tmp_path / "run.json"
    path.write_text(json.dumps({"train": {"batch_size": 8}, "optim": {"betas": [0.9, 0.99]}}))
    config = load_config(path)
    assert config.train.batch_size == 8 and config.optim.betas == (0.9, 0.99)
    again = RunConfig.from_dict(yaml.safe_load(config.to_yaml()))
    assert again.to_dict() == config.to_dict()


@pytest.mark.parametrize(
    "override, key",
    [
        ("optim.lrr=1", "optim.lrr"),
        ("foo.bar=1", "foo"),
        ("model.n_layerz=2", "model.n_layerz"),
        ("task.seqlen=2", "task.seqlen"),
        ("optim.lr=fast", "optim.lr"),
        ("train.batch_size=true", "train.batch_size"),
        ("train.batch_size=2.5", "train.batch_size"),
        ("train.bptt=sometimes", "train.bptt"),
        ("train.parallel=zero3", "train.parallel"),
        ("optim.betas=[0.9]", "optim.betas"),
        ("model.name=transformer9000", "transformer9000"),
        ("train.batch_size=0", "train.batch_size"),
    ],
)
def test_bad_keys_and_types_are_refused_naming_the_key(override, key):
    with pytest.raises(ValueError) as info:
        load_config(None, [override])
    message = str(info.value)
    assert key in message and "\n" not in message


def test_set_needs_key_value():
    with pytest.raises(ConfigError, match="key=value"):
        apply_overrides({}, ["optim.lr"])


def test_missing_and_malformed_files(tmp_path):
    with pytest.raises(FileNotFoundError, match="no such config file"):
        load_config(tmp_path / "nope.yaml")
    bad = tmp_path / "bad.yaml"
    bad.write_text("model: [unclosed\n")
    with pytest.raises(ConfigError, match="not valid YAML"):
        load_config(bad)
    top = tmp_path / "list.yaml"
    top.write_text("- 1\n- 2\n")
    with pytest.raises(ConfigError, match="mapping"):
        load_config(top)


def test_a_binary_file_is_not_a_config(tmp_path):
    image = tmp_path / "image.png"
    image.write_bytes(b"\x89PNG\r\n\x1a\n" + bytes(range(256)))
    with pytest.raises(ConfigError, match="image.png: not a text file"):
        load_config(image)


def test_shipped_example_configs_are_valid():
    from pathlib import Path

    root = Path(__file__).resolve().parents[2] / "configs"
    for name in ("text-tbptt.yaml", "text-paper.yaml"):
        config = load_config(root / name)
        assert config.train.bptt == "tbptt"


@pytest.mark.parametrize(
    "override, suggestion",
    [
        ("optim.lrr=1", "did you mean 'lr'?"),
        ("optm.lr=1", "did you mean 'optim'?"),
        ("model.n_layers=2", "did you mean 'n_layer'?"),
        ("task.seqlen=2", "did you mean 'seq_len'?"),
        ("train.batchsize=2", "did you mean 'batch_size'?"),
        ("train.lr=1e-3", "did you mean 'optim.lr'?"),  # a field of another section: that section named
        ("optim.seed=1", "did you mean 'train.seed'?"),
    ],
)
def test_an_unknown_key_suggests_the_closest_known_one(override, suggestion):
    with pytest.raises(ValueError, match=re.escape(suggestion)):
        load_config(None, [override])


def test_a_sweep_run_config_is_the_documented_schedule_and_takes_its_fields(tmp_path):
    config = sweep_run_config(
        {"name": "gpt", "n_embd": 16},
        {"name": "mqar"},
        tmp_path / "run",
        lr=3e-3,
        steps=55,
        batch_size=8,
        seed=7,
        eval={"every": 0, "batches": 1},
        logs=20,
        threads=2,
        check_memory=False,
    )
    o, t = config.optim, config.train
    assert (o.lr, o.min_lr, o.warmup_steps) == (3e-3, pytest.approx(3e-4), 5)  # a tenth of the steps, a tenth of lr
    assert (t.batch_size, t.max_steps, t.max_minutes, t.seed, t.threads, t.check_memory) == (8, 55, None, 7, 2, False)
    assert t.precision == RunConfig().train.precision  # what is not given is the trainer's default
    assert (config.log.every, config.log.progress, config.log.tensorboard) == (2, "none", False)  # 55 // 20
    assert (config.checkpoint.every, config.checkpoint.keep, config.sample.max_new_tokens) == (0, 1, 0)
    assert config.eval.batches == 1 and config.run_dir == str(tmp_path / "run")
    assert (config.model.name, config.model.config.n_embd, config.task.name) == ("gpt", 16, "mqar")
    assert config.to_dict()["task"] == {"name": "mqar"}  # the task fields as given


def test_a_sweep_trains_the_model_it_names_not_the_main_jobs_choices(tmp_path):
    # The main job's default is ALiBi damping; a sweep that writes a BDH section without ``damping`` trains
    # BDHConfig's own default (the official, undamped model), and a field it gives wins.
    assert load_config().model.config.damping == "alibi"
    common = {"lr": 1e-3, "steps": 3, "batch_size": 4, "seed": 0, "eval": {"every": 0}}
    size = {"name": "bdh", "n_layer": 2, "n_embd": 32, "n_head": 4, "n_neurons": 256}
    assert sweep_run_config(size, {"name": "text"}, tmp_path / "a", **common).model.config.damping is None
    given = sweep_run_config({**size, "damping": "multiscale"}, {"name": "text"}, tmp_path / "b", **common)
    assert given.model.config.damping == "multiscale"
    by_multiplier = {k: v for k, v in size.items() if k != "n_neurons"} | {"mlp_internal_dim_multiplier": 8}
    config = sweep_run_config(by_multiplier, {"name": "text"}, tmp_path / "c", **common)
    assert config.model.config.n_neurons is None and config.model.config.mlp_internal_dim_multiplier == 8


def test_a_sweep_run_config_takes_replacements_by_section_and_refuses_unknown_fields(tmp_path):
    common = {"lr": 1e-3, "steps": 3, "batch_size": 4, "seed": 0, "eval": {"every": 0}}
    config = sweep_run_config(
        {"name": "bdh"},
        {"name": "text"},
        tmp_path,
        warmup_steps=2,
        sections={"model": {"damping": "alibi"}, "train": {"seed": 5}, "eval": {"batches": 9}},
        **common,
    )
    assert config.optim.warmup_steps == 2 and config.log.every == 1  # at least every step
    assert config.model.config.damping == "alibi" and config.train.seed == 5 and config.eval.batches == 9
    with pytest.raises(ConfigError, match="train.speed"):
        sweep_run_config({"name": "bdh"}, {"name": "text"}, tmp_path, speed=2, **common)
