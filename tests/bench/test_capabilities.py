"""What the bench needs of a model (weight sharing, depth) is what the model class declares, never guessed from its
name or its config's fields (CONTRIBUTING.md, "Adding a model")."""

from __future__ import annotations

import types

import pytest
from torch import nn

from bdh.bench.runner import result_row
from bdh.bench.spec import RunSpec
from bdh.bench.sudoku import weight_shared


class Declares(nn.Module):
    """A stand-in model that declares both: a depth of 7 passes of one shared layer."""

    depth = 7
    weight_shared = True

    def __init__(self) -> None:
        super().__init__()
        self.w = nn.Linear(3, 3)

    def state_size(self) -> int:
        return 5


class HyperSET(Declares):
    """Named as a weight-shared baseline, with the fields of one, but declaring nothing: nothing is assumed."""

    depth = property(lambda self: (_ for _ in ()).throw(AttributeError("depth")))  # declared absent
    weight_shared = False


def _row(model: nn.Module, section: dict) -> dict:
    spec = RunSpec("t", "m", "S", {}, 32, 1e-3, 0, section, {}, 5, 2)
    result = types.SimpleNamespace(model=model, step=5, tokens=100, seconds=1.0)
    return result_row(spec, {"model": section, "task": {}}, result, {}, wall=1.0, cpu_train=1.0)


def test_the_depth_column_and_weight_sharing_are_what_the_class_declares():
    row = _row(Declares(), {"name": "m", "n_embd": 3})
    assert row["n_layer"] == 7 and weight_shared(Declares()) and row["params"] == 12 and row["state_size"] == 5
    undeclared = _row(HyperSET(), {"name": "hyperset", "n_embd": 3, "n_layer": 4, "n_recur": 24})
    assert undeclared["n_layer"] == "" and not weight_shared(HyperSET())


@pytest.mark.parametrize("name", ["bdh", "gpt", "hyperset", "baseconv", "based", "gla", "mamba", "hyena", "rwkv"])
def test_every_registered_model_declares_the_depth_its_config_gives(name):
    from bdh.registry import get_model

    cls = get_model(name)
    model = cls(cls.config_class())  # the defaults: small models
    expected = model.config.n_recur if name == "hyperset" else model.config.n_layer
    assert model.depth == expected


#: the state each registered model reads through (`bdh.model_api.carries_state` / `state_grows`)
STATE_KINDS = {
    "bdh": "fixed",
    "mamba": "fixed",
    "gla": "fixed",
    "rwkv": "fixed",
    "based": "fixed",
    "gpt": "grows",
    "hyperset": "none",
    "baseconv": "none",
    "hyena": "none",
}


@pytest.mark.parametrize("name", list(STATE_KINDS))
def test_every_registered_model_declares_the_state_it_reads_through(name):
    from bdh.model_api import carries_state, state_grows
    from bdh.registry import get_model

    cls = get_model(name)
    model = cls(cls.config_class())
    kind = "fixed" if carries_state(model) else "grows" if state_grows(model) else "none"
    assert kind == STATE_KINDS[name] and not (carries_state(model) and state_grows(model))
    if kind != "none":
        assert callable(model.init_state) and callable(model.step)
