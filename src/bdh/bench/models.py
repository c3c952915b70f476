"""The models a ``bdh bench`` suite compares, sized to one parameter count.

The reference, BDH (`REFERENCE`), is built from the sweep's width (`bdh_section`); every other registered model
is sized to BDH's parameter count at that width by its config class's ``for_budget`` (the protocol
`bdh.sizing.BudgetSized`, `budget_config`), so nothing here names a model but the reference.

BDH taken apart (`BDH_VARIANTS`, the ablations of `bdh.model.config.ABLATIONS`) gives rows of their own, named
``bdh-qk`` and so on: BDH's section at the width with one ablation turned on (`variant_section`).
"""

from __future__ import annotations

from typing import Any

from .spec import BenchError

#: the model every suite sizes the others to: built from the width (`bdh_section`), its count is the budget
REFERENCE = "bdh"
#: BDH taken apart: a row's name -> the `BDHConfig` ablation it turns on (the model is BDH, ``name: bdh``)
BDH_VARIANTS = {
    "bdh-qk": "separate_keys",
    "bdh-nogate": "ungated",
    "bdh-noexpand": "no_expansion",
    "bdh-unshared": "unshared_layers",
}


def suite_models(suite: str, *names: str) -> tuple[str, ...]:
    """The models a suite compares (the suite's choice), checked against `bdh.registry`: a one-line
    `BenchError` for a name it does not know. The reference (`REFERENCE`) is built from the width; every other
    model is sized to its parameter count by its config class's ``for_budget`` (`budget_config`)."""
    from bdh.registry import names as registered

    unknown = [n for n in names if n not in registered("model") and n not in BDH_VARIANTS]
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
) -> dict[str, Any]:
    """The model section of one run: the reference (BDH) at ``width`` (`bdh_section`), or ``model`` sized to
    the reference's parameter count by `budget_config`, with ``options[model]`` as its own fields (e.g.
    ``{"hyperset": {"time_freq": 64}}``). ``seq_len``: the longest length the model sees."""
    reference = bdh_section(width, n_layer=n_layer, n_head=n_head, neuron_mult=neuron_mult, causal=causal)
    if model == REFERENCE:
        return reference
    if model in BDH_VARIANTS:
        return variant_section(reference, BDH_VARIANTS[model], vocab_size)
    cfg = budget_config(
        model,
        bdh_params(reference, vocab_size),
        vocab_size=vocab_size,
        seq_len=seq_len,
        n_layer=n_layer,
        n_head=n_head,
        causal=causal,
        **(options or {}).get(model, {}),
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


def variant_section(reference: dict[str, Any], ablation: str, vocab_size: int) -> dict[str, Any]:
    """BDH's model section ``reference`` with the ablation ``ablation`` turned on, at the same width: the same
    parameters and state with the gate removed; n D more parameters with a key encoder; n = h D (fewer parameters,
    a smaller state) without the neuron expansion. Unshared layers would have L times the encoder parameters, so
    that row is narrowed to the reference's count instead (`bdh.model.sizes.match_budget`, the expansion kept)."""
    from bdh.model.config import BDHConfig
    from bdh.model.sizes import match_budget

    section = {**reference, ablation: True}
    if ablation == "no_expansion":
        section.pop("n_neurons", None)
    if ablation != "unshared_layers":
        return section
    fields = {k: v for k, v in section.items() if k != "name"}
    matched = match_budget(BDHConfig(**{**fields, "vocab_size": vocab_size}), bdh_params(reference, vocab_size))
    return section_of(matched, REFERENCE)


def bdh_params(section: dict[str, Any], vocab_size: int) -> int:
    """BDH's parameter count for a model section and a vocabulary."""
    from bdh.model.config import BDHConfig

    fields = {k: v for k, v in section.items() if k != "name"}
    return BDHConfig(**{**fields, "vocab_size": vocab_size}).num_params()


def section_of(cfg: Any, name: str) -> dict[str, Any]:
    """A model section (``name`` + the config's fields) from a baseline config object."""
    return {"name": name, **cfg.to_dict()}
