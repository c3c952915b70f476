"""What the section-6.3 and section-7 experiments share: corpora, short training runs, per-direction losses
on the translation stream (the target-side loss of paper Table 2), the bigram reference (section 7.2) and the
markdown report."""

from __future__ import annotations

import dataclasses
import json
import math
import random
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar

import numpy as np
import torch
import torch.nn.functional as F

from bdh import plotting
from bdh.errors import Interrupted, UserError
from bdh.outputs import check_output, empty_folder, json_default, write_text
from bdh.tasks.base import IGNORE_INDEX
from bdh.tasks.multilingual import Lexicon, StreamConfig, make_sentence, segment, write_stream
from bdh.typed_config import TypedConfig

#: the seed offset of held-out evaluation sentences (training streams use small seeds)
EVAL_SEED = 1_000_003
#: the model and corpus of every experiment's smoke test (``--quick``): a tiny model on a small corpus
QUICK = {"n_layer": 2, "n_embd": 32, "n_neurons": 256, "corpus_bytes": 200_000}


# ------------------------------------------------------------------------------------------ model size
@dataclass(frozen=True)
class ModelSize:
    """The BDH size of an experiment (paper appendix E names: L layers, D = n_embd, h heads, n neurons)."""

    n_layer: int = 4
    n_embd: int = 64
    n_head: int = 4
    n_neurons: int = 2048
    dropout: float = 0.0

    def section(self) -> dict[str, Any]:
        """The ``model`` section of a run config."""
        return {"name": "bdh", **dataclasses.asdict(self)}


class ExperimentConfig(TypedConfig):
    """Mixin of the experiments' configs: `TypedConfig`'s field checks, with errors named ``<experiment>.<field>``."""

    #: the experiment's command-line name, which prefixes every error
    experiment: ClassVar[str] = "experiment"

    @classmethod
    def _key(cls, field: str) -> str:
        return f"{cls.experiment}.{field}"

    def _check_size(self) -> None:
        """Neurons and width divisible by the heads (their ranges are declared on the fields)."""
        if self.n_neurons % self.n_head or self.n_embd % self.n_head:
            raise UserError(
                f"{self.experiment}: n_neurons ({self.n_neurons}) and n_embd ({self.n_embd}) must be "
                f"multiples of n_head ({self.n_head})"
            )

    def _check_device(self) -> None:
        """``device``: a device name (cpu, cuda, auto, ...), checked where the trainer reads it."""
        if not isinstance(self.device, str) or not self.device:
            self._fail("device", f"must be a device name such as cpu or cuda, got {self.device!r}")

    def _check_pairs(self) -> None:
        """``pairs``: language pairs of two different languages (`bdh.tasks.multilingual.parse_pairs`)."""
        from bdh.tasks.multilingual import LANGUAGES, parse_pairs

        for a, b in parse_pairs(self.pairs):
            if a not in LANGUAGES or b not in LANGUAGES or a == b:
                self._fail("pairs", f"{a}-{b} is not a pair of two different languages among {', '.join(LANGUAGES)}")

    def __post_init__(self) -> None:
        """Every field converted to its type hint (``--set`` values arrive as YAML: `TypedConfig._coerce`), then the
        declared ranges checked; an experiment's own ``__post_init__`` calls this first."""
        self._coerce()
        super().__post_init__()

    def inputs(self) -> tuple[str, ...]:
        """The files and folders the experiment reads (its data, models it measures): its output folder may be none
        of them and hold none of them (`bdh.experiments.launch.run_experiment`, `bdh.outputs.check_output`)."""
        return ()

    @property
    def size(self) -> ModelSize:
        return ModelSize(self.n_layer, self.n_embd, self.n_head, self.n_neurons, self.dropout)


# ------------------------------------------------------------------------------------------ corpora
def write_corpus(
    path: str | Path,
    pairs: Sequence[tuple[str, str]],
    size_bytes: int,
    *,
    seed: int = 0,
    lexicon_seed: int = 0,
    concept_rate: float = 0.5,
) -> Path:
    """Write ``size_bytes`` of the translation stream of ``pairs`` to ``path`` (atomically)."""
    config = StreamConfig(
        pairs=tuple(tuple(p) for p in pairs), seed=seed, lexicon_seed=lexicon_seed, concept_rate=concept_rate
    )
    return write_stream(path, config, size_bytes)


def direction_segments(
    src: str, tgt: str, count: int, *, seed: int = 0, lexicon_seed: int = 0, concept_rate: float = 0.5
) -> list[tuple[str, str, str, str]]:
    """``count`` held-out (source language, source text, target language, target text) tuples of one
    direction, from a generator seeded apart from every training stream."""
    from bdh.tasks.multilingual import _random_concept

    lexicon = Lexicon(lexicon_seed)
    rng = random.Random(f"eval-{EVAL_SEED + seed}-{src}-{tgt}")
    out = []
    for _ in range(count):
        sentence = make_sentence(rng, _random_concept(rng, concept_rate))
        out.append((src, sentence.render(src, lexicon), tgt, sentence.render(tgt, lexicon)))
    return out


def held_out_directions(config: Any) -> dict[tuple[str, str], list[tuple[str, str, str, str]]]:
    """``config.eval_segments`` held-out segments (`direction_segments`) of each of ``config.directions()``."""
    return {d: direction_segments(*d, config.eval_segments, seed=config.seed) for d in config.directions()}


def encode_segment(src: str, src_text: str, tgt: str, tgt_text: str) -> tuple[bytes, tuple[int, int], tuple[int, int]]:
    """The bytes of ``<F:src>src_text<T:tgt>tgt_text`` and the byte spans [start, stop) of the two texts."""
    head, mid = f"<F:{src}>".encode(), f"<T:{tgt}>".encode()
    s, t = src_text.encode("utf-8"), tgt_text.encode("utf-8")
    data = segment(src, src_text, tgt, tgt_text).encode("utf-8")
    s0 = len(head)
    t0 = s0 + len(s) + len(mid)
    return data, (s0, s0 + len(s)), (t0, t0 + len(t))


# ------------------------------------------------------------------------------------------ training
def train_lm(run_dir: str | Path, data: str | Path | None, size: ModelSize, **kwargs: Any) -> Any:
    """Train a BDH byte model on the stream in ``data`` with `bdh.train`: the run of `lm_config` (``kwargs``: its
    keywords); returns the `TrainResult`."""
    return train_config(lm_config(run_dir, data, size, **kwargs))


def train_config(config: Any) -> Any:
    """Train a built run config (`lm_config`) with `bdh.train`; returns the `TrainResult`, or raises `Interrupted`
    when a signal stopped it."""
    from bdh.train import train

    result = train(config)
    if result.interrupted is not None:
        raise Interrupted(result.interrupted)
    return result


def lm_config(
    run_dir: str | Path,
    data: str | Path | None,
    size: ModelSize,
    *,
    steps: int,
    batch_size: int,
    seq_len: int,
    lr: float,
    seed: int = 0,
    bptt: str = "window",
    init_from: str | Path | None = None,
    warmup_steps: int | None = None,
    threads: int | None = None,
    progress: str = "none",
    device: str = "cpu",
    task: dict[str, Any] | None = None,
    sections: dict[str, dict[str, Any]] | None = None,
) -> Any:
    """The run config of `train_lm` (built and checked, nothing written): a BDH byte model on the stream in ``data``.

    The paper's schedule (appendix B.3) compressed: warmup of a tenth of the run, linear decay to ``lr / 10``.
    ``size``: a `ModelSize` or a whole ``model`` section; ``sections``: field overrides by section."""
    from bdh.train.config import sweep_run_config

    if task is None:
        task = {"name": "text", "data": None if data is None else str(data), "seq_len": seq_len, "val_fraction": 0.02}
    return sweep_run_config(
        dict(size) if isinstance(size, dict) else size.section(),
        task,
        run_dir,
        lr=lr,
        steps=steps,
        batch_size=batch_size,
        seed=seed,
        eval={"every": 0, "batches": 4, "final_batches": 4},
        progress=progress,
        warmup_steps=warmup_steps,
        sections=sections,
        device=device,
        precision="fp32",
        threads=threads,
        check_memory=False,
        bptt=bptt,
        init_from=str(init_from) if init_from is not None else None,
    )


class Runs:
    """An experiment's training runs, each in ``out/runs/<name>`` (`train_lm`), and the seconds each took
    (``timings``, in the order they ran); ``defaults``: `train_lm`'s keywords (and ``size``) shared by the runs."""

    def __init__(self, out: Path, log: Callable[[str], None], **defaults: Any) -> None:
        self.out, self.log, self.defaults = Path(out), log, defaults
        self.timings: dict[str, float] = {}

    @contextmanager
    def timed(self, name: str) -> Iterator[None]:
        """Count the seconds of the block as the time of run ``name``."""
        t0 = time.time()
        yield
        self.timings[name] = time.time() - t0

    def train(self, name: str, data: Path | None, **options: Any) -> Any:
        """The `TrainResult` of run ``name`` on ``data``: `train_lm` with ``options`` over the ``defaults``."""
        options = {**self.defaults, **options}
        size = options.pop("size")
        return train_lm(self.out / "runs" / name, data, size, **options)


class Clock:
    """The wall and process CPU seconds since it was made (what a report says the experiment took)."""

    def __init__(self) -> None:
        self.start, self.cpu_start = time.time(), time.process_time()

    def seconds(self) -> tuple[float, float]:
        """(wall seconds, process CPU seconds) so far."""
        return time.time() - self.start, time.process_time() - self.cpu_start


def duration(seconds: float, hour_digits: int = 1) -> str:
    """Seconds as a short text: 40 s, 12.5 min, 3.2 h."""
    if seconds < 60:
        return f"{seconds:.0f} s"
    return f"{seconds / 60:.1f} min" if seconds < 3600 else f"{seconds / 3600:.{hour_digits}f} h"


# ------------------------------------------------------------------------------------------ evaluation
@dataclass
class SideLosses:
    """Mean next-byte losses (nats per byte) on the source and target texts of a set of segments."""

    source: float
    target: float
    source_bytes: int
    target_bytes: int

    def to_dict(self) -> dict[str, float | int]:
        return dataclasses.asdict(self)

    @classmethod
    def of(cls, sums: Sequence[float], counts: Sequence[int]) -> SideLosses:
        """The means of the loss ``sums`` over the ``counts`` of each side (index 1 source, 2 target)."""
        return cls(sums[1] / max(counts[1], 1), sums[2] / max(counts[2], 1), counts[1], counts[2])


def _add_sides(sums: list[float], counts: list[int], nll: Any, code: Any) -> None:
    """Add the losses ``nll`` of each side (``code`` 1 source, 2 target; tensors or arrays) to ``sums``/``counts``."""
    for side in (1, 2):
        m = code == side
        sums[side] += float(nll[m].sum())
        counts[side] += int(m.sum())


def _side_masks(segments: Sequence[tuple[str, str, str, str]]) -> tuple[list[bytes], list[np.ndarray]]:
    """Per segment: its bytes, and a code per predicted position (0 delimiter, 1 source, 2 target); position ``i``
    predicts byte ``i + 1``."""
    datas, codes = [], []
    for seg in segments:
        data, (s0, s1), (t0, t1) = encode_segment(*seg)
        code = np.zeros(len(data) - 1, dtype=np.int64)
        code[s0 - 1 : s1 - 1] = 1
        code[t0 - 1 : t1 - 1] = 2
        datas.append(data)
        codes.append(code)
    return datas, codes


@torch.no_grad()
def coded_losses(
    model: torch.nn.Module, datas: Sequence[bytes], codes: Sequence[np.ndarray], *, batch_size: int = 32
) -> tuple[list[float], list[int]]:
    """Next-byte loss sums and counts of ``model`` per code over byte sequences read from a zero state.

    ``codes[i][t]`` labels the prediction of byte t + 1 of ``datas[i]`` (0: not scored); batches are right-padded,
    which a causal model never sees."""
    device = next(model.parameters()).device
    was = model.training
    model.eval()
    sums, counts = [0.0, 0.0, 0.0], [0, 0, 0]
    try:
        for i in range(0, len(datas), batch_size):
            chunk, chunk_codes = datas[i : i + batch_size], codes[i : i + batch_size]
            T = max(len(d) for d in chunk) - 1
            x = torch.zeros(len(chunk), T, dtype=torch.long)
            y = torch.full((len(chunk), T), IGNORE_INDEX, dtype=torch.long)
            c = torch.zeros(len(chunk), T, dtype=torch.long)
            for b, (d, code) in enumerate(zip(chunk, chunk_codes, strict=True)):
                arr = torch.tensor(list(d), dtype=torch.long)
                x[b, : len(d) - 1] = arr[:-1]
                y[b, : len(d) - 1] = arr[1:]
                c[b, : len(d) - 1] = torch.from_numpy(code)
            logits = model(x.to(device)).float().cpu()
            nll = F.cross_entropy(
                logits.reshape(-1, logits.shape[-1]), y.reshape(-1), ignore_index=IGNORE_INDEX, reduction="none"
            ).view_as(y)
            _add_sides(sums, counts, nll, torch.where(y != IGNORE_INDEX, c, 0))
    finally:
        model.train(was)
    return sums, counts


def segment_losses(
    model: torch.nn.Module, segments: Sequence[tuple[str, str, str, str]], *, batch_size: int = 32
) -> SideLosses:
    """Source- and target-side next-byte losses of ``model`` on ``segments``, each read from a zero state."""
    if not segments:
        raise UserError("segment_losses: no segments")
    sums, counts = coded_losses(model, *_side_masks(segments), batch_size=batch_size)
    return SideLosses.of(sums, counts)


class BigramModel:
    """The letter-bigram model of a byte stream: P(b | a) from counts with add-``alpha`` smoothing."""

    def __init__(self, data: bytes | np.ndarray, alpha: float = 0.1):
        if isinstance(data, (bytes, bytearray)):
            arr = np.frombuffer(data, dtype=np.uint8)
        else:
            arr = np.asarray(data, dtype=np.uint8)
        if len(arr) < 2:
            raise UserError("BigramModel: need at least two bytes")
        counts = np.zeros((256, 256), dtype=np.float64)
        np.add.at(counts, (arr[:-1], arr[1:]), 1.0)
        counts += alpha
        self.logp = np.log(counts / counts.sum(axis=1, keepdims=True))

    def losses(self, segments: Sequence[tuple[str, str, str, str]]) -> SideLosses:
        """Source- and target-side losses (nats per byte) on the positions `segment_losses` scores."""
        datas, codes = _side_masks(segments)
        sums, counts = [0.0, 0.0, 0.0], [0, 0, 0]
        for d, code in zip(datas, codes, strict=True):
            arr = np.frombuffer(d, dtype=np.uint8)
            _add_sides(sums, counts, -self.logp[arr[:-1], arr[1:]], code)
        return SideLosses.of(sums, counts)


# ------------------------------------------------------------------------------------------ report
def _cell(value: Any, digits: int) -> str:
    if isinstance(value, float):
        if math.isnan(value):
            return "n/a"
        return f"{value:.{digits}g}" if abs(value) < 1e-3 and value != 0 else f"{value:.{digits}f}"
    return str(value)


def markdown_table(headers: Sequence[str], rows: Iterable[Sequence[Any]], digits: int = 3) -> str:
    """A markdown table; floats with ``digits`` decimals."""
    lines = ["| " + " | ".join(headers) + " |", "|" + "---|" * len(headers)]
    for row in rows:
        lines.append("| " + " | ".join(_cell(v, digits) for v in row) + " |")
    return "\n".join(lines)


class Report:
    """A markdown report built piece by piece, plus the machine-readable results behind it."""

    def __init__(self, title: str):
        self.parts: list[str] = [f"# {title}"]
        self.results: dict[str, Any] = {}

    def heading(self, text: str, level: int = 2) -> None:
        self.parts.append("#" * level + " " + text)

    def text(self, text: str) -> None:
        self.parts.append(text.strip())

    def table(self, headers: Sequence[str], rows: Iterable[Sequence[Any]], digits: int = 3) -> None:
        self.parts.append(markdown_table(headers, rows, digits))

    def findings(self, found: Sequence[tuple[str, bool | None, str]]) -> None:
        """The "what matched" table: (claim, held: True / False / None = undecidable, the numbers behind it)."""
        held = {True: "yes", False: "no", None: "n/a"}
        self.table(["claim", "held here", "numbers"], [[c, held[h], n] for c, h, n in found])

    @staticmethod
    def findings_json(found: Sequence[tuple[str, bool | None, str]]) -> list[dict[str, Any]]:
        """The findings of `findings` as results.json holds them."""
        return [{"claim": c, "held": h, "numbers": n} for c, h, n in found]

    def timings(self, timings: dict[str, float]) -> None:
        """The "Training time" section: the seconds of each run."""
        self.heading("Training time")
        self.table(["run", "seconds"], [[k, round(v, 1)] for k, v in timings.items()])

    def figure(self, path: str, caption: str) -> None:
        """A figure, by its path relative to the report."""
        self.parts.append(f"![{caption}]({path})\n\n*{caption}*")

    def markdown(self) -> str:
        return "\n\n".join(self.parts) + "\n"

    def write(self, out: str | Path) -> Path:
        """Write ``report.md`` and ``results.json`` into ``out``; returns the report's path."""
        out = Path(out)
        out.mkdir(parents=True, exist_ok=True)
        results = json.dumps(self.results, indent=2, sort_keys=True, default=json_default)
        write_text(out / "results.json", results + "\n")
        write_text(out / "report.md", self.markdown())
        return out / "report.md"


def save_figure(fig: Any, stem: Path) -> str:
    """Write a figure as ``stem.png`` and ``stem.svg`` (`bdh.plotting.save_figure`) and return the png's path
    relative to the report (``figures/<name>.png``)."""
    plotting.save_figure(fig, stem)
    return f"figures/{stem.name}.png"


def prepare_out(
    out: str | Path,
    *,
    overwrite: bool = False,
    inputs: Sequence[str | Path] = (),
    how: str = "pass --overwrite to replace it",
) -> Path:
    """The experiment's output folder, created empty; a non-empty one is refused unless ``overwrite`` (then emptied
    here, since runs write into it as they go), and one that holds an input always is (`bdh.outputs.check_output`)."""
    out = check_output(out, overwrite=overwrite, inputs=inputs, folder=True, how=how)
    if out.is_dir():
        empty_folder(out)  # all but the lock of a caller that holds it (`bdh.outputs.folder_lock`)
    out.mkdir(parents=True, exist_ok=True)
    return out
