"""`Config` of ``bdh experiment length``: the models, the two tasks, the training at T and the test lengths; three
presets (the CPU default, `Config.quick`, `Config.full` for a GPU), described in docs/experiments.md."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar

from bdh.bench.models import section_of, sized_section, suite_models, zoo_row
from bdh.bench.state_match import KEY_WIDTHS, state_matched_config
from bdh.model.config import BDHConfig
from bdh.typed_config import bounded, one_of

from ..common import ExperimentConfig

#: the models compared by default, in table order: the official BDH, the recipe that keeps a fact
#: (docs/long-context.md), the zoo
MODELS: tuple[str, ...] = ("bdh", "bdh-nopos-lg-delta", "gpt", "mamba", "gla", "rwkv", "based")
#: the tasks (registered names, `bdh.tasks.induction`, `bdh.tasks.recall_gap`)
TASKS: tuple[str, ...] = ("induction", "recall_gap")


@dataclass(frozen=True)
class Config(ExperimentConfig):
    """The length experiment. The defaults are the CPU default: trained at T = 64, not the paper's 256 (our
    deviation: at 256, 400 steps of 8 taught no model either task, docs/experiments.md).
    """

    # registered models the bench can size (BDH at ``width``, every other sized to its parameter count).
    models: tuple[str, ...] = MODELS
    tasks: tuple[str, ...] = one_of(TASKS, TASKS)  # ``induction`` and/or ``recall_gap``.
    # training seeds (initialisation and data); the test sets are the same for every seed.
    seeds: tuple[int, ...] = bounded((0, 1), ge=0, lt=2**63)
    seq_len: int = bounded(64, ge=16)  # T, the training length.
    # short_len, short_steps: a curriculum (our deviation): ``short_steps`` steps at ``short_len`` < T first, then
    # ``steps`` at T; 0: none (the paper's protocol).
    short_len: int = bounded(64, ge=16)
    short_steps: int = bounded(0, ge=0)
    # lr_at_t, batch_at_t: the learning rate and batch size at T after a curriculum's short phase (null: ``lr``,
    # ``batch_size``).
    lr_at_t: float | None = bounded(None, gt=0, lt=1)
    batch_at_t: int | None = bounded(None, ge=1)
    max_length: int = bounded(2**16, ge=16)  # the longest test length; the test lengths are T, 2T, 4T, ... up to it.
    # the shortest test length past T (0: 2T): T, then min_length, 2 min_length, ... up to max_length; a long read
    # without the lengths between (a resumed folder's report keeps those it read before).
    min_length: int = bounded(0, ge=0)
    # n_layer, width, n_head, neuron_mult: BDH's L, D = width, h and n = neuron_mult x width.
    n_layer: int = bounded(2, ge=1)
    width: int = bounded(64, ge=4)
    n_head: int = bounded(4, ge=1)
    neuron_mult: int = bounded(8, ge=1)
    # BDH (every row of it) trains in the chunked form, this many tokens a chunk; 0: in its own form (one block of T).
    # The forms are equal (tests/model); a chunk is faster at T = 256 (docs/long-context.md).
    train_chunk: int = bounded(0, ge=0)
    # GPT's positions (``rope`` or ``none``: learned positions cannot pass T).
    gpt_positional: str = one_of("rope", ("rope", "none"))
    # how the zoo rows are sized to BDH: ``params`` (its parameter count), or ``state``: DeltaNet, Gated DeltaNet, GLA
    # and Mamba at BDH's width with the key width whose state per layer is nearest BDH's (`bdh.bench.state_match`;
    # their parameters as they fall), the other rows by parameters still. CPU cost at the recall recipe (one thread
    # of a shared machine, training and reads to 16k): DeltaNet 119 min, Gated DeltaNet 130, GLA 92; Mamba 94 (two
    # threads, shared); BDH 20-60 (docs/long-context.md, "The zoo at BDH's state size").
    zoo_match: str = one_of("params", ("params", "state"))
    # steps, batch_size, lr: Adam without weight decay at a constant ``lr`` after a warmup of a tenth.
    steps: int = bounded(700, ge=1)
    batch_size: int = bounded(64, ge=1)
    lr: float = bounded(1e-3, gt=0, lt=1)
    # induction_vocab, induction_triggers: the induction task's vocabulary and trigger/answer pairs per sequence.
    induction_vocab: int = bounded(16, ge=3)
    induction_triggers: int = bounded(1, ge=1)
    # recall_vocab, recall_pairs, recall_gap_max: recall_gap's vocabulary, key-value pairs D and the largest training
    # gap (test gaps fill the sequence, L - 4D).
    recall_vocab: int = bounded(256, ge=8)
    recall_pairs: int = bounded(8, ge=1)
    recall_gap_max: int = bounded(32, ge=0)
    # the capacity map's trained counts: one recall_gap run per D given (in place of ``recall_pairs``); empty:
    # ``recall_pairs`` alone (`facts.py`). CPU cost: one training each, 58 min for the recall recipe on one thread
    # of a shared machine (docs/long-context.md, the capacity map).
    facts: tuple[int, ...] = bounded((), ge=1)
    # the counts D every recall_gap run is also read at, besides its own (fewer facts, or more than it was trained on);
    # a length with no room for 4D tokens is not read. Each count is one more read form: the reads cost
    # 1 + len(facts_read) times a plain run's (``--show-config`` times it on the machine): measured, 25 min to 4,096
    # for 7 counts with hard_reads, 7.0 min for 2 counts at 16,384 alone, 45 min for one count at 2^20 alone (64
    # sequences, hard_reads; one thread, docs/long-context.md).
    facts_read: tuple[int, ...] = bounded((), ge=1)
    # sequences of each fixed test set (one per task and length).
    test_sequences: int = bounded(64, ge=64, le=2**16, why="every test set is read whole at every length")
    read_batch: int = bounded(64, ge=1)  # sequences read together through a state.
    # tokens per whole read of a model without a state (its rows: whole_tokens // L, at least 1).
    whole_tokens: int = bounded(2**16, ge=1)
    # a read form stops after this many lengths in a row at chance; 0: every length is read.
    stop_after_chance: int = bounded(2, ge=0)
    # BDH rows whose delta rule writes through the sigmoid gate are also read with the hard gate (``state-hard``: the
    # same weights with ``write_gate: hard``, b_t exactly 0 where the gate's logit is <= -3; docs/long-context.md,
    # "Recall through a gap").
    hard_reads: bool = False
    # with hard_reads, the heads whose writes one more hard read (``state-hard-top1``) addresses to their key's largest
    # neuron alone (``write_topk: 1`` in those heads, the others' keys and every query as trained: `BDH.hard_gated`),
    # e.g. [1], the undamped head of 2-head ``local-global`` damping; empty: no such read. CPU cost: about the
    # state-hard read's (2^20 at 16 sequences: about 25 min on one thread; docs/long-context.md).
    hard_read_top1_heads: tuple[int, ...] = bounded((), ge=0)
    # the cutoff of GPT's whole-context read (estimated 4 bytes x heads x L^2 per row); past it: OOM.
    attention_gb: float = bounded(2.0, gt=0)
    # byte-level model folders whose recall through a gap of prose goes beside the tables.
    text_models: tuple[str, ...] = ()
    # text_distances, text_trials: bytes between the fact and its question; trials per distance.
    text_distances: tuple[int, ...] = bounded((64, 256, 1024, 4096), ge=1)
    text_trials: int = bounded(16, ge=1)
    device: str = "cpu"  # where models train and read (``cpu``; ``auto`` for a GPU).

    experiment = "length"

    #: the presets (`bdh.typed_config.TypedConfig.PRESETS`, ``--quick`` / ``--full``):
    #: quick: a smoke test of about a minute: four models, tiny, 30 steps at T = 32, tested to 128.
    #: full: for a GPU: the paper's T = 256, D = 64, n = 1,024, 25,600 steps of 64 sequences (the 1.6M sequences of
    #: the Mamba paper's 204,800 steps of 8), tested to 2^20.
    PRESETS: ClassVar[dict[str, dict[str, Any]]] = {
        "quick": {
            "models": ("bdh", "gpt", "mamba", "gla"),
            "seeds": (0,),
            "seq_len": 32,
            "max_length": 128,
            "batch_size": 8,
            "width": 16,
            "neuron_mult": 8,
            "steps": 30,
            "recall_vocab": 32,
            "recall_pairs": 2,
            "recall_gap_max": 8,
            "text_distances": (16, 64),
            "text_trials": 4,
        },
        "full": {
            "seq_len": 256,
            "max_length": 2**20,
            "width": 64,
            "neuron_mult": 16,
            "recall_gap_max": 64,
            "steps": 25_600,
            "batch_size": 64,
            "device": "auto",
        },
    }

    def __post_init__(self) -> None:
        super().__post_init__()  # the fields converted to their types, the declared ranges checked
        for name in ("models", "tasks", "seeds"):
            values = getattr(self, name)
            if not values or len(set(values)) != len(values):
                self._fail(name, f"give one or more values, none repeated; got {list(values)}")
        suite_models(self._key("models"), *self.models)
        ratio = self.max_length // self.seq_len
        if self.max_length % self.seq_len or ratio & (ratio - 1):
            self._fail("max_length", f"must be seq_len ({self.seq_len}) times a power of 2, got {self.max_length}")
        ratio = self.min_length // self.seq_len
        if self.min_length and (self.min_length % self.seq_len or ratio < 2 or ratio & (ratio - 1)):
            self._fail(
                "min_length", f"must be 0 or 2T, 4T, 8T, ... (T = seq_len = {self.seq_len}), got {self.min_length}"
            )
        if self.min_length > self.max_length:
            self._fail("min_length", f"must be at most max_length ({self.max_length}), got {self.min_length}")
        if self.short_steps and self.short_len >= self.seq_len:
            self._fail("short_len", f"a curriculum starts shorter than seq_len ({self.seq_len}), got {self.short_len}")
        for name in ("lr_at_t", "batch_at_t"):
            if not self.short_steps and getattr(self, name) is not None:
                self._fail(name, "sets the training at T after a curriculum's short phase: give short_steps > 0 too")
        if self.width % self.n_head:
            self._fail("width", f"{self.width} is not a multiple of n_head ({self.n_head})")
        if self.hard_read_top1_heads and not self.hard_reads:
            self._fail("hard_read_top1_heads", "names the heads of a hard read: set hard_reads: true too")
        top1 = self.hard_read_top1_heads
        if len(set(top1)) != len(top1) or any(h >= self.n_head for h in top1):
            self._fail("hard_read_top1_heads", f"must name distinct heads of 0..{self.n_head - 1}, got {list(top1)}")
        self._check_device()
        for path in self.text_models:
            if not (Path(path) / "config.json").is_file():
                self._fail("text_models", f"{path} is not a model folder (no config.json)")
        self._check_facts()
        for task in self.tasks:  # the task's own one-line refusals, under this experiment's field names
            for count in self.trained_facts(task):
                self.task_section(task, facts=count)

    def _check_facts(self) -> None:
        """``facts`` and ``facts_read``: none repeated, only with recall_gap, each count's keys in the vocabulary."""
        from bdh.tasks.recall_gap import check_recall_gap_args

        for name in ("facts", "facts_read"):
            values = getattr(self, name)
            if not values:
                continue
            if len(set(values)) != len(values):
                self._fail(name, f"give counts none repeated; got {list(values)}")
            if "recall_gap" not in self.tasks:
                self._fail(name, "counts the facts of recall_gap: add it to tasks")
            for count in values:
                try:
                    check_recall_gap_args(self.recall_vocab, count, 4 * count, 0)
                except ValueError as exc:
                    self._fail(name, f"{count} facts: {str(exc).removeprefix('recall_gap: ')} (recall_vocab)")

    def trained_facts(self, task: str) -> tuple[int | None, ...]:
        """The trained counts of ``task``'s runs: ``facts`` for recall_gap where given, else (None,): one run at the
        task's own (``recall_pairs``)."""
        return self.facts if task == "recall_gap" and self.facts else (None,)

    def inputs(self) -> tuple[str, ...]:
        """The text models it reads (an ``--out`` that holds one is refused)."""
        return self.text_models

    @property
    def lengths(self) -> tuple[int, ...]:
        """The test lengths: T, then 2T (or ``min_length``), doubling up to max_length."""
        out, length = [self.seq_len], self.min_length or 2 * self.seq_len
        while length <= self.max_length:
            out.append(length)
            length *= 2
        return tuple(out)

    def lengths_with(self, earlier: Iterable[int]) -> tuple[int, ...]:
        """The test lengths and the ``earlier`` ones up to max_length (lengths a resumed folder read before, which a
        ``min_length`` read skips), sorted."""
        return tuple(sorted(set(self.lengths) | {n for n in earlier if n <= self.max_length}))

    def chance(self, task: str) -> float:
        """Accuracy by guessing: an answer among the plain tokens (induction), a value among V/2 (recall_gap)."""
        if task == "induction":
            return 1 / (self.induction_vocab - self.induction_triggers)
        return 2 / self.recall_vocab

    def task_section(self, task: str, seq_len: int | None = None, facts: int | None = None) -> dict[str, Any]:
        """The ``task`` section of a training run at ``seq_len`` (default T) with ``facts`` pairs (recall_gap; default
        ``recall_pairs``; the task's config checked here, its error under our name)."""
        from bdh.registry import get_task

        if task == "induction":
            fields = {"vocab_size": self.induction_vocab, "triggers": self.induction_triggers}
        else:
            fields = {"vocab_size": self.recall_vocab, "num_kv_pairs": facts or self.recall_pairs}
            fields["gap_max"] = self.recall_gap_max
        try:
            get_task(task).config_class(seq_len=seq_len or self.seq_len, **fields)
        except ValueError as exc:
            where = f"{task} with {facts} facts" if facts else task
            raise type(exc)(f"{self.experiment}: {where}: {exc}") from None
        return {"name": task, "seq_len": seq_len or self.seq_len, **fields}

    def model_section(self, model: str, task: str) -> dict[str, Any]:
        """The ``model`` section of ``model`` on ``task``: BDH at ``width``, any other sized to its parameter count (or,
        with ``zoo_match: state``, the rows of `KEY_WIDTHS` to BDH's state size)."""
        vocab = self.induction_vocab if task == "induction" else self.recall_vocab
        base, sets = zoo_row(model)
        if self.zoo_match == "state" and base in KEY_WIDTHS:
            bdh = BDHConfig(**{k: v for k, v in self.model_section("bdh", task).items() if k != "name"})
            fields = {"vocab_size": vocab, "seq_len": self.seq_len, "n_layer": self.n_layer, "n_head": self.n_head}
            config = state_matched_config(base, bdh.state_size(), width=self.width, causal=True, **fields, **sets)
            return section_of(config, base)
        section = sized_section(
            model,
            self.width,
            vocab_size=vocab,
            seq_len=self.seq_len,
            n_layer=self.n_layer,
            n_head=self.n_head,
            neuron_mult=self.neuron_mult,
            causal=True,
            options={"gpt": {"positional": self.gpt_positional}},
        )
        if self.train_chunk and section["name"] == "bdh":
            section = {**section, "attention": "chunked", "chunk_size": self.train_chunk}
        return section
