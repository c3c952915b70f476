"""State-matched zoo rows (`bdh.bench.state_match`): the chosen key width is the one whose state is nearest the
target, checked against every candidate built directly; the length experiment's ``zoo_match: state`` uses it."""

from __future__ import annotations

import math

import pytest

from bdh.bench.spec import BenchError
from bdh.bench.state_match import KEY_WIDTHS, state_matched_config
from bdh.experiments.length.config import Config
from bdh.registry import get_model

FIELDS = {"vocab_size": 32, "seq_len": 32, "n_layer": 1, "n_head": 2, "causal": True}


def _state(model: str, config) -> int:
    return get_model(model)(config).state_size()


@pytest.mark.parametrize("model", sorted(KEY_WIDTHS))
@pytest.mark.parametrize("target", [300, 4096])
def test_nearest_state_among_the_candidates(model, target):
    config = state_matched_config(model, target, width=16, **FIELDS)
    field, values = KEY_WIDTHS[model]
    assert config.n_embd == 16
    misses = []
    for value in values:  # every candidate that builds, by hand
        try:
            other = get_model(model).config_class(**{**config.to_dict(), field: value})
        except ValueError:
            continue
        misses.append(abs(math.log(_state(model, other) / target)))
    assert abs(math.log(_state(model, config) / target)) == pytest.approx(min(misses))


def test_a_model_without_a_key_width_is_refused_in_one_line():
    with pytest.raises(BenchError, match="has none to set") as info:
        state_matched_config("gpt", 1024, width=16, **FIELDS)
    assert "\n" not in str(info.value)


def test_length_zoo_match_state_gives_bdh_state_and_keeps_the_rest_by_params():
    kw = {"models": ("bdh", "deltanet", "mamba", "gpt"), "tasks": ("recall_gap",), "seq_len": 32, "max_length": 64}
    kw |= {"width": 16, "neuron_mult": 8, "n_head": 2, "recall_vocab": 32, "recall_pairs": 2}
    by_state, by_params = Config(**kw, zoo_match="state"), Config(**kw)
    bdh = by_state.model_section("bdh", "recall_gap")
    target = bdh["n_neurons"] * bdh["n_embd"]  # BDH's state per layer, n D (paper section 4.1)
    for model in ("deltanet", "mamba"):
        section = by_state.model_section(model, "recall_gap")
        name = section.pop("name")
        assert _state(name, get_model(name).config_class(**section)) == target  # both reach n D exactly here
    assert by_state.model_section("gpt", "recall_gap") == by_params.model_section("gpt", "recall_gap")
    with pytest.raises(ValueError, match="zoo_match"):
        Config(**kw, zoo_match="both")


def test_a_zoo_row_with_options_is_state_matched_as_its_model_with_its_fields():
    """`bdh.bench.models.ZOO_VARIANTS` rows: the same key width as the model they vary, their fields set."""
    from bdh.bench.models import ZOO_VARIANTS

    kw = {"models": ("bdh", *ZOO_VARIANTS), "tasks": ("recall_gap",), "seq_len": 32, "max_length": 64}
    kw |= {"width": 16, "neuron_mult": 8, "n_head": 2, "recall_vocab": 32, "recall_pairs": 2, "zoo_match": "state"}
    config = Config(**kw)
    for row, (base, fields) in ZOO_VARIANTS.items():
        got, plain = config.model_section(row, "recall_gap"), config.model_section(base, "recall_gap")
        assert got["name"] == base and got == {**plain, **fields}
