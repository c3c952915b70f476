"""Official pathwaycom/bdh checkpoints: names, shapes, round trip, safe loading, bdh convert."""

import json
import pickle

import pytest
import torch

from bdh import BDH, CheckpointError, interop
from bdh.cli import main
from bdh.model.kernels.naive import naive_official_forward

from .helpers import tiny_model

SMALL = dict(n_layer=2, n_embd=16, n_head=2, mlp_internal_dim_multiplier=4, vocab_size=256, dropout=0.0)


def _sd():
    torch.manual_seed(5)
    model = interop.from_official(
        interop.to_official(tiny_model(n_neurons=None, mlp_internal_dim_multiplier=4, n_head=2, n_embd=16)), **SMALL
    )
    return interop.to_official(model)


def test_official_names_and_shapes():
    sd = _sd()
    assert {k: tuple(v.shape) for k, v in sd.items()} == {
        "decoder": (64, 16),
        "encoder": (2, 16, 32),
        "encoder_v": (2, 16, 32),
        "embed.weight": (256, 16),
        "lm_head": (16, 256),
        "attn.freqs": (1, 1, 1, 32),
    }


def test_round_trip_is_exact():
    model = tiny_model(n_neurons=None, mlp_internal_dim_multiplier=4)
    back = interop.from_official(interop.to_official(model), **SMALL)
    for name, tensor in model.state_dict().items():
        assert torch.equal(back.state_dict()[name], tensor), name
    assert interop.official_config(back) == SMALL


def test_compile_prefix_is_stripped_and_lm_gate_ignored():
    sd = {"_orig_mod." + k: v for k, v in _sd().items()}
    sd["_orig_mod.lm_gate"] = torch.zeros(16, 1)
    model = interop.from_official(sd, **SMALL).eval()
    idx = torch.randint(0, 256, (1, 12))
    assert torch.allclose(
        model(idx), naive_official_forward(interop.to_official(model), idx, 2, 2), rtol=1e-5, atol=1e-6
    )


def test_checkpoint_without_freqs_buffer_loads():
    sd = _sd()
    del sd["attn.freqs"]
    assert torch.equal(
        interop.from_official(sd, **SMALL).freqs, BDH(interop.from_official(_sd(), **SMALL).config).freqs
    )


@pytest.mark.parametrize(
    "edit, match",
    [
        (lambda sd: sd.pop("encoder"), "missing tensor 'encoder'"),
        (lambda sd: sd.update(bias=torch.zeros(3)), "unexpected tensor 'bias'"),
        (lambda sd: sd.update(encoder=torch.zeros(2, 16, 30)), r"'encoder' has shape \(2, 16, 30\)"),
    ],
)
def test_bad_official_state_dicts(edit, match):
    sd = _sd()
    edit(sd)
    with pytest.raises(CheckpointError, match=match):
        interop.from_official(sd, **SMALL)


def test_to_official_refuses_models_the_official_code_cannot_express():
    with pytest.raises(ValueError, match="official"):
        interop.to_official(tiny_model(damping=0.9))


def test_convert_command_writes_a_model_folder(tmp_path, capsys):
    sd = _sd()
    torch.save(
        {"model": sd, "config": {"n_layer": 2, "n_embd": 16, "n_head": 2, "mlp_internal_dim_multiplier": 4}},
        tmp_path / "ckpt.pt",
    )
    assert main(["convert", str(tmp_path / "ckpt.pt"), str(tmp_path / "out")]) == 0
    assert "wrote" in capsys.readouterr().out
    saved = json.loads((tmp_path / "out" / "config.json").read_text())
    assert saved["n_layer"] == 2 and saved["dropout"] == 0.1  # every field: the official dropout default
    model = BDH.from_pretrained(tmp_path / "out")
    idx = torch.randint(0, 256, (2, 9))
    assert torch.allclose(model(idx), naive_official_forward(sd, idx, 2, 2), rtol=1e-5, atol=1e-6)


class _Evil:
    def __reduce__(self):
        return (print, ("code ran",))


def test_convert_never_unpickles_code(tmp_path, capsys):
    with open(tmp_path / "evil.pt", "wb") as f:
        pickle.dump({"encoder": _Evil()}, f, protocol=2)
    assert main(["convert", str(tmp_path / "evil.pt"), str(tmp_path / "out")]) == 2
    out = capsys.readouterr()
    assert "code ran" not in out.out
    assert "weights-only" in out.err and out.err.count("\n") == 1
    assert not (tmp_path / "out").exists()


def test_convert_reports_a_wrong_config_in_one_line(tmp_path, capsys):
    torch.save(_sd(), tmp_path / "ckpt.pt")
    assert main(["convert", str(tmp_path / "ckpt.pt"), str(tmp_path / "out")]) == 2  # official defaults: D=256
    err = capsys.readouterr().err
    assert "has shape" in err and err.count("\n") == 1
