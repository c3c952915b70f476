"""The models ``bdh experiment relatives`` compares: registered models (`bdh.registry`) and BDH's ablated rows
(`bdh.bench.models.BDH_VARIANTS`), every one but BDH sized to BDH's parameter count
(`bdh.bench.models.sized_section`). Adding a model is one line: its name in `MODELS`."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from bdh.bench.models import REFERENCE, sized_section, suite_models
from bdh.errors import UserError

#: the models of the comparison, in table order: BDH (the reference), attention, the zoo, BDH taken apart
MODELS: tuple[str, ...] = (
    "bdh",
    "gpt",
    "baseconv",
    "based",
    "gla",
    "mamba",
    "hyena",
    "rwkv",
    "bdh-qk",
    "bdh-nogate",
    "bdh-noexpand",
    "bdh-unshared",
)


def check_labels(labels: Iterable[str]) -> None:
    """Every name known to the bench (`bdh.bench.models.suite_models`), none repeated, and BDH among them (every
    other model is sized to it and judged against it); a one-line error naming ``relatives.models``."""
    labels = list(labels)
    try:
        suite_models("relatives.models", *labels)
    except UserError as exc:
        raise UserError(f"{exc}; give registered models or BDH's ablated rows") from None
    if len(set(labels)) != len(labels):
        raise UserError(f"relatives.models: repeated names in {labels}")
    if REFERENCE not in labels:
        raise UserError(f"relatives.models: {REFERENCE!r} must be one of the models (the others are judged against it)")


def section(
    label: str, width: int, *, vocab_size: int, seq_len: int, n_layer: int, n_head: int, neuron_mult: int
) -> dict[str, Any]:
    """The model section of ``label`` at the sweep's ``width`` (BDH's ``n_embd``; `bdh.bench.models.sized_section`)."""
    return sized_section(
        label,
        width,
        vocab_size=vocab_size,
        seq_len=seq_len,
        n_layer=n_layer,
        n_head=n_head,
        neuron_mult=neuron_mult,
        causal=True,
    )
