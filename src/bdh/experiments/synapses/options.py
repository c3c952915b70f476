"""What the synapse analysis searches and tests (`SynapseOptions`), and the constants of the procedure."""

from __future__ import annotations

from dataclasses import dataclass

import torch

from bdh.errors import UserError
from bdh.model import BDH
from bdh.tasks.multilingual import CONCEPTS, COUNTRIES, CURRENCIES, LANGUAGES
from bdh.typed_config import TypedConfig, bounded, one_of

#: the paper's numbers (section 6.3): U of the currency synapse, U_opt = 50 * 50, the p bound, r as printed
PAPER = {"U": 2368, "U_opt": 2500, "p_below": 1e-14, "r_reported": 0.86}
#: sentence statistics of a synapse: its value at the sentence end, its largest Hebbian increment
STATISTICS = ("end", "max")
#: seeds of the labelled sets (offsets of the options' seed): search, held-out, figure examples
SEARCH_SEED, HELDOUT_SEED, EXAMPLE_SEED = 10_000, 20_000, 30_000
#: with length matching, contrast sentences are chosen from a pool this many times larger than the set,
#: concept sentences from one POS_POOL times larger, pairs within MATCH_TOLERANCE bytes of each other
POOL, POS_POOL, MATCH_TOLERANCE = 30, 4, 2
#: surface forms per concept (concept key -> language -> text)
SURFACES = {"currency": CURRENCIES, "country": COUNTRIES}


@dataclass(frozen=True)
class SynapseOptions(TypedConfig):
    """What `analyse` searches and tests (the options of ``bdh synapses``; `Config` extends them). Every error names
    the field first (``head: ...``), which ``bdh synapses`` turns into its flag."""

    concept: str = one_of("currency", CONCEPTS)  # ``currency`` or ``country``.
    # l >= 1 (0-based): synapses from the y of layer l-1 to the x of layer l; None picks max(1, floor(5 L / 8)) (the
    # paper reads layer 5 of 8).
    layer: int | None = bounded(None, ge=1, why="layer 0 reads token embeddings and has no sigma")
    head: int = bounded(0, ge=0)  # the head whose N x N block of sigma is searched.
    # language / second_language: the search and main test language, and the cross-language check.
    language: str = one_of("en", LANGUAGES)
    second_language: str = one_of("fr", LANGUAGES)
    # concept sentences and as many contrast sentences in the search set.
    search: int = bounded(200, ge=2, why="sentences per class")
    heldout: int = bounded(50, ge=2, why="sentences per class")  # concept and contrast sentences in each held-out set.
    top_k: int = bounded(5, ge=1)  # synapses validated and reported per search.
    # the sentence score the headline synapse is chosen by (``end`` or ``max``); both are reported.
    statistic: str = one_of("end", STATISTICS)
    rotate: bool = False  # include the RoPE rotation of Eq. 16 in the end-of-sentence value.
    match_length: bool = True  # length-match the contrast sentences to the concept sentences (`length_matched`).
    prefix: bool = True  # read each sentence after its ``<F:xx>`` language tag (else the bare sentence).
    seed: int = bounded(0, ge=0)  # seeds the sentence sets, the label shuffle and the untrained model.
    lexicon_seed: int = bounded(0, ge=0)  # the word mappings the model's corpus was made with.
    # steps larger than this fraction of the largest step are marked ``*`` (Fig. 12).
    star_fraction: float = bounded(0.05, gt=0, lt=1)

    @classmethod
    def _key(cls, field: str) -> str:
        return field  # ``bdh synapses`` turns the field into its flag

    def __post_init__(self) -> None:
        super().__post_init__()  # the declared ranges
        if self.language == self.second_language:
            self._fail("second_language", f"must differ from language ({self.language})")
        for name in ("rotate", "match_length", "prefix"):
            self._check_bool(name)

    def resolved_layer(self, n_layer: int) -> int:
        """The layer to read, checked against a model of ``n_layer`` layers."""
        if n_layer < 2:
            raise UserError(f"layer: the model has {n_layer} layer; sigma needs at least 2 layers")
        layer = max(1, (5 * n_layer) // 8) if self.layer is None else self.layer
        if not 1 <= layer < n_layer:
            raise UserError(
                f"layer: {layer} does not exist or has no sigma (the model has {n_layer} layers: "
                f"1..{n_layer - 1} have sigma)"
            )
        return layer

    def check_model(self, model: torch.nn.Module) -> int:
        """Check that ``model`` is a byte-level BDH with this layer and head; returns the layer."""
        if not isinstance(model, BDH):
            raise UserError(f"synapses: needs a BDH model, got a {type(model).__name__}")
        cfg = model.config
        if cfg.vocab_size < 256:
            raise UserError(f"synapses: the model's vocabulary has {cfg.vocab_size} tokens; text needs 256 (bytes)")
        if not cfg.causal:
            raise UserError("synapses: the model is not causal; sigma is a causal state")
        if self.head >= cfg.n_head:
            raise UserError(f"head: {self.head} does not exist (the model has {cfg.n_head} heads: 0..{cfg.n_head - 1})")
        return self.resolved_layer(cfg.n_layer)
