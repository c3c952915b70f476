"""`Config` of ``bdh experiment relatives``: the models, the MQAR frontier's sweep and the language model's runs.
Three presets: the CPU default, `Config.quick` and `Config.full` (Zoology's sweep, for a GPU); their sizes and the
default's measured time are in docs/bench.md."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar

from bdh.experiments.common import ExperimentConfig
from bdh.typed_config import bounded

from . import zoo
from .frontier import FrontierSweep
from .lm import LMSweep

#: the experiment's MQAR fields -> the recall sweep's (`FrontierSweep`)
FRONTIER_FIELDS = {
    "models": "models",
    "seeds": "seeds",
    "n_head": "n_head",
    "widths": "widths",
    "seq_lens": "seq_lens",
    "num_pairs": "num_pairs",
    "vocab_size": "vocab_size",
    "neuron_mult": "neuron_mult",
    "mqar_layers": "n_layer",
    "mqar_lrs": "lrs",
    "mqar_steps": "steps",
    "mqar_batch_size": "batch_size",
    "train_examples": "num_train_examples",
    "val_examples": "num_val_examples",
}
#: the experiment's language-model fields -> the language model's sweep's (`LMSweep`)
LM_FIELDS = {
    "models": "models",
    "seeds": "seeds",
    "n_head": "n_head",
    "lm_layers": "n_layer",
    "lm_lrs": "lrs",
    "lm_steps": "steps",
    "lm_batch_size": "batch_size",
    "lm_seq_len": "seq_len",
    "lm_minutes": "minutes",
    "lm_eval_batches": "eval_batches",
}
FrontierSweep.CONFIG_NAMES = {v: k for k, v in FRONTIER_FIELDS.items()}
LMSweep.CONFIG_NAMES = {v: k for k, v in LM_FIELDS.items()} | {"widths": "lm_width", "neuron_mult": "lm_neurons"}


@dataclass(frozen=True)
class Config(ExperimentConfig):
    """The relatives experiment. The defaults are the CPU default."""

    # the labels compared (`bdh.experiments.relatives.zoo`); BDH must be one of them (every other is sized to its
    # parameter count and judged against it).
    models: tuple[str, ...] = zoo.MODELS
    # run seeds (initialisation and data order; the data sets are fixed).
    seeds: tuple[int, ...] = bounded((0, 1), ge=0, lt=2**63)
    n_head: int = bounded(4, ge=1)  # heads of BDH (and of every model with heads), in both parts.
    # (a) BDH's n_embd at each point of the frontier (the others matched in parameters).
    widths: tuple[int, ...] = bounded((8, 16, 32), ge=1)
    # seq_lens, num_pairs: (a) MQAR's sequence lengths N and, one per N, the key-value pairs D.
    seq_lens: tuple[int, ...] = bounded((16, 32), ge=2)
    num_pairs: tuple[int, ...] = bounded((2, 4), ge=1)
    vocab_size: int = bounded(128, ge=4)  # (a) MQAR's vocabulary V (larger than every N).
    neuron_mult: int = bounded(16, ge=1)  # (a) BDH's n = neuron_mult x width.
    # mqar_layers, mqar_lrs, mqar_steps, mqar_batch_size: (a) the layers of every model, the learning rates (the best
    # mean over seeds is kept, as Zoology reports), the steps and sequences per step.
    mqar_layers: int = bounded(2, ge=1)
    mqar_lrs: tuple[float, ...] = bounded((1e-3,), gt=0, lt=1)
    mqar_steps: int = bounded(2000, ge=1)
    mqar_batch_size: int = bounded(64, ge=1)
    # train_examples, val_examples: (a) the fixed training and validation sets of each (N, D).
    train_examples: int = bounded(20_000, ge=1)
    val_examples: int = bounded(512, ge=1)
    # lm_width, lm_neurons, lm_layers: (b) BDH's D, n and L (the main job's).
    lm_width: int = bounded(128, ge=1)
    lm_neurons: int = bounded(2048, ge=1)
    lm_layers: int = bounded(4, ge=1)
    # lm_lrs, lm_steps, lm_batch_size, lm_seq_len: (b) learning rates, the steps of the equal-tokens runs, windows per
    # step, and T.
    lm_lrs: tuple[float, ...] = bounded((1e-3,), gt=0, lt=1)
    lm_steps: int = bounded(200, ge=1)
    lm_batch_size: int = bounded(8, ge=1)
    lm_seq_len: int = bounded(128, ge=2)
    lm_minutes: float = bounded(0.5, gt=0)  # (b) the time budget of each equal-clock run (``train.max_minutes``).
    lm_eval_batches: int = bounded(8, ge=1)  # (b) validation batches (32 windows each) scored after training.
    device: str = "cpu"  # the trainer's device (``cpu``: the times are CPU times; ``auto`` for a GPU).
    # runs trained at once, each in a process with its share of the PyTorch threads (`bdh.bench.workers`).
    jobs: int = bounded(2, ge=1)
    # training steps timed per model shape for ``--show-config``'s estimate; 0: no timing.
    probe_steps: int = bounded(3, ge=0)

    experiment = "relatives"

    #: the presets (`bdh.typed_config.TypedConfig.PRESETS`, ``--quick`` / ``--full``):
    #: quick: A smoke test: BDH, GPT and BaseConv at two tiny widths, one setting, one seed, a few steps.
    #: full: Zoology's Figure 2 sweep for a GPU (V = 8192, (N, D) = (64, 4), (128, 8), (256, 16), (512, 64),
    #: widths 64 to 512, four learning rates from 1e-4 to 1e-2, 100,000 training examples) and a longer language
    #: model at the main job's size (2,000 steps of 32 windows, 10 minutes a run at equal wall-clock). Its plan
    #: lists the runs without timing them (``probe_steps`` 0).
    PRESETS: ClassVar[dict[str, dict[str, Any]]] = {
        "quick": {
            "models": ("bdh", "gpt", "baseconv"),
            "seeds": (0,),
            "widths": (8, 16),
            "seq_lens": (16,),
            "num_pairs": (2,),
            "vocab_size": 64,
            "neuron_mult": 8,
            "mqar_steps": 20,
            "mqar_batch_size": 16,
            "train_examples": 256,
            "val_examples": 64,
            "lm_width": 32,
            "lm_neurons": 256,
            "lm_layers": 2,
            "lm_steps": 4,
            "lm_batch_size": 2,
            "lm_seq_len": 32,
            "lm_minutes": 0.05,
            "lm_eval_batches": 2,
            "jobs": 1,
            "probe_steps": 1,
        },
        "full": {
            "widths": (64, 128, 256, 512),
            "seq_lens": (64, 128, 256, 512),
            "num_pairs": (4, 8, 16, 64),
            "vocab_size": 8192,
            "neuron_mult": 32,
            "mqar_lrs": (1e-4, 4.6e-4, 2.2e-3, 1e-2),
            "mqar_steps": 10_000,
            "train_examples": 100_000,
            "val_examples": 3_000,
            "lm_lrs": (1e-3,),
            "lm_steps": 2000,
            "lm_batch_size": 32,
            "lm_minutes": 10.0,
            "lm_eval_batches": 64,
            "device": "auto",
            "jobs": 1,
            "probe_steps": 0,  # a step of the widest models takes minutes on a CPU: --set probe_steps=1 on the GPU
        },
    }

    def __post_init__(self) -> None:
        super().__post_init__()  # the fields converted to their types, the declared ranges checked
        for name in ("seeds", "mqar_lrs", "lm_lrs", "widths", "seq_lens"):
            values = getattr(self, name)
            if not values or len(set(values)) != len(values):
                self._fail(name, f"give one or more values, none repeated; got {list(values)}")
        if self.lm_neurons % self.lm_width:
            self._fail("lm_neurons", f"{self.lm_neurons} is not a multiple of lm_width {self.lm_width}")
        self._check_device()
        self.frontier_sweep().validate()
        self.lm_sweep().validate()

    def frontier_sweep(self) -> FrontierSweep:
        """Part (a): the MQAR frontier's sweep (no longer evaluation: the frontier is read at the trained N)."""
        fields = {theirs: getattr(self, mine) for mine, theirs in FRONTIER_FIELDS.items()}
        return FrontierSweep(**fields, eval_length_factor=0, eval_batch_size=min(128, self.val_examples))

    def lm_sweep(self) -> LMSweep:
        """Part (b): the language model's sweep, BDH at ``lm_width`` with n = ``lm_neurons``."""
        fields = {theirs: getattr(self, mine) for mine, theirs in LM_FIELDS.items()}
        return LMSweep(**fields, widths=(self.lm_width,), neuron_mult=self.lm_neurons // self.lm_width)
