"""`Config` of ``bdh experiment scaling``: the ladder of sizes, the data, the training budget and the learning-rate
sweep (paper section 4.2, Fig. 7, appendix B.2). Three presets: the CPU default, `Config.quick` (a smoke test)
and `Config.full` (10M to 100M parameters, for a GPU); docs/experiments.md gives the default's measured time."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar

from bdh.baselines.gpt import POSITIONAL as GPT_POSITIONAL
from bdh.experiments.common import ExperimentConfig
from bdh.model.names import ATTENTION_FORMS
from bdh.typed_config import bounded, one_of

#: the values of ``data`` that are not paths
DATA_CHOICES = ("shakespeare", "translation")
PRECISIONS = ("auto", "bf16", "fp32")


@dataclass(frozen=True)
class Config(ExperimentConfig):
    """The scaling experiment. The defaults are the CPU default."""

    # ``shakespeare`` (the embedded corpus), ``translation`` (the synthetic translation stream, the paper's setting,
    # with per-direction target-side losses) or the path of a text file or folder.
    data: str = "shakespeare"
    # pairs, corpus_bytes: the language pairs and size of the translation stream (``data: translation``).
    pairs: str = "en-es,en-fr"
    corpus_bytes: int = bounded(4_000_000, ge=1)
    # BDH's n at each size; the paper scales BDH in n only (Table 5), so L, D and h are fixed.
    n_neurons: tuple[int, ...] = (512, 1024, 2048, 4096, 8192)
    # n_layer, n_embd, n_head: BDH's L, D and h.
    n_layer: int = bounded(4, ge=1)
    n_embd: int = bounded(64, ge=1)
    n_head: int = bounded(4, ge=1)
    # the form BDH computes attention in (the same model either way).
    bdh_attention: str = one_of("parallel", ATTENTION_FORMS)
    # gpt_layers, gpt_heads: the Transformer's depth and heads at each size; its width then matches BDH's parameter
    # count (the paper scales GPTXL in depth and width, Table 4).
    gpt_layers: tuple[int, ...] = bounded((2, 2, 3, 3, 4), ge=1)
    gpt_heads: tuple[int, ...] = bounded((4, 4, 4, 4, 4), ge=1)
    gpt_positional: str = one_of("learned", GPT_POSITIONAL)  # the Transformer's positions (GPT-2: ``learned``).
    dropout: float = bounded(0.0, ge=0, lt=1)  # dropout of both models.
    # the largest relative parameter mismatch accepted between the two models of a size.
    match_tolerance: float = bounded(0.05, gt=0, lt=1)
    # the learning rates swept at the smallest size; each model's best is then used at every size.
    lrs: tuple[float, ...] = bounded((1e-3, 3e-3, 1e-2), gt=0, lt=1)
    # run seeds (initialisation and data order; the two models of a seed see the same batches).
    seeds: tuple[int, ...] = bounded((0, 1), ge=0)
    # steps, batch_size, seq_len: every run's steps, sequences per step and bytes per sequence (their product: the token
    # budget, equal for all runs).
    steps: int = bounded(220, ge=1)
    batch_size: int = bounded(8, ge=1)
    seq_len: int = bounded(256, ge=1)
    # sequences per forward/backward (gradient accumulation), null for none.
    micro_batch_size: int | None = bounded(None, ge=1)
    val_fraction: float = bounded(0.1, gt=0, le=0.5)  # the share of the corpus held out for validation.
    # curve_points, curve_eval_batches: validations during a run (the loss curve) and batches each.
    curve_points: int = bounded(10, ge=1)
    curve_eval_batches: int = bounded(4, ge=1)
    eval_batches: int = bounded(16, ge=1)  # validation batches of the final loss.
    eval_segments: int = bounded(100, ge=1)  # held-out segments per direction (``data: translation``).
    # the context length of the inference-cost columns (state size, FLOPs per token).
    inference_context: int = bounded(4096, ge=1)
    # device, precision: the trainer's device and precision.
    device: str = "cpu"
    precision: str = one_of("fp32", PRECISIONS)
    # the sustained training throughput (TFLOP/s) assumed by the plan's time estimates.
    plan_tflops: float = bounded(0.15, gt=0)

    experiment = "scaling"

    #: the presets (`bdh.typed_config.TypedConfig.PRESETS`, ``--quick`` / ``--full``):
    #: quick: A smoke test: two tiny sizes, one seed, two learning rates, a few dozen steps.
    #: full: The GPU ladder: BDH with the paper's L = 8, D = 256, h = 4 and n from 16384 to 131072 (about 13M to
    #: 100M parameters), the Transformer shaped as the paper's GPTXL (Table 4), on the translation stream.
    PRESETS: ClassVar[dict[str, dict[str, Any]]] = {
        "quick": {
            "n_neurons": (128, 256),
            "n_layer": 2,
            "n_embd": 32,
            "n_head": 2,
            "gpt_layers": (1, 1),
            "gpt_heads": (2, 2),
            "corpus_bytes": 200_000,
            "lrs": (3e-3, 1e-2),
            "seeds": (0,),
            "steps": 24,
            "batch_size": 4,
            "seq_len": 64,
            "curve_points": 3,
            "curve_eval_batches": 2,
            "eval_batches": 4,
            "eval_segments": 16,
        },
        "full": {
            "data": "translation",
            "corpus_bytes": 400_000_000,
            "n_neurons": (16384, 32768, 65536, 131072),
            "n_layer": 8,
            "n_embd": 256,
            "n_head": 4,
            "gpt_layers": (6, 9, 12, 15),
            "gpt_heads": (4, 5, 6, 8),
            "lrs": (3e-4, 1e-3, 3e-3),
            "seeds": (0, 1),
            "steps": 6000,
            "batch_size": 32,
            "micro_batch_size": 4,
            "seq_len": 1024,
            "val_fraction": 0.01,
            "curve_points": 20,
            "curve_eval_batches": 8,
            "eval_batches": 64,
            "eval_segments": 200,
            "device": "auto",
            "precision": "auto",
            "plan_tflops": 150.0,
        },
    }

    def __post_init__(self) -> None:
        super().__post_init__()  # the fields converted to their types, the declared ranges checked
        self._check_data()
        self._check_ladder()
        self._check_sweep()
        if self.micro_batch_size is not None and self.batch_size % self.micro_batch_size:
            self._fail("micro_batch_size", f"{self.micro_batch_size} does not divide batch_size {self.batch_size}")
        self._check_device()

    def inputs(self) -> tuple[str, ...]:
        """The text file or folder of ``data`` (none for the embedded and synthetic corpora)."""
        return () if self.data in DATA_CHOICES else (str(Path(self.data).expanduser()),)

    def _check_data(self) -> None:
        if self.data not in DATA_CHOICES and not Path(self.data).expanduser().exists():
            self._fail("data", f"{self.data!r} is neither {' nor '.join(DATA_CHOICES)} nor an existing file or folder")
        self._check_pairs()

    def _check_ladder(self) -> None:
        """Sizes in increasing order, n divisible by h with an even N (RoPE), one GPT shape per size."""
        if not self.n_neurons:
            self._fail("n_neurons", "give at least one size")
        for n in self.n_neurons:
            if n < 1 or n % self.n_head or (n // self.n_head) % 2:
                self._fail("n_neurons", f"{n} must be a positive multiple of 2 * n_head = {2 * self.n_head}")
        if any(b <= a for a, b in zip(self.n_neurons, self.n_neurons[1:])):
            self._fail("n_neurons", f"sizes must increase, got {list(self.n_neurons)}")
        if self.n_embd % self.n_head:
            self._fail("n_embd", f"{self.n_embd} is not divisible by n_head = {self.n_head}")
        for name in ("gpt_layers", "gpt_heads"):
            values = getattr(self, name)
            if len(values) != len(self.n_neurons):
                self._fail(name, f"give one value per size ({len(self.n_neurons)}), got {len(values)}")

    def _check_sweep(self) -> None:
        """One or more learning rates and seeds (their ranges are declared), none repeated."""
        for name, what in (("lrs", "learning rates in (0, 1)"), ("seeds", "seeds >= 0")):
            if not getattr(self, name):
                self._fail(name, f"give one or more {what}, got []")
        for name in ("lrs", "seeds"):
            if len(set(getattr(self, name))) != len(getattr(self, name)):
                self._fail(name, f"repeated values in {list(getattr(self, name))}")

    @property
    def tokens_per_run(self) -> int:
        """Training tokens of every run: steps x batch_size x seq_len."""
        return self.steps * self.batch_size * self.seq_len

    @property
    def curve_every(self) -> int:
        """Steps between the validations of the loss curve."""
        return max(1, self.steps // self.curve_points)
