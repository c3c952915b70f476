"""``bdh bench recall``: BDH, GPT and BaseConv on an MQAR sweep (Zoology's protocol, CPU-sized).

The sweep is sequence length N x number of key-value pairs D (every pair with 4 D <= N) x model
width x learning rate x seed. Each (N, D) setting is trained and validated on its own slice (a fixed
training set and a fixed validation set drawn from ``data_seed``, shared by every run). As Zoology
reports, the table keeps, per (model, setting, width), the learning rate with the best validation
accuracy; the plots show accuracy against the width and against the recurrent-state size.

Widths: the width w is BDH's ``n_embd`` (with ``n_neurons = neuron_mult * w``). GPT (``gpt_config_for_params``)
and BaseConv are sized to BDH's parameter count at that width, with the same number of layers, by
choosing their ``n_embd``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from bdh.errors import UserError

from .runner import (
    FULL,
    QUICK,
    BenchError,
    RunSpec,
    SuiteDef,
    Sweep,
    bdh_params,
    bdh_section,
    section_of,
    size_by_params,
)

MODELS = ("bdh", "gpt", "baseconv")


@dataclass
class RecallSweep(Sweep):
    """The MQAR sweep: the fields of `Sweep` (``n_layer``: layers of every model, BDH's weight-shared layer
    passes; ``n_head``: BDH's and GPT's heads), plus

    Attributes:
        seq_lens: sequence lengths N.
        num_pairs: key-value pairs D (combined with every N where 4 D <= N).
        vocab_size: MQAR's V (Zoology: 8192).
        num_train_examples, num_val_examples: the fixed data sets per setting.
    """

    suite = "recall"
    MODELS = MODELS

    models: tuple[str, ...] = MODELS
    steps: int = 150
    n_layer: int = 2
    seq_lens: tuple[int, ...] = (64, 128)
    num_pairs: tuple[int, ...] = (4, 8)
    vocab_size: int = 512
    num_train_examples: int = 8192
    num_val_examples: int = 512

    @classmethod
    def quick(cls) -> RecallSweep:
        """Tiny sizes for smoke tests: one setting, one width, a few steps."""
        return cls(
            **QUICK,
            seq_lens=(32,),
            num_pairs=(2,),
            vocab_size=64,
            num_train_examples=512,
            num_val_examples=64,
            eval_batch_size=64,
        )

    @classmethod
    def full(cls) -> RecallSweep:
        """Zoology-like sizes for a GPU: V = 8192, N up to 512, D up to 64, widths 64..512, four learning rates."""
        return cls(
            **FULL,
            seq_lens=(64, 128, 256, 512),
            num_pairs=(4, 8, 16, 32, 64),
            widths=(64, 128, 256, 512),
            lrs=(1e-4, 4.6e-4, 2.2e-3, 1e-2),
            steps=10000,
            vocab_size=8192,
            num_train_examples=100_000,
            num_val_examples=3_000,
            eval_batch_size=256,
        )

    def settings(self) -> list[tuple[int, int]]:
        """The (N, D) pairs of the sweep (4 D <= N and D distinct keys fit the vocabulary)."""
        return [(N, D) for N in self.seq_lens for D in self.num_pairs if 4 * D <= N and D <= self.vocab_size // 2 - 1]

    def validate(self) -> None:
        super().validate()
        if not self.settings():
            raise BenchError("recall: no (seq_len, num_pairs) setting with 4 * num_pairs <= seq_len")
        if max(self.seq_lens) >= self.vocab_size:
            raise BenchError(f"recall: vocab_size {self.vocab_size} must exceed every sequence length")
        if any(N % 2 for N in self.seq_lens):
            raise BenchError("recall: sequence lengths must be even")


def model_section(model: str, width: int, sweep: RecallSweep, seq_len: int) -> dict[str, Any]:
    """The model section of one run: BDH at ``width``, or a baseline sized to BDH's parameter count."""
    bdh = bdh_section(width, n_layer=sweep.n_layer, n_head=sweep.n_head, neuron_mult=sweep.neuron_mult, causal=True)
    if model == "bdh":
        return bdh
    budget = bdh_params(bdh, sweep.vocab_size)
    if model == "gpt":
        from bdh.baselines.gpt import gpt_config_for_params

        cfg = gpt_config_for_params(
            budget,
            n_layer=sweep.n_layer,
            n_head=sweep.n_head,
            vocab_size=sweep.vocab_size,
            seq_len=seq_len,
            causal=True,
        )
        return section_of(cfg, "gpt")
    if model == "baseconv":
        from bdh.baselines.baseconv import BaseConvConfig

        cfg = size_by_params(
            budget,
            lambda d: BaseConvConfig(vocab_size=sweep.vocab_size, seq_len=seq_len, n_layer=sweep.n_layer, n_embd=d),
            step=2,
        )
        return section_of(cfg, "baseconv")
    raise UserError(f"recall: unknown model {model!r}")


def plan(sweep: RecallSweep) -> list[RunSpec]:
    """Every run of the sweep, settings first, then widths, models, learning rates and seeds."""
    sweep.validate()
    specs = []
    for N, D in sweep.settings():
        task = {
            "name": "mqar",
            "vocab_size": sweep.vocab_size,
            "input_seq_len": N,
            "num_kv_pairs": D,
            "num_train_examples": sweep.num_train_examples,
            "num_val_examples": sweep.num_val_examples,
            "data_seed": sweep.data_seed,
        }
        for w in sweep.widths:
            for m in sweep.models:
                specs += sweep.runs(
                    m, w, f"N{N}-D{D}", {"seq_len": N, "num_pairs": D}, model_section(m, w, sweep, N), task
                )
    return specs


SUITE = SuiteDef(name="recall", setting_columns=["seq_len", "num_pairs"], metrics=["accuracy"], score=["accuracy"])
