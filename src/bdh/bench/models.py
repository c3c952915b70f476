"""The models a ``bdh bench`` suite compares, sized to one parameter count.

The reference, BDH (`REFERENCE`), is built from the sweep's width (`bdh_section`); every other registered model
is sized to BDH's parameter count at that width by its config class's ``for_budget`` (the protocol
`bdh.sizing.BudgetSized`, `budget_config`), so nothing here names a model but the reference.
"""

from __future__ import annotations

from typing import Any

from .spec import BenchError

#: the model every suite sizes the others to: built from the width (`bdh_section`), its count is the budget
REFERENCE = "bdh"


def suite_models(suite: str, *names: str) -> tuple[str, ...]:
    """The models a suite compares (the suite's choice), checked against `bdh.registry`: a one-line
    `BenchError` for a name it does not know. The reference (`REFERENCE`) is built from the width; every other
    model is sized to its parameter count by its config class's ``for_budget`` (`budget_config`)."""
    from bdh.registry import names as registered

    unknown = [n for n in names if n not in registered("model")]
    if unknown:
        raise BenchError(f"{suite}: {', '.join(map(repr, unknown))} is not a registered model")
    return names


def budget_config(
    model: str, params: int, *, vocab_size: int, seq_len: int, n_layer: int, n_head: int, causal: bool, **extra: Any
) -> Any:
    """The config of the registered ``model`` whose parameter count is closest to ``params``: its config class's
    ``for_budget`` (the protocol `bdh.sizing.BudgetSized`); ``extra``: the model's own options."""
    from bdh.registry import get_model

    config_class = get_model(model).config_class
    if not callable(getattr(config_class, "for_budget", None)):
        raise BenchError(
            f"model {model!r}: {config_class.__name__} has no for_budget classmethod, so the bench cannot size it "
            "to BDH's parameter count (CONTRIBUTING.md, 'Adding a model')"
        )
    return config_class.for_budget(
        params, vocab_size=vocab_size, seq_len=seq_len, n_layer=n_layer, n_head=n_head, causal=causal, **extra
    )


def sized_section(
    model: str,
    width: int,
    *,
    vocab_size: int,
    seq_len: int,
    n_layer: int,
    n_head: int,
    neuron_mult: int,
    causal: bool,
    options: dict[str, dict[str, Any]] | None = None,
    match_reference: bool = False,
) -> dict[str, Any]:
    """The model section of one run: the reference (BDH) at ``width`` (`bdh_section`), or ``model`` sized to
    the reference's parameter count by `budget_config`, with ``options[model]`` as its own fields (e.g.
    ``{"hyperset": {"time_freq": 64}}``). ``seq_len``: the longest length the model sees.

    The reference with options of its own (a variant of BDH, e.g. ``{"bdh": {"damping": "alibi"}}``) is built at
    ``width`` with them (its own parameter count), or with ``match_reference`` sized to the official reference's
    count by its config class's ``for_budget`` like any other model, given the reference's neuron expansion as
    ``mlp_internal_dim_multiplier = neuron_mult`` (which the variant's options may replace, or null)."""
    reference = bdh_section(width, n_layer=n_layer, n_head=n_head, neuron_mult=neuron_mult, causal=causal)
    own = (options or {}).get(model, {})
    if model == REFERENCE and not match_reference:
        return {**reference, **own}
    if model == REFERENCE:
        own = {"mlp_internal_dim_multiplier": neuron_mult, **own}
    cfg = budget_config(
        model,
        bdh_params(reference, vocab_size),
        vocab_size=vocab_size,
        seq_len=seq_len,
        n_layer=n_layer,
        n_head=n_head,
        causal=causal,
        **own,
    )
    return section_of(cfg, model)


def bdh_section(width: int, *, n_layer: int, n_head: int, neuron_mult: int, causal: bool) -> dict[str, Any]:
    """BDH's model section at a width: ``n_embd = width``, ``n_neurons = neuron_mult * width``."""
    return {
        "name": "bdh",
        "n_layer": n_layer,
        "n_embd": width,
        "n_head": n_head,
        "n_neurons": neuron_mult * width,
        "dropout": 0.0,
        "causal": causal,
    }


def bdh_params(section: dict[str, Any], vocab_size: int) -> int:
    """BDH's parameter count for a model section and a vocabulary."""
    from bdh.model.config import BDHConfig

    fields = {k: v for k, v in section.items() if k != "name"}
    return BDHConfig(**{**fields, "vocab_size": vocab_size}).num_params()


def section_of(cfg: Any, name: str) -> dict[str, Any]:
    """A model section (``name`` + the config's fields) from a baseline config object."""
    return {"name": name, **cfg.to_dict()}
