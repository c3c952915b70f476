"""``bdh bench recall``: BDH, GPT and BaseConv on an MQAR sweep (Zoology's protocol, CPU-sized).

Sequence length N x pairs D (4 D <= N) x width x learning rate x seed on fixed data sets; the best rate per
(model, setting, width), as Zoology reports. ``eval_length_factor`` k > 1 also scores at length k N
(``accuracy_longer``); docs/bench.md."""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any, ClassVar

import torch

from bdh.typed_config import bounded, one_of

from .models import ACCEPTED, REFERENCE, bench_models, sized_section
from .results import evaluate_examples
from .spec import FULL, QUICK, BenchError, RunSpec, SuiteDef, Sweep, Trivial, redefault

#: the models the suite compares by default (each but BDH sized to BDH's parameter count by its config's
#: for_budget); ``models`` may name any causal model the bench can size and BDH's ablated rows
MODELS = ("bdh", "gpt", "baseconv")


@dataclass
class RecallSweep(Sweep):
    """The MQAR sweep: `Sweep`'s fields (``n_layer``: every model's layers; ``n_head``: BDH's and GPT's heads)
    and these."""

    suite = "recall"
    MODELS = MODELS

    # The CPU default (docs/bench.md, "Sizing the recall default"): short sequences, a small vocabulary and
    # thousands of steps, so that attention gets through MQAR's plateau (about 0.25 accuracy with 4 pairs:
    # a value of the context, not the right one) within the budget; the pairs D separate the models.
    models: tuple[str, ...] = one_of(MODELS, bench_models, why=ACCEPTED)
    widths: tuple[int, ...] = redefault(Sweep, "widths", (32,))
    lrs: tuple[float, ...] = redefault(Sweep, "lrs", (1e-3,))  # the best rate of every model in recall_probe.py
    steps: int = redefault(Sweep, "steps", 3000)
    batch_size: int = redefault(Sweep, "batch_size", 64)
    n_layer: int = redefault(Sweep, "n_layer", 2)
    seq_lens: tuple[int, ...] = bounded((32,), ge=1)  # sequence lengths N.
    num_pairs: tuple[int, ...] = bounded((2, 4, 8), ge=1)  # key-value pairs D (combined with every N where 4 D <= N).
    vocab_size: int = bounded(128, ge=1)  # MQAR's V.
    # num_train_examples, num_val_examples: the fixed data sets per setting.
    num_train_examples: int = bounded(20_000, ge=1)
    num_val_examples: int = bounded(512, ge=1)
    # k; each run is also evaluated at length k N (``accuracy_longer``); 0 or 1: not.
    eval_length_factor: int = bounded(2, ge=0, why="0 or 1: no longer evaluation")
    # the state damping U of BDH's runs (`bdh.model.BDHConfig.damping`); null: the official model.
    bdh_damping: str | None = one_of(None, ("alibi", "multiscale"), why="BDH's state damping presets")

    #: the presets (`bdh.typed_config.TypedConfig.PRESETS`, ``--quick`` / ``--full``):
    #: quick: Tiny sizes for smoke tests: one setting, one width, one seed, a few steps; no longer evaluation
    #: (MQAR needs vocab_size > the length, and 2 N = 64 is not below V = 64).
    #: full: Zoology-like sizes for a GPU: V = 8192, N up to 512, D up to 64, widths 64..512, four learning
    #: rates.
    PRESETS: ClassVar[dict[str, dict[str, Any]]] = {
        "quick": {
            **QUICK,
            "seq_lens": (32,),
            "num_pairs": (2,),
            "vocab_size": 64,
            "num_train_examples": 512,
            "num_val_examples": 64,
            "eval_batch_size": 64,
            "eval_length_factor": 0,
        },
        "full": {
            **FULL,
            "seq_lens": (64, 128, 256, 512),
            "num_pairs": (4, 8, 16, 32, 64),
            "widths": (64, 128, 256, 512),
            "lrs": (1e-4, 4.6e-4, 2.2e-3, 1e-2),
            "steps": 10000,
            "vocab_size": 8192,
            "num_train_examples": 100_000,
            "num_val_examples": 3_000,
            "eval_batch_size": 256,
        },
    }

    def settings(self) -> list[tuple[int, int]]:
        """The (N, D) pairs of the sweep (4 D <= N and D distinct keys fit the vocabulary)."""
        return [(N, D) for N in self.seq_lens for D in self.num_pairs if 4 * D <= N and D <= self.vocab_size // 2 - 1]

    def longer_len(self, seq_len: int) -> int | None:
        """The length of the longer evaluation of a run trained at ``seq_len`` (None: none)."""
        return self.eval_length_factor * seq_len if self.eval_length_factor > 1 else None

    def model_len(self, seq_len: int) -> int:
        """The longest length a model trained at ``seq_len`` sees (its ``seq_len`` in the model section)."""
        return self.longer_len(seq_len) or seq_len

    def section(self, model: str, width: int, seq_len: int) -> dict[str, Any]:
        """One run's model section: BDH at ``width`` (and its ablated rows), or a model sized to BDH's count."""
        section = sized_section(
            model,
            width,
            vocab_size=self.vocab_size,
            seq_len=seq_len,
            n_layer=self.n_layer,
            n_head=self.n_head,
            neuron_mult=self.neuron_mult,
            causal=True,
        )
        if section["name"] == REFERENCE and self.bdh_damping is not None:
            section = {**section, "damping": self.bdh_damping}
        return section

    def validate(self) -> None:
        """The rules between fields (4 D <= N, lengths even and below the vocabulary) and causal models only."""
        super().validate()
        f = self.eval_length_factor
        if not self.settings():
            raise BenchError(f"{self.suite}: no (seq_len, num_pairs) setting with 4 * num_pairs <= seq_len")
        longest = max(self.model_len(N) for N in self.seq_lens)
        if longest >= self.vocab_size:
            how = f" (eval_length_factor {f} x seq_len {longest // f})" if longest > max(self.seq_lens) else ""
            raise BenchError(
                f"{self.suite}: vocab_size {self.vocab_size} must exceed every evaluated sequence length; "
                f"the longest is {longest}{how}"
            )
        if any(N % 2 for N in self.seq_lens):
            raise BenchError(f"{self.suite}: sequence lengths must be even")
        # every model sized as at the first length (a bidirectional-only model's config refuses causal=True)
        self.check_models(lambda model, width: self.section(model, width, self.model_len(self.seq_lens[0])))


#: the sweep class of the suite (what ``bdh bench recall`` builds, `bdh.bench.spec`)
SWEEP = RecallSweep
#: the suite's own command-line flags: a sweep field -> its ``argparse`` options (``--bdh-damping``)
FLAGS = {
    "bdh_damping": {
        "choices": ("alibi", "multiscale"),
        "help": "BDH's state damping U (default: none, the official model; docs/long-context.md)",
    }
}


def model_section(model: str, width: int, sweep: RecallSweep, seq_len: int) -> dict[str, Any]:
    """The model section of one run of ``sweep`` (`RecallSweep.section`)."""
    return sweep.section(model, width, seq_len)


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
                section = sweep.section(m, w, sweep.model_len(N))
                specs += sweep.runs(m, w, f"N{N}-D{D}", {"seq_len": N, "num_pairs": D}, section, task)
    return specs


class LongerColumns:
    """The ``extra`` hook: accuracy on ``longer_len(N)`` tokens with the run's D and data seed (picklable)."""

    def __init__(self, sweep: RecallSweep) -> None:
        self.sweep = sweep
        self.tasks: dict[str, Any] = {}

    def __call__(self, spec: RunSpec, model: torch.nn.Module, task: Any) -> dict[str, Any]:
        from bdh.tasks.mqar import MQAR, MQARConfig

        length = self.sweep.longer_len(int(spec.setting_columns["seq_len"]))
        if length is None:
            return {}
        fields = {k: v for k, v in spec.task_section.items() if k != "name"}
        fields["input_seq_len"] = length
        key = json.dumps(fields, sort_keys=True)
        if key not in self.tasks:
            self.tasks[key] = MQAR(MQARConfig(**fields))
        got = evaluate_examples(model, self.tasks[key], spec.eval_batch_size, spec.eval_batches, spec.seed)
        return {"longer_len": length, "accuracy_longer": got.get("accuracy", float("nan"))}


def train_size(task: Any) -> int:
    """The examples of an MQAR task's training set (the suite's tasks have one slice)."""
    sizes = task.config.sizes("train")
    if len(sizes) != 1:
        raise BenchError(f"recall: the trivial answer needs one training slice, got {len(sizes)}")
    return int(sizes[0])


def suite_def(sweep: RecallSweep) -> SuiteDef:
    """The recall suite (with ``longer_len``, ``accuracy_longer`` when asked); its reference row is chance."""
    longer = sweep.eval_length_factor > 1
    return SuiteDef(
        name=sweep.suite,
        setting_columns=["seq_len", "num_pairs"],
        metrics=["accuracy"],
        score=["accuracy"],
        extra=LongerColumns(sweep) if longer else None,
        extra_columns=["longer_len", "accuracy_longer"] if longer else [],
        extra_metrics=["accuracy_longer"] if longer else [],
        extra_settings=["longer_len"] if longer else [],
        trivial=Trivial("trivial (chance: the most frequent value of each key)", train_size),
    )
