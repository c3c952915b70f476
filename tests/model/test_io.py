"""save_pretrained / from_pretrained and their one-line errors."""

import dataclasses
import json
import warnings

import pytest
import torch

import bdh
from bdh import BDH, BDHConfig, CheckpointError
from bdh.model.io import architecture, load_tensors, save_tensors

from .helpers import EVERY_FIELD, tiny_model


def test_round_trip_gives_identical_logits(tmp_path):
    model = tiny_model(damping="alibi", positional="rope-standard")
    model.save_pretrained(tmp_path / "m")
    assert sorted(p.name for p in (tmp_path / "m").iterdir()) == ["config.json", "model.safetensors"]
    again = BDH.from_pretrained(tmp_path / "m")
    assert again.config == model.config
    idx = torch.randint(0, 256, (2, 10))
    assert torch.equal(again(idx), model(idx))
    assert torch.equal(bdh.load(tmp_path / "m")(idx), model(idx))
    meta = json.loads((tmp_path / "m" / "config.json").read_text())
    assert meta["model_type"] == "bdh" and meta["format_version"] == 1 and meta["damping"] == "alibi"


def test_save_overwrites_and_leaves_no_temporary_files(tmp_path):
    tiny_model(seed=1).save_pretrained(tmp_path)
    tiny_model(seed=2).save_pretrained(tmp_path)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["config.json", "model.safetensors"]
    assert torch.equal(BDH.from_pretrained(tmp_path).E, tiny_model(seed=2).E)


def _one_line(exc: pytest.ExceptionInfo) -> str:
    msg = str(exc.value)
    assert "\n" not in msg
    return msg


def test_missing_folder_and_files(tmp_path):
    with pytest.raises(CheckpointError, match="no such model folder") as e:
        BDH.from_pretrained(tmp_path / "nope")
    _one_line(e)
    tiny_model().save_pretrained(tmp_path)
    (tmp_path / "model.safetensors").unlink()
    with pytest.raises(CheckpointError, match=r"model\.safetensors: file not found") as e:
        BDH.from_pretrained(tmp_path)
    _one_line(e)
    (tmp_path / "config.json").unlink()
    with pytest.raises(CheckpointError, match=r"config\.json: file not found"):
        BDH.from_pretrained(tmp_path)


def test_truncated_weights(tmp_path):
    tiny_model().save_pretrained(tmp_path)
    path = tmp_path / "model.safetensors"
    path.write_bytes(path.read_bytes()[:-100])
    with pytest.raises(CheckpointError, match="model.safetensors: not a readable safetensors file") as e:
        BDH.from_pretrained(tmp_path)
    _one_line(e)


def _edit_config(folder, **fields):
    cfg = json.loads((folder / "config.json").read_text())
    (folder / "config.json").write_text(json.dumps({**cfg, **fields}))


def _forget_the_record(folder):
    """The weights as a bdh before the record wrote them: no architecture in the header."""
    save_tensors(load_tensors(folder / "model.safetensors"), folder / "model.safetensors", metadata={"format": "pt"})


def test_config_that_does_not_match_the_weights(tmp_path):
    tiny_model().save_pretrained(tmp_path)
    _edit_config(tmp_path, n_neurons=128)
    with pytest.raises(CheckpointError, match=r"n_neurons is 128 but the weights were saved with 64") as e:
        BDH.from_pretrained(tmp_path)
    _one_line(e)
    _forget_the_record(tmp_path)  # an older file: the shapes still tell
    with pytest.raises(CheckpointError, match=r"tensor 'E' has shape \(64, 16\), the config needs \(128, 16\)") as e:
        BDH.from_pretrained(tmp_path)
    _one_line(e)


def test_a_config_asking_for_a_huge_model_is_refused_before_anything_is_allocated(tmp_path):
    tiny_model().save_pretrained(tmp_path)
    _forget_the_record(tmp_path)  # no record to compare: the shapes, from a model built on the meta device
    _edit_config(tmp_path, n_neurons=10**12)
    with pytest.raises(CheckpointError, match=r"tensor 'E' has shape \(64, 16\), the config needs \(1000000000000,"):
        BDH.from_pretrained(tmp_path)


@pytest.mark.parametrize(
    "field, value",
    [("damping", 0.5), ("ungated", True), ("positional", "none"), ("separate_keys", True), ("causal", False)],
)
def test_an_edit_that_keeps_the_shapes_but_changes_what_the_weights_mean_is_refused(tmp_path, field, value):
    tiny_model().save_pretrained(tmp_path)
    before = json.loads((tmp_path / "config.json").read_text())[field]
    _edit_config(tmp_path, **{field: value})
    with pytest.raises(CheckpointError, match=rf"config.json: {field} is .* but the weights were saved with") as e:
        BDH.from_pretrained(tmp_path)
    assert f"set {field} back to {before!r}" in _one_line(e)


def test_another_n_layer_loads_with_a_warning(tmp_path):
    model = tiny_model()
    model.save_pretrained(tmp_path)
    _edit_config(tmp_path, n_layer=model.config.n_layer + 1)
    with pytest.warns(bdh.errors.ConfigWarning, match=r"n_layer is \d+ but the weights were saved with \d+") as w:
        again = BDH.from_pretrained(tmp_path)
    assert len(w) == 1 and again.config.n_layer == model.config.n_layer + 1
    _edit_config(tmp_path, n_layer=model.config.n_layer)  # as saved: no warning
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        BDH.from_pretrained(tmp_path)
    _edit_config(tmp_path, chunk_size=7)  # a runtime field: how the model runs, free to change
    BDH.from_pretrained(tmp_path)


@pytest.mark.parametrize(
    "edit, match",
    [
        (lambda c: c.update(model_type="llama"), "unknown model_type 'llama'"),
        (lambda c: c.update(format_version=99), "format_version 99 is not supported"),
        (lambda c: c.update(n_layers=3), "unknown field 'n_layers'"),
        (lambda c: c.update(attention="flash"), "BDHConfig.attention"),
    ],
)
def test_bad_config_json(tmp_path, edit, match):
    tiny_model().save_pretrained(tmp_path)
    cfg = json.loads((tmp_path / "config.json").read_text())
    edit(cfg)
    (tmp_path / "config.json").write_text(json.dumps(cfg))
    with pytest.raises(CheckpointError, match=match) as e:
        BDH.from_pretrained(tmp_path)
    assert "config.json" in _one_line(e)


def test_invalid_json(tmp_path):
    tiny_model().save_pretrained(tmp_path)
    (tmp_path / "config.json").write_text("{not json")
    with pytest.raises(CheckpointError, match="not valid JSON"):
        BDH.from_pretrained(tmp_path)


def test_extra_tensor_is_refused(tmp_path):
    from safetensors.torch import load_file, save_file

    tiny_model().save_pretrained(tmp_path)
    tensors = load_file(tmp_path / "model.safetensors")
    tensors["lm_gate"] = torch.zeros(16, 1)
    save_file(tensors, tmp_path / "model.safetensors")
    with pytest.raises(CheckpointError, match="unexpected tensor 'lm_gate'"):
        BDH.from_pretrained(tmp_path)


def test_load_finds_registered_baselines_without_importing_them(tmp_path):
    """bdh.load of a baseline's folder works in a fresh process that never imported bdh.baselines."""
    import subprocess
    import sys

    from bdh.baselines.gpt import GPT, GPTConfig

    GPT(GPTConfig(vocab_size=16, seq_len=8, n_layer=1, n_embd=16, n_head=2)).save_pretrained(tmp_path)
    code = f"import bdh, sys; m = bdh.load({str(tmp_path)!r}); print(type(m).__name__, 'bdh.baselines' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.split() == ["GPT", "True"]


def test_runtime_options_are_chosen_at_load_and_the_architecture_is_not(tmp_path):
    import bdh
    from bdh.errors import UserError

    torch.manual_seed(0)
    model = bdh.BDH(bdh.BDHConfig(n_layer=2, n_embd=16, n_head=2, n_neurons=64, vocab_size=32)).eval()
    folder = model.save_pretrained(tmp_path / "m")
    chunked = bdh.load_pretrained(folder, attention="chunked", chunk_size=4)
    assert chunked.config.attention == "chunked" and chunked.config.chunk_size == 4
    idx = torch.randint(0, 32, (2, 11))
    with torch.no_grad():
        # the same weights through another attention form: equal up to float summation order
        torch.testing.assert_close(chunked(idx), model(idx), atol=1e-5, rtol=1e-5)
    with pytest.raises(UserError, match="'n_layer' is not a runtime option of BDH"):
        bdh.load_pretrained(folder, n_layer=3)
    with pytest.raises(UserError, match="BDHConfig.attention"):
        bdh.load_pretrained(folder, attention="flash")


#: runtime fields, none at its default (BDHConfig: dropout 0.1, dropout_rng auto, attention parallel, chunk 128)
RUNTIME = {"attention": "chunked", "chunk_size": 4, "dropout": 0.25, "dropout_rng": "torch"}


def _fields(config: BDHConfig) -> dict:
    return {f.name: getattr(config, f.name) for f in dataclasses.fields(config) if f.init}


def test_every_field_round_trips_through_a_model_folder(tmp_path):
    """config.json keeps every field, as Hugging Face's keeps dropout: a model loads as it was saved."""
    default = _fields(BDHConfig())
    changed = {k for fields in EVERY_FIELD for k, v in _fields(BDHConfig(**fields)).items() if v != default[k]}
    assert changed == set(default)  # EVERY_FIELD sets each field (a new field must be added there)
    for i, fields in enumerate(EVERY_FIELD):
        model = BDH(BDHConfig(**fields))
        folder = model.save_pretrained(tmp_path / f"m{i}")
        saved = json.loads((folder / "config.json").read_text())
        assert set(saved) == {"model_type", "format_version", "bdh_version"} | set(model.config.to_dict())
        for back in (BDH.from_pretrained(folder), bdh.load_pretrained(folder)):
            assert _fields(back.config) == _fields(model.config)
            assert back.config.n == model.config.n


def test_an_architecture_only_config_json_loads_with_the_default_runtime_fields(tmp_path):
    """A folder written while config.json held the architecture only (no runtime field): their defaults."""
    model = tiny_model(**RUNTIME)
    folder = model.save_pretrained(tmp_path / "m")
    saved = json.loads((folder / "config.json").read_text())
    (folder / "config.json").write_text(json.dumps({k: v for k, v in saved.items() if k not in RUNTIME}))
    back = bdh.load_pretrained(folder)
    assert {k: getattr(back.config, k) for k in RUNTIME} == {k: getattr(BDHConfig(), k) for k in RUNTIME}
    assert architecture(back.config) == architecture(model.config)


def test_an_old_config_json_with_runtime_fields_loads_with_their_values(tmp_path):
    """A folder written before config.json held the architecture only: every field, runtime ones too."""
    model = tiny_model(**RUNTIME)
    folder = tmp_path / "old"
    model.save_pretrained(folder)
    old = {"model_type": "bdh", "format_version": 1, "bdh_version": "0.1.0", **model.config.to_dict()}
    assert set(RUNTIME) <= set(old)
    (folder / "config.json").write_text(json.dumps(old, indent=2, sort_keys=True))
    loaded = bdh.load_pretrained(folder)
    assert {k: getattr(loaded.config, k) for k in RUNTIME} == RUNTIME
    assert loaded.config == model.config
    overridden = bdh.load_pretrained(folder, attention="recurrent", dropout=0.0)  # the load overrides the file
    assert (overridden.config.attention, overridden.config.dropout) == ("recurrent", 0.0)
    assert (overridden.config.chunk_size, overridden.config.dropout_rng) == (4, "torch")  # the others: the file's
    idx = torch.randint(0, 256, (2, 9))
    with torch.no_grad():  # the same weights through the recurrent form: equal up to float summation order
        torch.testing.assert_close(overridden(idx), model(idx), atol=1e-5, rtol=1e-5)
    again = overridden.save_pretrained(tmp_path / "again")  # saved again: every field, as it now runs
    assert bdh.load_pretrained(again).config == overridden.config


def test_a_run_folder_is_refused_naming_its_best_model(tmp_path):
    """``BDH.from_pretrained(RUN)`` / ``bdh.load_pretrained(RUN)`` say which folder to pass, as the Hugging Face
    loader does (`bdh.model.io.refuse_run_folder`), instead of failing on a config.json that is not there."""
    run = tmp_path / "run"
    tiny_model().save_pretrained(run / "best")
    (run / "config.yaml").write_text("model:\n  name: bdh\n")
    for load in (BDH.from_pretrained, bdh.load_pretrained):
        with pytest.raises(bdh.errors.UserError) as exc:
            load(run)
        expected = f"{run} is a bdh run folder, not a model folder: pass {run / 'best'} to from_pretrained"
        assert _one_line(exc) == expected
    assert BDH.from_pretrained(run / "best").config == tiny_model().config
    (run / "best" / "config.json").unlink()  # before its first evaluation: no model yet
    with pytest.raises(bdh.errors.UserError, match="no saved model yet"):
        BDH.from_pretrained(run)
