"""The models ``bdh experiment relatives`` compares: registered models, and variants of them (BDH taken apart).

An entry of the comparison is named by a label. A label that is a registered model (`bdh.registry`) is that
model: BDH (`REFERENCE`) built from the sweep's width, every other one sized to BDH's parameter count by its
config class's ``for_budget`` (`bdh.bench.models.sized_section`). A label in `VARIANTS` is a registered model
with some of its options set (`Variant`): a BDH ablation is ``Variant("bdh", {<BDHConfig option>: True})``.
Adding a model or an ablation to the comparison is one line: its label in `MODELS` (and, for a variant, its
entry in `VARIANTS`).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from bdh.bench.models import REFERENCE, sized_section
from bdh.errors import UserError


@dataclass(frozen=True)
class Variant:
    """A registered model with some of its options set.

    Attributes:
        model: the registered model (``bdh`` for an ablation of BDH).
        options: its config fields that the variant sets (e.g. ``{"damping": "alibi"}``).
        name: how tables and legends name it (e.g. ``BDH, Q != K``).
        match_params: False: a variant of BDH is built at the sweep's width with its own parameter count (an
            ablation that changes one part and nothing else); True: it is sized to the official BDH's count by its
            config class's ``for_budget`` like any other model (an ablation that removes parameters, as the one
            without neuron expansion, compared at equal parameters).
    """

    model: str
    options: Mapping[str, Any] = field(default_factory=dict)
    name: str = ""
    match_params: bool = False


#: the labels of the comparison, in table order: registered models and `VARIANTS` (BDH first: the reference)
MODELS: tuple[str, ...] = ("bdh", "gpt", "baseconv")
#: the variants the comparison knows, by label (the BDH ablations go here, one line each)
VARIANTS: dict[str, Variant] = {}


def resolve(label: str) -> Variant:
    """The `Variant` a label names: its entry in `VARIANTS`, or the registered model of that name without options.
    A one-line `UserError` for a label that is neither."""
    from bdh.registry import names

    if label in VARIANTS:
        return VARIANTS[label]
    if label in names("model"):
        return Variant(label)
    known = sorted({*names("model"), *VARIANTS})
    raise UserError(
        f"relatives.models: {label!r} is neither a registered model nor a variant; known: {', '.join(known)}"
    )


def check_labels(labels: Iterable[str]) -> None:
    """Every label known (`resolve`), none repeated, and BDH among them (every other model is sized to it and
    judged against it)."""
    labels = list(labels)
    for label in labels:
        resolve(label)
    if len(set(labels)) != len(labels):
        raise UserError(f"relatives.models: repeated labels in {labels}")
    if REFERENCE not in labels:
        raise UserError(f"relatives.models: {REFERENCE!r} must be one of the models (the others are judged against it)")


def section(
    label: str, width: int, *, vocab_size: int, seq_len: int, n_layer: int, n_head: int, neuron_mult: int
) -> dict:
    """The model section of ``label`` at the sweep's ``width`` (BDH's ``n_embd``; `bdh.bench.models.sized_section`)."""
    variant = resolve(label)
    return sized_section(
        variant.model,
        width,
        vocab_size=vocab_size,
        seq_len=seq_len,
        n_layer=n_layer,
        n_head=n_head,
        neuron_mult=neuron_mult,
        causal=True,
        options={variant.model: dict(variant.options)},
        match_reference=variant.match_params,
    )


def display_names(labels: Iterable[str]) -> dict[str, str]:
    """Legend and table names of the labels that are variants with a name of their own."""
    return {label: VARIANTS[label].name for label in labels if label in VARIANTS and VARIANTS[label].name}
