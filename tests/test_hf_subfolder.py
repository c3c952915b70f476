"""``from_pretrained(parent, subfolder=...)`` through Hugging Face ``transformers`` checks the folder it loads, the
subfolder, as every ``bdh`` command does (`bdh.hf.check_local_folder`): checksums, a config.json that changes what
the weights mean. Offline: the folders are local."""

from __future__ import annotations

import json
import shutil

import pytest
import torch

pytest.importorskip("transformers")

from transformers import AutoConfig, AutoModelForCausalLM

import bdh.hf  # noqa: F401  (registers bdh's models with the auto classes)
from bdh import BDH, BDHConfig
from bdh.errors import ConfigWarning, UserError
from bdh.train.run.checkpoint import save_checkpoint


@pytest.fixture(autouse=True)
def _offline(monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")


def _run_with_best(run):
    """A run folder whose best/ is a checkpoint as the trainer writes it (meta.json with the checksums)."""
    torch.manual_seed(0)
    model = BDH(BDHConfig(n_layer=2, n_embd=32, n_head=2, n_neurons=256, vocab_size=256))
    step = save_checkpoint(run, 1, model, torch.optim.AdamW(model.parameters()), {}, {"step": 1}, keep=1)
    shutil.copytree(step, run / "best")
    return run / "best"


def test_a_subfolder_loads_when_untouched(tmp_path):
    _run_with_best(tmp_path / "run")
    model = AutoModelForCausalLM.from_pretrained(tmp_path, subfolder="run/best")
    assert isinstance(model, bdh.hf.BDHForCausalLM)


def test_flipped_weights_in_a_subfolder_are_refused(tmp_path):
    best = _run_with_best(tmp_path / "run")
    data = bytearray((best / "model.safetensors").read_bytes())
    data[-1] ^= 0x01  # one byte of a tensor: the file still reads, only its checksum tells
    (best / "model.safetensors").write_bytes(bytes(data))
    with pytest.raises(UserError, match="model.safetensors does not match its checksum"):
        AutoModelForCausalLM.from_pretrained(tmp_path, subfolder="run/best")


def test_an_edited_config_in_a_subfolder_is_refused(tmp_path):
    best = _run_with_best(tmp_path / "run")
    config = json.loads((best / "config.json").read_text())
    (best / "config.json").write_text(json.dumps({**config, "n_layer": config["n_layer"] + 1}))
    with pytest.raises(UserError, match="config.json does not match its checksum"):
        AutoModelForCausalLM.from_pretrained(tmp_path, subfolder="run/best")


def test_an_edited_n_layer_of_a_model_subfolder_warns(tmp_path):
    torch.manual_seed(0)
    folder = BDH(BDHConfig(n_layer=2, n_embd=32, n_head=2, n_neurons=256)).save_pretrained(tmp_path / "m" / "x")
    config = json.loads((folder / "config.json").read_text())
    (folder / "config.json").write_text(json.dumps({**config, "n_layer": 3}))
    with pytest.warns(ConfigWarning, match="n_layer is 3"):
        AutoModelForCausalLM.from_pretrained(tmp_path / "m", subfolder="x")


def test_a_run_folder_as_subfolder_names_best(tmp_path):
    _run_with_best(tmp_path / "run")
    (tmp_path / "run" / "config.yaml").write_text("model:\n  name: bdh\n")
    for load in (AutoModelForCausalLM.from_pretrained, AutoConfig.from_pretrained):
        with pytest.raises(UserError, match="pass .*best to from_pretrained"):
            load(tmp_path, subfolder="run")
