"""Model sections shared by the bidirectional board suites (``boardpath``, ``sudoku``): BDH at a width (``causal:
false``, ``n_layer`` weight-shared passes), GPT (``n_layer`` blocks) and Hyper-SET (one layer iterated ``n_layer``
times) sized to BDH's parameter count by their ``for_budget``, or any registered model with a bidirectional form."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from bdh.typed_config import bounded, one_of

from .models import ACCEPTED, bench_models, sized_section
from .spec import FULL, Sweep

#: the models the board suites compare by default (each but BDH sized to BDH's parameter count by its config's
#: for_budget); ``models`` may name any bidirectional model the bench can size and BDH's ablated rows
MODELS = ("bdh", "gpt", "hyperset")


@dataclass
class BoardSweep(Sweep):
    """The sweep of a board suite: `Sweep`'s fields (``n_layer``: BDH layer passes, GPT blocks, Hyper-SET iterations),
    plus ``num_train``/``num_val`` (the boards of each set) and ``time_freq`` (Hyper-SET's F)."""

    MODELS = MODELS

    models: tuple[str, ...] = one_of(MODELS, bench_models, why=ACCEPTED)
    num_train: int = bounded(2000, ge=1)
    num_val: int = bounded(200, ge=1)
    time_freq: int = bounded(64, ge=1)

    def shapes(self) -> list[dict[str, int]]:
        """The ``vocab_size`` and ``seq_len`` (tokens of a board) of the suite's task at each of its settings, in
        the order of its plan (a board suite's own)."""
        raise NotImplementedError

    def validate(self) -> None:
        """The rules between fields (`Sweep.validate`), and every model one the board suites can run: sized as at
        the first setting (a causal-only model's config refuses ``causal=False``; `Sweep.check_models`)."""
        super().validate()
        first = self.shapes()[:1]
        if first:
            self.check_models(lambda model, width: self.model_section(model, width, **first[0]))

    def model_section(self, model: str, width: int, *, vocab_size: int, seq_len: int) -> dict[str, Any]:
        """The model section of one run: BDH at ``width`` (bidirectional), or a registered model sized to BDH's
        parameter count (`bdh.bench.models.sized_section`), Hyper-SET with ``time_freq`` (its F d parameters weigh in a
        small model)."""
        return sized_section(
            model,
            width,
            vocab_size=vocab_size,
            seq_len=seq_len,
            n_layer=self.n_layer,
            n_head=self.n_head,
            neuron_mult=self.neuron_mult,
            causal=False,
            options=self.model_options(),
        )

    def model_options(self) -> dict[str, dict[str, Any]]:
        """The fields a model is sized with, by model name (`bdh.bench.models.sized_section`): Hyper-SET's F."""
        return {"hyperset": {"time_freq": self.time_freq}}


#: the ``--full`` values both board suites share (GPU-sized: three widths and learning rates, long runs)
BOARD_FULL = {**FULL, "widths": (64, 128, 256), "lrs": (3e-4, 1e-3, 3e-3), "steps": 20000, "time_freq": 512}
