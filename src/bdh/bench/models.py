"""The models a suite compares, sized to one parameter count: BDH (`REFERENCE`) from the width, every other registered
model by ``for_budget``, BDH's ablated rows (`BDH_VARIANTS`); names read from the registry when a sweep is built."""

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

#: BDH with another state or positions (docs/long-context.md): a row's name -> the `BDHConfig` fields it sets
#: (the state size of BDH; ``bdh-nopos-lg`` is the state that keeps a fact; the last four add its state rules,
#: h to h (D + 1) parameters, docs/model.md)
BDH_STATES: dict[str, dict[str, Any]] = {
    "bdh-alibi": {"damping": "alibi"},
    "bdh-nopos": {"positional": "none"},
    "bdh-lg": {"damping": "local-global"},
    "bdh-nopos-lg": {"positional": "none", "damping": "local-global"},
    "bdh-nopos-lg-learned": {"positional": "none", "damping": "local-global", "learn_damping": True},
    "bdh-nopos-lg-gate": {"positional": "none", "damping": "local-global", "decay_gate": True},
    "bdh-nopos-lg-delta": {"positional": "none", "damping": "local-global", "state_write": "delta"},
    "bdh-nopos-lg-delta-hard": {
        "positional": "none",
        "damping": "local-global",
        "state_write": "delta",
        "write_gate": "hard",
    },
    "bdh-nopos-lg-delta-top1": {
        "positional": "none",
        "damping": "local-global",
        "state_write": "delta",
        "write_topk": 1,
    },
    "bdh-nopos-lg-delta-centred": {
        "positional": "none",
        "damping": "local-global",
        "state_write": "delta",
        "write_keys": "centred",
    },
    "bdh-nopos-lg-delta-signed": {
        "positional": "none",
        "damping": "local-global",
        "state_write": "delta",
        "write_keys": "signed",
    },
    # the sigmoid gate annealed to the hard one over the first 1,000 training passes (the recall recipe's first half
    # of its 2,000 short steps), hard from then on
    "bdh-nopos-lg-delta-anneal": {
        "positional": "none",
        "damping": "local-global",
        "state_write": "delta",
        "write_gate": "annealed",
        "gate_anneal_steps": 1000,
    },
}

#: zoo rows with options (docs/long-context.md, the capacity map): a row's name -> (the registered model it is,
#: the config fields it sets); sized as that model is, by parameters or (`bdh.bench.state_match`) by state
ZOO_VARIANTS: dict[str, tuple[str, dict[str, Any]]] = {
    # Gated DeltaNet whose forget gate starts near 1: softplus(dt_bias) log-uniform in [1e-5, 1e-4], so at A in
    # [1, 16] half-lives of 433 to 69,000 tokens (Mamba2's [1e-3, 0.1] gives 0.4 to 700)
    "gated-deltanet-slow": ("gated-deltanet", {"dt_min": 1e-5, "dt_max": 1e-4, "dt_init_floor": 1e-5}),
    # DeltaNet with Gated DeltaNet's output gate and no decay: the other of the two differences between them
    "deltanet-outgate": ("deltanet", {"output_gate": True}),
    # GLA whose gate forgets 16x slower: alpha = sigmoid(.)^(1 / 256), a half-life of 256 tokens at a zero logit
    # (GLA's tau = 16: 16 tokens), about the recall recipe's longest training gap (224)
    "gla-slow": ("gla", {"gate_tau": 256.0}),
}

#: what `bench_models` accepts, in words (said when a suite's ``models`` is refused)
ACCEPTED = (
    "registered models whose config has for_budget and whose class has state_size(), BDH's ablated rows and its "
    "state variants, the zoo's rows with options"
)


def bench_models() -> tuple[str, ...]:
    """Every name a suite's ``models`` may give, from the registry when called: reference, comparable
    models, variants."""
    from bdh.registry import get_model, names

    others = [n for n in names("model") if n != REFERENCE and comparable(get_model(n))]
    return (REFERENCE, *others, *BDH_VARIANTS, *BDH_STATES, *ZOO_VARIANTS)


def zoo_row(model: str) -> tuple[str, dict[str, Any]]:
    """(the registered model, the fields it sets) of a row: a `ZOO_VARIANTS` entry, or ``model`` with none."""
    return ZOO_VARIANTS.get(model, (model, {}))


def comparable(model_class: type) -> bool:
    """Whether the bench can compare a model class with BDH (`incomparable` says why not)."""
    return incomparable(model_class) is None


def incomparable(model_class: type) -> str | None:
    """Why a model class cannot be compared with BDH (no ``for_budget`` or ``state_size()``), or None."""
    config_class = getattr(model_class, "config_class", None)
    if not callable(getattr(config_class, "for_budget", None)):
        name = getattr(config_class, "__name__", repr(config_class))
        return f"{name} has no for_budget classmethod, so the bench cannot size it to BDH's parameter count"
    if not callable(getattr(model_class, "state_size", None)):
        return f"{model_class.__name__} has no state_size() method, the state_size of every result row"
    return None


def suite_models(suite: str, *names: str) -> tuple[str, ...]:
    """``names`` checked against `bench_models`: a one-line `BenchError` naming ``suite`` and what is accepted."""
    known = bench_models()
    unknown = [n for n in names if n not in known]
    if unknown:
        raise BenchError(
            f"{suite}: {', '.join(map(repr, unknown))} is not a registered model the bench can size "
            f"(known: {', '.join(known)})"
        )
    return names


def budget_config(
    model: str, params: int, *, vocab_size: int, seq_len: int, n_layer: int, n_head: int, causal: bool, **extra: Any
) -> Any:
    """The config of ``model`` with the parameter count closest to ``params`` (``for_budget``; ``extra``:
    its options)."""
    from bdh.registry import get_model

    model_class = get_model(model)
    why = incomparable(model_class)
    if why is not None:
        raise BenchError(f"model {model!r}: {why} (CONTRIBUTING.md, 'Adding a model')")
    return model_class.config_class.for_budget(
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
    """One run's model section: BDH at ``width``, or ``model`` sized to BDH's count with ``options[model]``."""
    reference = bdh_section(width, n_layer=n_layer, n_head=n_head, neuron_mult=neuron_mult, causal=causal)
    if model == REFERENCE:
        return reference
    if model in BDH_VARIANTS:
        return variant_section(reference, BDH_VARIANTS[model], vocab_size)
    if model in BDH_STATES:
        return {**reference, **BDH_STATES[model]}
    base, fields = zoo_row(model)
    cfg = budget_config(
        base,
        bdh_params(reference, vocab_size),
        vocab_size=vocab_size,
        seq_len=seq_len,
        n_layer=n_layer,
        n_head=n_head,
        causal=causal,
        **{**(options or {}).get(base, {}), **fields},
    )
    return section_of(cfg, base)


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
    """BDH's ``reference`` section with ``ablation`` on; the unshared row narrowed to the reference's count."""
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
