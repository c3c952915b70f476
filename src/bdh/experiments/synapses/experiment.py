"""``bdh experiment synapses``: write a translation corpus, train a small BDH on it, and `analyse` it
(paper section 6.3, Figs. 12-13, appendix B.3)."""

from __future__ import annotations

import dataclasses
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar

import torch

from bdh.experiments.common import QUICK, ExperimentConfig, train_lm, write_corpus
from bdh.model import BDH
from bdh.tasks.multilingual import LANGUAGES
from bdh.typed_config import bounded

from ..scaffold import Log
from .analysis import analyse
from .options import SynapseOptions


@dataclass(frozen=True)
class Config(SynapseOptions):
    """``bdh experiment synapses``: the analysis (every field of `SynapseOptions`, inherited, so ``--set search=100``
    names them directly) plus the corpus, the model and training. ``seed`` also seeds the corpus and training (so the
    untrained null is the trained model's initialisation), and ``lexicon_seed`` also makes the corpus.
    """

    # model
    # n_layer, n_embd, n_head, n_neurons, dropout: the model (the paper's, appendix B.3: docs/experiments.md).
    n_layer: int = bounded(4, ge=2, why="sigma links two layers")
    n_embd: int = bounded(64, ge=1)
    n_head: int = bounded(4, ge=1)
    n_neurons: int = bounded(2048, ge=1)
    dropout: float = bounded(0.0, ge=0, lt=1)
    # corpus
    # language pairs of the translation stream.
    pairs: tuple[tuple[str, str], ...] = (("en", "es"), ("en", "fr"), ("en", "pt"))
    # bytes of the stream; concept_rate: the share of its sentences that name a concept.
    corpus_bytes: int = bounded(4_000_000, ge=1)
    concept_rate: float = bounded(0.5, gt=0, le=1)
    # training
    # steps, batch_size, seq_len, lr: training (AdamW, warmup and linear decay; `train_lm`).
    steps: int = bounded(400, ge=1)
    batch_size: int = bounded(16, ge=1)
    seq_len: int = bounded(128, ge=1)
    lr: float = bounded(3e-3, gt=0)

    #: the presets (`bdh.typed_config.TypedConfig.PRESETS`, ``--quick`` / ``--full``):
    #: quick: A smoke test: a tiny model, few steps, small sets.
    PRESETS: ClassVar[dict[str, dict[str, Any]]] = {
        "quick": {
            **QUICK,
            "n_head": 2,
            "steps": 30,
            "batch_size": 8,
            "seq_len": 64,
            "search": 24,
            "heldout": 12,
            "top_k": 3,
        },
    }

    def __post_init__(self) -> None:
        self._coerce()  # the fields converted to their types (``--set`` values arrive as YAML)
        super().__post_init__()  # the declared ranges (of the analysis fields too) and their checks
        if self.n_neurons % self.n_head:
            self._fail("n_neurons", f"{self.n_neurons} is not divisible by n_head = {self.n_head}")
        if self.corpus_bytes < 4 * self.seq_len:
            self._fail("corpus_bytes", f"{self.corpus_bytes} is too small for seq_len {self.seq_len}")
        self._check_pairs()
        self.resolved_layer(self.n_layer)
        if self.head >= self.n_head:
            self._fail("head", f"{self.head} does not exist (n_head = {self.n_head})")

    def _check_pairs(self) -> None:
        """Pairs of two different known languages that include the analysis languages."""
        if not isinstance(self.pairs, (tuple, list)):
            self._fail("pairs", f"must be a list of language pairs such as [[en, fr]], got {self.pairs!r}")
        if not self.pairs:
            self._fail("pairs", "give at least one language pair")
        for p in self.pairs:
            if not isinstance(p, (tuple, list)) or len(p) != 2 or p[0] == p[1] or any(x not in LANGUAGES for x in p):
                self._fail("pairs", f"{p!r} is not a pair of two different known languages ({', '.join(LANGUAGES)})")
        langs = {lang for p in self.pairs for lang in p}
        for name in ("language", "second_language"):
            if getattr(self, name) not in langs:
                self._fail(name, f"{getattr(self, name)!r} is not in the corpus pairs ({', '.join(sorted(langs))})")

    size = ExperimentConfig.size  # the model's `ModelSize`

    def options(self) -> SynapseOptions:
        """The analysis part of this config: its `SynapseOptions` fields."""
        return SynapseOptions(**{f.name: getattr(self, f.name) for f in dataclasses.fields(SynapseOptions)})


def _setup_rows(config: Config, train_s: float, metrics: dict[str, float]) -> list[tuple[str, Any]]:
    """The rows of the report's settings table that describe the corpus, the model and its training."""
    pairs = ", ".join("-".join(p) for p in config.pairs)
    val_loss, val_bpb = metrics.get("val_loss", float("nan")), metrics.get("val_bpb", float("nan"))
    return [
        (
            "model",
            f"BDH-GPU, {config.n_layer} layers, d = {config.n_embd}, {config.n_head} heads, n = {config.n_neurons}",
        ),
        ("corpus", f"{config.corpus_bytes:,} bytes, pairs {pairs}, concept rate {config.concept_rate}"),
        (
            "training",
            f"{config.steps} steps x {config.batch_size} x {config.seq_len} bytes, lr {config.lr}, "
            f"seed {config.seed}, {train_s / 60:.1f} min",
        ),
        ("validation loss", f"{val_loss:.3f} nats/byte ({val_bpb:.3f} bits/byte)"),
    ]


def run(config: Config, out: Path, *, log: Log = print) -> Path:
    """Write the corpus, train the model, and `analyse` it (with the untrained model of the same seed as
    the null); returns the path of ``report.md``."""
    t_start = time.time()
    out = Path(out)
    log(f"[synapses] corpus: {config.corpus_bytes:,} bytes of {', '.join('-'.join(p) for p in config.pairs)}")
    data = write_corpus(
        out / "data" / "corpus.txt",
        config.pairs,
        config.corpus_bytes,
        seed=config.seed,
        lexicon_seed=config.lexicon_seed,
        concept_rate=config.concept_rate,
    )
    t0 = time.time()
    log(f"[synapses] training {config.steps} steps of {config.batch_size} x {config.seq_len} bytes")
    result = train_lm(
        out / "runs" / "bdh",
        data,
        config.size,
        steps=config.steps,
        batch_size=config.batch_size,
        seq_len=config.seq_len,
        lr=config.lr,
        seed=config.seed,
        progress="auto",
    )
    train_s = time.time() - t0
    model = result.model
    torch.manual_seed(config.seed)  # the trainer initialises the model right after this seed
    untrained = BDH(model.config)
    metrics = {k: float(v) for k, v in (result.metrics or {}).items()}
    report = analyse(
        model,
        config.options(),
        out,
        untrained=untrained,
        log=log,
        setup=_setup_rows(config, train_s, metrics),
        title="Monosemantic synapses (paper section 6.3): bdh experiment synapses",
    )
    report.results["config"] = dataclasses.asdict(config)
    report.results["training"] = {"metrics": metrics, "steps": result.step, "run": "runs/bdh"}
    timings = report.results["timings"]
    timings.update(training_s=round(train_s, 1), total_s=round(time.time() - t_start, 1))
    report.text(
        f"Wall time: {(time.time() - t_start) / 60:.1f} min in all ({train_s / 60:.1f} min training, "
        f"{timings['analysis_s'] / 60:.1f} min analysis), {torch.get_num_threads()} PyTorch thread(s)."
    )
    return report.write(out)
