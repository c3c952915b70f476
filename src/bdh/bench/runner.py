"""The shared machinery of the ``bdh bench`` suites: one training run per sweep point, the result rows,
best-over-learning-rate selection, and the output folder (CSV, markdown table, plots).

A suite (``bdh.bench.recall``, ``boardpath``, ``sudoku``) turns its sweep definition into a list of
`RunSpec`: one training run each (model, task setting, width, learning rate, seed) with the run config
sections it needs. `run_suite` trains them one after the other through the public trainer
(`bdh.train.Trainer`), evaluates each trained model on the task's validation set itself (per example,
so metrics of different validation slices are never mixed), and appends one row per run to
``runs.csv``. From those rows `best_over_lr` keeps, for every (model, setting, width), the learning
rate with the best mean score over seeds, as Zoology reports its sweeps; those rows (one per seed) are
``results.csv``, and the plots are drawn from them by `bdh.viz.plots.bench_plots`. `summarize` turns them
into one row per (model, setting, width) with the mean, min and max over seeds of every metric, and marks
the winner of each (setting, width) only where it wins beyond the spread of the seeds (`pick_winner`);
those rows are ``summary.csv`` and ``results.md``. Each board suite (and recall) adds reference rows, model
``trivial``: the score of the trivial answer (`Trivial`, `trivial_rows`), by the same evaluation code, shown in
every output next to the models but never a winner.

Output folder (``--out``)::

    runs.csv           one row per training run (every learning rate); the resume ledger
    results.csv        the rows of the best learning rate per (model, setting, width), one per seed
    summary.csv        one row per (model, setting, width): mean, min and max over seeds, and the winner
    results.md         the summary as a markdown table (mean and min-max range of each metric, winners)
    plots/             bench-<suite>-<x>.png/.svg (accuracy against width and against state size)
    runs/<model>/...   the trainer's run folder of every run (config.yaml, metrics.jsonl, checkpoint)

Every file is written to a temporary name and renamed. With ``resume`` the runs already in
``runs.csv`` are skipped.
"""

from __future__ import annotations

import csv
import dataclasses
import io
import json
import math
import shutil
import sys
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar

import torch

from bdh.errors import Interrupted, UserError
from bdh.outputs import check_output, empty_folder, folder_entries, folder_lock, write_text
from bdh.typed_config import TypedConfig, bounded

#: columns every result row has, in this order (suite-specific setting and metric columns follow)
BASE_COLUMNS = [
    "suite",
    "model",
    "setting",
    "width",
    "n_embd",
    "n_layer",
    "params",
    "state_size",
    "lr",
    "seed",
    "steps",
    "batch_size",
    "tokens",
    "wall_s",
    "tok_per_s",
    "cpu_s_per_step",
]
#: columns written after the metrics
TAIL_COLUMNS = ["lrs_tried", "config", "run_dir"]
#: speed columns summarised over seeds (results.md shows their mean)
SPEED_COLUMNS = ["wall_s", "tok_per_s"]
#: the ``winner`` of a (setting, width) where no model wins beyond the spread
NO_WINNER = "—"
#: the ``model`` of the reference rows: the score of the trivial answer (never trained, never a winner)
TRIVIAL = "trivial"


class BenchError(UserError):
    """A bench request that cannot be run (bad sweep, existing output folder); one line."""


class BenchInterrupted(Interrupted):
    """A run was stopped by SIGINT/SIGTERM; it is not recorded, so ``--resume`` trains it again."""


@dataclass
class RunSpec:
    """One training run of a suite.

    Attributes:
        suite: the suite name (``recall``, ``boardpath``, ``sudoku``).
        model: the registered model name.
        setting: a short label of the task setting (e.g. ``N64-D4``).
        setting_columns: the task setting as result columns (e.g. ``{"seq_len": 64, "num_pairs": 4}``).
        width: the nominal width of the sweep (BDH's ``n_embd``; baselines are sized to BDH's
            parameter count at this width).
        lr: peak learning rate.
        seed: the run's seed (model initialisation and data order; the data sets are fixed).
        model_section, task_section: the ``model`` and ``task`` sections of the run config.
        steps, batch_size: optimiser steps and sequences per step.
        eval_batch_size, eval_batches: the validation pass after training (None: the whole set).
    """

    suite: str
    model: str
    setting: str
    setting_columns: dict[str, Any]
    width: int
    lr: float
    seed: int
    model_section: dict[str, Any]
    task_section: dict[str, Any]
    steps: int
    batch_size: int
    eval_batch_size: int = 64
    eval_batches: int | None = None

    def key(self) -> tuple[str, ...]:
        """What identifies the run in ``runs.csv`` (used to skip it on resume)."""
        return run_key(
            {
                "model": self.model,
                "setting": self.setting,
                "width": self.width,
                "lr": self.lr,
                "seed": self.seed,
                "steps": self.steps,
                "batch_size": self.batch_size,
            }
        )

    def run_name(self) -> str:
        return f"{self.setting}-w{self.width}-lr{self.lr:g}-s{self.seed}-{self.steps}x{self.batch_size}"


def run_key(row: dict[str, Any]) -> tuple[str, ...]:
    """The identity of a run row: model, setting, width, learning rate, seed, steps and batch size,
    normalised as text (a run of another length is another result)."""
    return (
        str(row["model"]),
        str(row["setting"]),
        str(int(float(row["width"]))),
        f"{float(row['lr']):.6g}",
        str(int(float(row["seed"]))),
        str(int(float(row["steps"]))),
        str(int(float(row["batch_size"]))),
    )


@dataclass
class Sweep(TypedConfig):
    """What the sweep of every suite has; each suite's sweep adds its task settings and data sets.

    A `TypedConfig`: every field declares its range (checked however the sweep is built, the constructor,
    ``dataclasses.replace`` or ``from_dict``; errors name the field as ``<suite>.<field>``); `validate` checks
    the rules between fields. A suite that changes a default keeps the range with `redefault`.

    Attributes:
        widths: BDH's ``n_embd``; the baselines are matched to BDH's parameter count at each width.
        models: any of the suite's `MODELS`.
        lrs, seeds: the learning rates (the best is reported) and run seeds (model initialisation and data
            order; the data sets come from ``data_seed``). Two seeds by default, so that the results show
            a spread and a winner can be declared beyond it.
        steps, batch_size: optimiser steps and examples per step of every run.
        n_layer, n_head: layers (the suite says which) and heads of every model.
        neuron_mult: BDH's n = neuron_mult * n_embd.
        data_seed: the seed of the data sets.
        eval_batch_size: examples per batch of the validation pass after training.
    """

    #: the suite's name (its runs and errors) and the models it knows
    suite: ClassVar[str]
    MODELS: ClassVar[tuple[str, ...]]

    widths: tuple[int, ...] = bounded((32, 64), ge=1)
    models: tuple[str, ...] = ()
    lrs: tuple[float, ...] = bounded((1e-3, 3e-3), gt=0)
    seeds: tuple[int, ...] = bounded((0, 1), ge=0, lt=2**63)
    steps: int = bounded(300, ge=1)
    batch_size: int = bounded(32, ge=1)
    n_layer: int = bounded(4, ge=1)
    n_head: int = bounded(4, ge=1)
    neuron_mult: int = bounded(16, ge=1)
    data_seed: int = bounded(0, ge=0)
    eval_batch_size: int = bounded(128, ge=1)

    @classmethod
    def _key(cls, field: str) -> str:
        """Errors name a field ``recall.lrs`` (the suite), or ``Sweep.lrs`` for a class without a suite."""
        return f"{getattr(cls, 'suite', cls.__name__)}.{field}"

    def validate(self) -> None:
        """A one-line `BenchError` for a rule between fields (a suite adds its own; the declared ranges are
        checked when the sweep is built): BDH's n = neuron_mult * width neurons must split into ``n_head``
        heads of an even size (RoPE rotates pairs of neurons) at every width."""
        for w in self.widths:
            n = self.neuron_mult * w
            if n % (2 * self.n_head):
                raise BenchError(
                    f"{self._key('widths')}: at width {w} BDH has n = neuron_mult x width = {n} neurons, not a "
                    f"multiple of 2 x n_head = {2 * self.n_head} (each head needs an even share: RoPE rotates pairs)"
                )

    def runs(
        self,
        model: str,
        width: int,
        setting: str,
        setting_columns: dict[str, Any],
        model_section: dict[str, Any],
        task_section: dict[str, Any],
    ) -> list[RunSpec]:
        """The runs of one model, setting and width: one per learning rate and seed."""
        return [
            RunSpec(
                self.suite,
                model,
                setting,
                setting_columns,
                width,
                lr,
                seed,
                model_section,
                task_section,
                self.steps,
                self.batch_size,
                self.eval_batch_size,
            )
            for lr in self.lrs
            for seed in self.seeds
        ]


def redefault(base: type, name: str, default: Any) -> Any:
    """The field ``name`` of the sweep class ``base`` with another default and the same declared range, for a
    suite's sweep (a dataclass field declared again in a subclass replaces the base's, range included), e.g.
    ``steps: int = redefault(Sweep, "steps", 3000)``."""
    return dataclasses.field(default=default, metadata=base.__dataclass_fields__[name].metadata)


@dataclass(frozen=True)
class Trivial:
    """The trivial answer of a suite, scored as a reference row (`trivial_rows`).

    The answer reads each position alone: it predicts the target seen most often in training with that
    position's input token (`fit_token_prior`). On boardpath that is the input board with no path cell, on
    Sudoku one digit for every blank, on MQAR one value per key (chance).

    Attributes:
        label: how results.md names the row (``model`` is `TRIVIAL` in the CSV files), e.g.
            ``trivial (predict no path)``.
        train_size: the number of training examples of a task (the first that many examples of its training
            stream are the training set, each once).
    """

    label: str
    train_size: Callable[[Any], int]


#: the smoke-test (``--quick``, one seed) and GPU-sized (``--full``) values every suite's sweep shares
QUICK = {"widths": (16,), "seeds": (0,), "steps": 20, "batch_size": 16, "neuron_mult": 8}
FULL = {"batch_size": 64, "neuron_mult": 32}


@dataclass
class SuiteDef:
    """What the runner needs to know about a suite.

    Attributes:
        name: suite name; the ``suite`` column and the plot names.
        setting_columns: the names of the task-setting columns, in table order.
        metrics: the metric columns (validation metrics computed after training), in table order.
        score: the columns compared (in this order, higher is better) to pick the best learning rate.
        extra: optional ``(spec, model, task) -> dict`` of extra columns measured on the trained model
            (the Sudoku depth sweep, the recall suite's longer evaluation).
        extra_columns: the names of those extra columns.
        extra_metrics: those of the extra columns that are metrics: summarised over seeds and shown in
            results.md like ``metrics`` (e.g. ``accuracy_longer``).
        extra_settings: those of the extra columns that describe the setting, the same for every seed
            (e.g. ``longer_len``): copied into the summary and shown next to the setting.
        trivial: the suite's reference row, the score of the trivial answer (`Trivial`); None: no such row.
    """

    name: str
    setting_columns: list[str]
    metrics: list[str]
    score: list[str]
    extra: Callable[[RunSpec, torch.nn.Module, Any], dict[str, Any]] | None = None
    extra_columns: list[str] = field(default_factory=list)
    extra_metrics: list[str] = field(default_factory=list)
    extra_settings: list[str] = field(default_factory=list)
    trivial: Trivial | None = None

    def columns(self) -> list[str]:
        return (
            BASE_COLUMNS[:3]
            + self.setting_columns
            + BASE_COLUMNS[3:]
            + ["val_loss"]
            + self.metrics
            + self.extra_columns
            + TAIL_COLUMNS
        )

    def summarised(self) -> list[str]:
        """The columns summarised over seeds (mean, min, max): the loss, the metrics, the speed."""
        return ["val_loss", *self.metrics, *self.extra_metrics, *SPEED_COLUMNS]

    def shared_columns(self) -> list[str]:
        """The columns of summary.csv that every seed of a (model, setting, width) shares, in order."""
        return (
            BASE_COLUMNS[:3]
            + self.setting_columns
            + self.extra_settings
            + ["width", "n_embd", "n_layer", "params", "state_size", "lr", "lrs_tried", "steps", "batch_size"]
        )

    def summary_columns(self) -> list[str]:
        """The columns of summary.csv, in order."""
        return (
            self.shared_columns()
            + ["seeds"]
            + [f"{c}_{s}" for c in self.summarised() for s in ("mean", "min", "max")]
            + ["winner", "winner_note", "reference"]
        )


# ---------------------------------------------------------------------- one run
def evaluate_examples(
    model: torch.nn.Module, task: Any, batch_size: int, batches: int | None, seed: int
) -> dict[str, float]:
    """The task's validation metrics under their own names plus ``val_loss`` (nats per scored token; NaN
    when nothing was scored): the trainer's evaluation (`bdh.train.evaluate.evaluate_metrics`), each batch
    weighted by its number of examples and each key averaged only over the batches that report it, so an
    MQAR per-slice accuracy is not diluted by the other slices' batches."""
    from bdh.train.evaluate import evaluate_metrics

    metrics, loss = evaluate_metrics(model, task, batch_size, batches, seed)
    return {**metrics, "val_loss": loss}


def train_one(
    spec: RunSpec, run_dir: Path, *, device: str = "cpu", threads: int | None = None, suite: SuiteDef | None = None
) -> dict[str, Any]:
    """Train one run with the public trainer, evaluate it, and return its result row."""
    from bdh.train import RunConfig, Trainer

    data = {
        "model": dict(spec.model_section),
        "task": dict(spec.task_section),
        "optim": {"lr": spec.lr, "min_lr": spec.lr / 10, "warmup_steps": max(1, spec.steps // 10)},
        "train": {
            "batch_size": spec.batch_size,
            "max_steps": spec.steps,
            "max_minutes": None,
            "seed": spec.seed,
            "device": device,
            "threads": threads,
            "check_memory": False,
        },
        "eval": {"every": 0, "batches": 1, "batch_size": spec.eval_batch_size},
        "log": {"every": max(1, spec.steps // 20), "progress": "none", "tensorboard": False},
        "checkpoint": {"every": 0, "keep": 1},
        "sample": {"max_new_tokens": 0},
        "run_dir": str(run_dir),
    }
    config = RunConfig.from_dict(data)
    start, cpu_start = time.time(), time.process_time()
    trainer = Trainer(config)
    try:
        result = trainer.fit()
    finally:
        trainer.close()
    if result.interrupted is not None:
        raise BenchInterrupted(result.interrupted)
    cpu_train = time.process_time() - cpu_start
    train_seconds = result.seconds
    model, task = result.model, result.task
    metrics = evaluate_examples(model, task, spec.eval_batch_size, spec.eval_batches, spec.seed)
    extra = suite.extra(spec, model, task) if suite is not None and suite.extra is not None else {}
    wall = time.time() - start
    resolved = config.to_dict()
    row: dict[str, Any] = {
        "suite": spec.suite,
        "model": spec.model,
        "setting": spec.setting,
        **spec.setting_columns,
        "width": spec.width,
        "n_embd": resolved["model"].get("n_embd", ""),
        "n_layer": resolved["model"].get("n_layer", resolved["model"].get("n_recur", "")),
        "params": sum(p.numel() for p in model.parameters()),
        "state_size": int(model.state_size()),
        "lr": spec.lr,
        "seed": spec.seed,
        "steps": result.step,
        "batch_size": spec.batch_size,
        "tokens": result.tokens,
        "wall_s": round(wall, 2),
        "tok_per_s": round(result.tokens / max(train_seconds, 1e-9), 1),
        "cpu_s_per_step": round(cpu_train / max(result.step, 1), 4),
        **metrics,
        **extra,
        "config": json.dumps(
            {"model": resolved["model"], "task": resolved["task"]}, sort_keys=True, separators=(",", ":")
        ),
        "run_dir": "",
    }
    return row


# ---------------------------------------------------------------------- the trivial answer
class TokenPrior(torch.nn.Module):
    """The trivial answer as a model: the logits at a position depend only on that position's input token.

    ``log_probs[t]`` is the log of the distribution of the targets seen with input token ``t`` (`fit_token_prior`),
    so the argmax at every position is that token's most frequent target, and the loss is the cross-entropy of
    a model that reads each position alone. It has no trainable parameter (the table is frozen).
    """

    def __init__(self, log_probs: torch.Tensor):
        super().__init__()
        self.table = torch.nn.Embedding.from_pretrained(log_probs, freeze=True)

    def forward(self, idx: torch.Tensor) -> torch.Tensor:
        return self.table(idx)

    def predictions(self) -> torch.Tensor:
        """(V,) the target predicted for each input token (the argmax of its row; ties: the smallest id)."""
        return self.table.weight.argmax(dim=-1)

    def state_size(self) -> int:
        return 0


def fit_token_prior(task: Any, train_size: int, seed: int, chunk: int = 1024) -> TokenPrior:
    """The `TokenPrior` of a task's training set: for every input token, the counts of the scored targets
    (targets other than ``IGNORE_INDEX``) seen with it at the same position, add-one smoothed over the
    ``task.vocab_size`` classes.

    The training set is read as the first ``train_size`` examples of the training stream (``task.batch("train",
    ...)`` in batches of ``chunk``, the last one cut short): each training example once, for the tasks whose
    training batches walk an epoch of the whole set (boardpath, Sudoku, MQAR with one slice).
    """
    import numpy as np

    from bdh.tasks.base import IGNORE_INDEX

    if train_size < 1:
        raise BenchError(f"trivial answer: the task {task.name!r} has no training example")
    V = int(task.vocab_size)
    codes = []
    for i in range(-(-train_size // chunk)):
        x, y = task.batch("train", i, chunk, seed)
        keep = min(chunk, train_size - i * chunk)
        x, y = x[:keep], y[:keep]
        scored = y != IGNORE_INDEX
        codes.append((x[scored].long() * V + y[scored].long()).numpy())
    pairs, counts = np.unique(np.concatenate(codes), return_counts=True)
    table = torch.zeros(V * V)  # float32 counts are exact below 2**24, far above any task's counts here
    table[torch.from_numpy(pairs)] = torch.from_numpy(counts).float()
    table = table.view(V, V).add_(1.0)
    return TokenPrior(table.div_(table.sum(dim=1, keepdim=True)).log_())


def trivial_rows(suite: SuiteDef, specs: Sequence[RunSpec], device: str = "cpu") -> list[dict[str, Any]]:
    """The reference rows of ``suite.trivial`` (none when it is None): one per (setting, width, seed) of
    ``specs``, with ``model`` `TRIVIAL`, ``reference`` the label, no training (``params``, ``state_size``,
    ``steps`` and ``tokens`` 0; ``lr`` empty) and the task's metrics scored by the models' own evaluation
    (`evaluate_examples`, then the suite's ``extra`` hook) on the `TokenPrior` of the training set, on
    ``device`` (the device of the runs).

    The score does not depend on the width, so it is computed once per task, data seed and evaluation batch size,
    and copied to every width."""
    if suite.trivial is None:
        return []
    from bdh.devices import resolve_device
    from bdh.train.config import build_section_config

    dev = resolve_device(device)
    tasks: dict[str, Any] = {}
    scores: dict[tuple[Any, ...], dict[str, Any]] = {}
    rows: list[dict[str, Any]] = []
    seen: set[tuple[str, int, int]] = set()
    for spec in specs:
        if (spec.setting, spec.width, spec.seed) in seen:
            continue
        seen.add((spec.setting, spec.width, spec.seed))
        text = json.dumps(spec.task_section, sort_keys=True)
        if text not in tasks:
            cls, config = build_section_config("task", spec.task_section)
            tasks[text] = cls(config)
        task = tasks[text]
        key = (text, task.config.data_seed_for(spec.seed), spec.eval_batch_size, spec.eval_batches)
        if key not in scores:
            model = fit_token_prior(task, suite.trivial.train_size(task), spec.seed).to(dev)
            got = evaluate_examples(model, task, spec.eval_batch_size, spec.eval_batches, spec.seed)
            if suite.extra is not None:
                got.update(suite.extra(spec, model, task))
            scores[key] = got
        rows.append(
            {
                "suite": spec.suite,
                "model": TRIVIAL,
                "setting": spec.setting,
                **spec.setting_columns,
                "width": spec.width,
                "params": 0,
                "state_size": 0,
                "lr": "",
                "seed": spec.seed,
                "steps": 0,
                "tokens": 0,
                **scores[key],
                "lrs_tried": "",
                "config": json.dumps(
                    {"model": {"name": TRIVIAL}, "task": spec.task_section}, sort_keys=True, separators=(",", ":")
                ),
                "run_dir": "",
                "reference": suite.trivial.label,
            }
        )
    return rows


def is_reference(row: dict[str, Any]) -> bool:
    """Whether a result row is a reference row (the trivial answer), not a trained model."""
    return str(row.get("model", "")) == TRIVIAL


# ---------------------------------------------------------------------- rows and files
def _float(v: Any) -> float:
    try:
        f = float(v)
    except (TypeError, ValueError):
        return float("-inf")
    return f if math.isfinite(f) else float("-inf")


def best_over_lr(rows: Iterable[dict[str, Any]], score: Sequence[str]) -> list[dict[str, Any]]:
    """For each (model, setting, width): the rows (one per seed) of the learning rate whose mean
    score over seeds is highest. ``score`` names the columns compared in order (ties on the first go
    to the next); missing or NaN values count as -inf; a full tie goes to the smaller learning rate.
    Each kept row gets ``lrs_tried`` (the learning rates compared, ';'-separated). Reference rows
    (`is_reference`: the trivial answer, no learning rate) are kept as they are, after the others."""
    groups: dict[tuple[str, str, str], dict[float, list[dict[str, Any]]]] = {}
    references = [{**r, "lrs_tried": ""} for r in rows if is_reference(r)]
    for r in rows:
        if is_reference(r):
            continue
        g = (str(r["model"]), str(r["setting"]), str(int(float(r["width"]))))
        groups.setdefault(g, {}).setdefault(float(r["lr"]), []).append(r)
    out: list[dict[str, Any]] = []
    for g in groups:
        by_lr = groups[g]
        # mean score over seeds of each learning rate
        mean_score = {lr: tuple(sum(_float(r.get(c)) for r in rs) / len(rs) for c in score) for lr, rs in by_lr.items()}
        best = max(sorted(by_lr), key=lambda lr: (mean_score[lr], -lr))
        tried = ";".join(f"{lr:g}" for lr in sorted(by_lr))
        for r in sorted(by_lr[best], key=lambda r: int(float(r["seed"]))):
            out.append({**r, "lrs_tried": tried})
    return out + references


def write_csv(path: Path, rows: Sequence[dict[str, Any]], columns: Sequence[str]) -> None:
    """Rows as CSV with ``columns`` first and any other keys after them (atomically)."""
    cols = list(columns) + sorted({k for r in rows for k in r} - set(columns))
    buf = io.StringIO()
    w = csv.DictWriter(buf, fieldnames=cols, extrasaction="ignore", lineterminator="\n")
    w.writeheader()
    for r in rows:
        w.writerow({k: ("" if r.get(k) is None else r.get(k)) for k in cols})
    write_text(path, buf.getvalue())


def read_csv(path: Path) -> list[dict[str, Any]]:
    if not path.is_file():
        return []
    with open(path, newline="", encoding="utf-8") as f:
        return list(csv.DictReader(f))


def read_ledger(path: Path) -> list[dict[str, Any]]:
    """The rows of a bench folder's ``runs.csv`` (the resume ledger), each with the columns of `run_key`; a file
    that is not one (binary, another table, a damaged row) is one line naming it, never guessed at."""
    how = "start anew with --overwrite instead of --resume, or choose another --out"
    try:
        rows = read_csv(path)
    except (UnicodeDecodeError, csv.Error) as exc:
        raise BenchError(f"{path}: not a bench runs.csv ({str(exc).splitlines()[0]}); {how}") from None
    for i, row in enumerate(rows, start=2):
        try:
            run_key(row)
        except (KeyError, TypeError, ValueError) as exc:
            what = f"no column {exc}" if isinstance(exc, KeyError) else "a value that is not a number"
            raise BenchError(f"{path}: line {i} has {what}; not a bench runs.csv; {how}") from None
    return rows


def _fmt(v: Any) -> str:
    if v is None or v == "":
        return ""
    try:
        f = float(v)
    except (TypeError, ValueError):
        return str(v)
    if f.is_integer() and "." not in str(v) and "e" not in str(v).lower():
        return f"{int(f):,}"
    if 0 < abs(f) < 0.01:
        return f"{f:.0e}"
    return f"{f:.3f}" if abs(f) < 100 else f"{f:,.0f}"


def _finite(v: Any) -> float | None:
    try:
        f = float(v)
    except (TypeError, ValueError):
        return None
    return f if math.isfinite(f) else None


def _seed(r: dict[str, Any]) -> int:
    return int(float(r["seed"]))


def pick_winner(scores: dict[str, Sequence[Any]]) -> tuple[str | None, str]:
    """The winner of one (setting, width) from each model's scores over seeds (higher is better).

    The model with the best mean wins only beyond the spread: when its lowest seed exceeds every other
    model's highest seed. A missing or NaN score counts as minus infinity (so that model cannot win).
    Returns ``(model, "beyond the spread")`` or ``(None, why)``, ``why`` one of ``"one model"``,
    ``"one seed: no spread"`` (a model has fewer than two seeds), ``"no score"``, ``"within the spread"``.
    """
    if len(scores) < 2:
        return None, "one model"
    if any(len(v) < 2 for v in scores.values()):
        return None, "one seed: no spread"
    values = {m: [_float(x) for x in v] for m, v in scores.items()}
    mean = {m: sum(v) / len(v) for m, v in values.items()}
    best = max(sorted(mean), key=lambda m: mean[m])
    if mean[best] == float("-inf"):
        return None, "no score"
    if all(min(values[best]) > max(v) for m, v in values.items() if m != best):
        return best, "beyond the spread"
    return None, "within the spread"


def summarize(results: Iterable[dict[str, Any]], suite: SuiteDef) -> list[dict[str, Any]]:
    """One row per (model, setting, width) from the chosen rows (one per seed): the shared columns, the
    ``seeds`` (';'-separated), ``<c>_mean``, ``<c>_min`` and ``<c>_max`` over seeds of every summarised
    column (NaN and missing values left out; empty when none is left), and the ``winner`` of the row's
    (setting, width) by `pick_winner` on the first score column (the model's name, or `NO_WINNER`)
    with ``winner_note`` saying why. A reference row (`is_reference`, the trivial answer) is summarised like a
    model and gets its (setting, width)'s verdict, but it never competes: the winner is picked among the models
    only, so it is never the winner and does not count as a model. ``reference`` holds its label (empty for the
    models), and it comes after the models of its (setting, width)."""
    groups: dict[tuple[str, str, int], list[dict[str, Any]]] = {}
    for r in results:
        groups.setdefault((str(r["model"]), str(r["setting"]), int(float(r["width"]))), []).append(r)
    shared = suite.shared_columns()
    out: list[dict[str, Any]] = []
    scores: dict[tuple[str, int], dict[str, list[Any]]] = {}
    for (model, setting, width), rs in groups.items():
        rs = sorted(rs, key=_seed)
        row: dict[str, Any] = {c: rs[0].get(c, "") for c in shared}
        row["seeds"] = ";".join(str(_seed(r)) for r in rs)
        for c in suite.summarised():
            vals = [f for f in (_finite(r.get(c)) for r in rs) if f is not None]
            stats = (sum(vals) / len(vals), min(vals), max(vals)) if vals else ("", "", "")
            row.update({f"{c}_{k}": v for k, v in zip(("mean", "min", "max"), stats, strict=True)})
        row["reference"] = rs[0].get("reference") or (model if is_reference(rs[0]) else "")
        out.append(row)
        competing = scores.setdefault((setting, width), {})
        if not is_reference(rs[0]):
            competing[model] = [r.get(suite.score[0]) for r in rs]
    winners = {g: pick_winner(s) for g, s in scores.items()}
    for row in out:
        name, note = winners[(str(row["setting"]), int(float(row["width"])))]
        row["winner"], row["winner_note"] = name or NO_WINNER, note
    return sorted(
        out,
        key=lambda r: (
            [_float(r.get(c)) for c in suite.setting_columns],
            str(r["setting"]),
            _float(r.get("width")),
            is_reference(r),
            str(r["model"]),
        ),
    )


def _metric(row: dict[str, Any], column: str) -> str:
    """``mean (min–max)`` of a summarised column (only the mean for one seed), three decimals."""
    mean, lo, hi = (_finite(row.get(f"{column}_{k}")) for k in ("mean", "min", "max"))
    if mean is None:
        return ""
    if len(str(row.get("seeds", "")).split(";")) < 2 or lo is None or hi is None:
        return f"{mean:.3f}"
    return f"{mean:.3f} ({lo:.3f}–{hi:.3f})"


def markdown_table(summary: Sequence[dict[str, Any]], suite: SuiteDef) -> str:
    """The summary rows (`summarize`) as a markdown table: the setting, sizes, chosen learning rate and
    seeds, each metric as ``mean (min–max)`` over seeds, the mean speed, and the winner of the row's
    (setting, width), whose first score is bold; ``— (why)`` where there is no winner beyond the spread. A reference
    row (the trivial answer) is named by its ``reference`` label and says ``reference`` in the winner column."""
    metrics = ["val_loss", *suite.metrics, *suite.extra_metrics]
    cols = [
        "model",
        *suite.setting_columns,
        *suite.extra_settings,
        "width",
        "n_embd",
        "params",
        "state_size",
        "lr",
        "seeds",
        *metrics,
        *SPEED_COLUMNS,
        "winner",
    ]
    head = "| " + " | ".join(cols) + " |\n|" + "---|" * len(cols) + "\n"
    lines = []
    for r in summary:
        cells = []
        for c in cols:
            if c in metrics:
                cell = _metric(r, c)
                if c == suite.score[0] and r.get("winner") == r.get("model") and cell:
                    cell = f"**{cell}**"
            elif c in SPEED_COLUMNS:
                cell = _fmt(r.get(f"{c}_mean"))
            elif c == "model" and is_reference(r):
                cell = str(r.get("reference") or r["model"])
            elif c == "winner" and is_reference(r):
                cell = "reference"
            elif c == "winner":
                won = r.get("winner") not in (None, "", NO_WINNER)
                cell = str(r["winner"]) if won else f"{NO_WINNER} ({r.get('winner_note', '')})"
            else:
                cell = _fmt(r.get(c))
            cells.append(cell)
        lines.append("| " + " | ".join(cells) + " |\n")
    return head + "".join(lines)


def results_markdown(summary: Sequence[dict[str, Any]], suite: SuiteDef) -> str:
    """results.md: a title, how to read the table (spread and winner rule) and `markdown_table`."""
    seeds = sorted({int(s) for r in summary for s in str(r.get("seeds", "")).split(";") if s})
    most = max((len(str(r.get("seeds", "")).split(";")) for r in summary), default=0)
    text = (
        f"# bench {suite.name}: best learning rate per (model, setting, width)\n\n"
        f"Seeds: {', '.join(map(str, seeds)) or 'none'}. Each metric is the mean over seeds with its range "
        "(min–max over seeds) in brackets; results.csv has one row per seed, summary.csv these rows.\n\n"
        f"Winner of a (setting, width): the model with the best mean `{suite.score[0]}`, declared (and bold) "
        "only when its lowest seed exceeds every other model's highest seed; otherwise the winner column "
        f"says {NO_WINNER} and why (within the spread, one seed: no spread, one model).\n\n"
    )
    labels = sorted({str(r.get("reference") or r["model"]) for r in summary if is_reference(r)})
    if labels:
        text += (
            f"Reference: the row `{'`, `'.join(labels)}` is the score of the trivial answer, computed by the same "
            "evaluation as the models: each position's most frequent training target given its own input token, "
            "with no training. A model has learned something only where it is above it. It is never a winner "
            "and does not count as a model.\n\n"
        )
    if most < 2:
        text += "**One seed: no spread**, so no winner can be declared beyond it.\n\n"
    return text + markdown_table(summary, suite)


# ---------------------------------------------------------------------- the suite loop
@dataclass
class BenchOptions(TypedConfig):
    """How a suite is run (not what it sweeps); a `TypedConfig` (ranges declared on the fields).

    Attributes:
        out: the output folder (a string is taken as a path; ``bdh bench`` gives runs/bench-<suite>-<time>).
        resume: skip the runs already in ``out/runs.csv`` (otherwise ``out`` must be new or empty).
        device: the trainer's device (``cpu`` by default, so timings are CPU timings).
        threads: PyTorch CPU threads (None: PyTorch's default).
        plots: draw the plots.
        overwrite: empty a non-empty ``out`` first (not with ``resume``, which continues it).
    """

    out: Path = Path("runs/bench")
    resume: bool = False
    device: str = "cpu"
    threads: int | None = bounded(None, ge=1)
    plots: bool = True
    overwrite: bool = False

    def __post_init__(self) -> None:
        super().__post_init__()  # the declared ranges
        if not isinstance(self.out, (str, Path)):
            self._fail("out", f"expected a folder path, got {self.out!r}")
        self.out = Path(self.out)
        for name in ("resume", "plots", "overwrite"):
            self._check_bool(name)
        if self.resume and self.overwrite:
            self._fail("overwrite", "resume continues the output folder, overwrite replaces it: give one of them")


def prepare_out(opts: BenchOptions) -> None:
    """Check and create the output folder: a non-empty one is continued with ``resume``, emptied with
    ``overwrite``, refused otherwise (the suite writes into it as its runs finish, each file atomically)."""
    ledger, own = Path(opts.out) / "runs.csv", {"runs", "data"}  # data, runs/: written before runs.csv
    ours = Path(opts.out).is_dir() and (
        ledger.is_file() or all(p.name in own for p in folder_entries(opts.out))
    )  # a bench folder, perhaps interrupted before its first run ended
    out = check_output(
        opts.out,
        overwrite=opts.resume or opts.overwrite,
        folder=True,
        how=f"{'add --resume to continue it or ' if ours else ''}pass --overwrite to replace it",
    )
    if opts.resume and out.is_dir() and not ours:
        raise BenchError(
            f"--resume: {out} has no runs.csv (not a bench output folder); pass --overwrite instead of --resume "
            "to replace it, or choose another --out"
        )
    if opts.resume and ledger.is_file():
        read_ledger(ledger)  # refused before anything is written
    if opts.overwrite and out.is_dir():
        empty_folder(out)
    out.mkdir(parents=True, exist_ok=True)


def run_suite(
    suite: SuiteDef,
    specs: Sequence[RunSpec],
    opts: BenchOptions,
    log: Callable[[str], None] = lambda s: print(s, file=sys.stderr, flush=True),
    finish: Callable[[list[dict[str, Any]], Path], list[Path]] | None = None,
    prepared: bool = False,
) -> dict[str, Any]:
    """Train every spec not yet in ``runs.csv``, then write results.csv, summary.csv, results.md and the plots.
    results.csv also holds the suite's reference rows (`trivial_rows`, not in runs.csv: they are recomputed).

    Returns ``{"runs": rows, "results": best rows (one per seed), "summary": `summarize` rows, "files": written
    files, "skipped": run count skipped}``.
    ``finish(results, out)`` may write suite-specific files (the Sudoku depth table) and returns them.
    ``prepared``: `prepare_out` was already called (the suite wrote its data into the folder first).
    """
    with folder_lock(opts.out):  # nests when the caller holds it (bdh bench)
        if not prepared:
            prepare_out(opts)
        rows, skipped = _train_missing(suite, specs, opts, log)
        return _write_results(suite, specs, opts, rows, skipped, log, finish)


def _train_missing(
    suite: SuiteDef, specs: Sequence[RunSpec], opts: BenchOptions, log: Callable[[str], None]
) -> tuple[list[dict[str, Any]], int]:
    """Train the specs not yet in ``runs.csv``, recording each in it as it finishes: (every row, runs skipped)."""
    out = opts.out
    columns = suite.columns()
    rows = read_ledger(out / "runs.csv") if opts.resume and (out / "runs.csv").is_file() else []
    done = {run_key(r) for r in rows}
    todo = [s for s in specs if s.key() not in done]
    skipped = len(specs) - len(todo)
    if skipped:
        log(f"bench {suite.name}: {skipped} run(s) already in {out / 'runs.csv'}, skipped")
    for i, spec in enumerate(todo, 1):
        rel = Path("runs") / spec.model / spec.run_name()
        run_dir = out / rel
        if run_dir.exists():  # an interrupted earlier attempt: start it again
            shutil.rmtree(run_dir)
        log(
            f"bench {suite.name} [{i}/{len(todo)}] {spec.model} {spec.setting} width {spec.width} "
            f"lr {spec.lr:g} seed {spec.seed}"
        )
        row = train_one(spec, run_dir, device=opts.device, threads=opts.threads, suite=suite)
        row["run_dir"] = rel.as_posix()
        shown = ", ".join(f"{m} {float(row[m]):.3f}" for m in suite.metrics if m in row)
        log(
            f"    {row['params']:,} params, state {row['state_size']:,}: {shown}; "
            f"{row['wall_s']:.1f} s, {row['tok_per_s']:,.0f} tok/s"
        )
        rows.append(row)
        write_csv(out / "runs.csv", rows, columns)
    return rows, skipped


def _write_results(
    suite: SuiteDef,
    specs: Sequence[RunSpec],
    opts: BenchOptions,
    rows: list[dict[str, Any]],
    skipped: int,
    log: Callable[[str], None],
    finish: Callable[[list[dict[str, Any]], Path], list[Path]] | None,
) -> dict[str, Any]:
    """results.csv, summary.csv, results.md, the suite's own files and the plots, from the rows of the runs."""
    out, columns = opts.out, suite.columns()
    wanted = {s.key() for s in specs}
    chosen = [r for r in rows if run_key(r) in wanted]
    results = best_over_lr(chosen, suite.score)
    if results:
        reference = trivial_rows(suite, specs, opts.device)
        for (label, setting), row in {(r["reference"], r["setting"]): r for r in reference}.items():
            shown = ", ".join(f"{m} {float(row[m]):.3f}" for m in suite.metrics if m in row)
            log(f"bench {suite.name}: {label}, {setting}: {shown}")
        results += reference
    summary = summarize(results, suite)
    files: list[Path] = []
    if not rows:
        write_csv(out / "runs.csv", rows, columns)
    files.append(out / "runs.csv")
    write_csv(out / "results.csv", results, columns)
    files.append(out / "results.csv")
    write_csv(out / "summary.csv", summary, suite.summary_columns())
    files.append(out / "summary.csv")
    write_text(out / "results.md", results_markdown(summary, suite))
    files.append(out / "results.md")
    if finish is not None:
        files += finish(results, out)
    if opts.plots and results:
        from bdh.viz import plots

        made, why = plots.bench_plots(results, out / "plots", reference=TRIVIAL)
        files += made
        for reason in why:
            log(f"bench {suite.name}: plot skipped: {reason}")
    return {"runs": rows, "results": results, "summary": summary, "files": files, "skipped": skipped}


# ---------------------------------------------------------------------- sizing the models
#: the model every suite sizes the others to: built from the width (`bdh_section`), its count is the budget
REFERENCE = "bdh"


def suite_models(suite: str, *names: str) -> tuple[str, ...]:
    """The models a suite compares (the suite's choice), checked against `bdh.registry`: a one-line
    `BenchError` for a name it does not know. The reference (`REFERENCE`) is built from the width; every other
    model is sized to its parameter count by its config class's ``for_budget`` (`budget_config`)."""
    from bdh.registry import names as registered

    unknown = [n for n in names if n not in registered("model")]
    if unknown:
        raise BenchError(f"{suite}: {', '.join(map(repr, unknown))} is not a registered model")
    return names


def budget_config(
    model: str, params: int, *, vocab_size: int, seq_len: int, n_layer: int, n_head: int, causal: bool, **extra: Any
) -> Any:
    """The config of the registered ``model`` whose parameter count is closest to ``params``: its config class's
    ``for_budget`` (the protocol `bdh.sizing.BudgetSized`); ``extra``: the model's own options."""
    from bdh.registry import get_model

    config_class = get_model(model).config_class
    if not callable(getattr(config_class, "for_budget", None)):
        raise BenchError(
            f"model {model!r}: {config_class.__name__} has no for_budget classmethod, so the bench cannot size it "
            "to BDH's parameter count (CONTRIBUTING.md, 'Adding a model')"
        )
    return config_class.for_budget(
        params, vocab_size=vocab_size, seq_len=seq_len, n_layer=n_layer, n_head=n_head, causal=causal, **extra
    )


def sized_section(
    model: str,
    width: int,
    *,
    vocab_size: int,
    seq_len: int,
    n_layer: int,
    n_head: int,
    neuron_mult: int,
    causal: bool,
    options: dict[str, dict[str, Any]] | None = None,
) -> dict[str, Any]:
    """The model section of one run: the reference (BDH) at ``width`` (`bdh_section`), or ``model`` sized to
    the reference's parameter count by `budget_config`, with ``options[model]`` as its own fields (e.g.
    ``{"hyperset": {"time_freq": 64}}``). ``seq_len``: the longest length the model sees."""
    reference = bdh_section(width, n_layer=n_layer, n_head=n_head, neuron_mult=neuron_mult, causal=causal)
    if model == REFERENCE:
        return reference
    cfg = budget_config(
        model,
        bdh_params(reference, vocab_size),
        vocab_size=vocab_size,
        seq_len=seq_len,
        n_layer=n_layer,
        n_head=n_head,
        causal=causal,
        **(options or {}).get(model, {}),
    )
    return section_of(cfg, model)


def bdh_section(width: int, *, n_layer: int, n_head: int, neuron_mult: int, causal: bool) -> dict[str, Any]:
    """BDH's model section at a width: ``n_embd = width``, ``n_neurons = neuron_mult * width``."""
    return {
        "name": "bdh",
        "n_layer": n_layer,
        "n_embd": width,
        "n_head": n_head,
        "n_neurons": neuron_mult * width,
        "dropout": 0.0,
        "causal": causal,
    }


def bdh_params(section: dict[str, Any], vocab_size: int) -> int:
    """BDH's parameter count for a model section and a vocabulary."""
    from bdh.model.config import BDHConfig

    fields = {k: v for k, v in section.items() if k != "name"}
    return BDHConfig(**{**fields, "vocab_size": vocab_size}).num_params()


def section_of(cfg: Any, name: str) -> dict[str, Any]:
    """A model section (``name`` + the config's fields) from a baseline config object."""
    return {"name": name, **cfg.to_dict()}


def parse_list(text: str, kind: type, what: str) -> tuple:
    """``"1e-3,3e-3"`` -> (0.001, 0.003); a one-line BenchError for anything else."""
    items = [t.strip() for t in str(text).split(",")]
    if not items or any(not t for t in items):
        raise BenchError(f"{what}: expected a comma-separated list, got {text!r}")
    out = []
    for t in items:
        try:
            v = kind(t) if kind is not int else int(t)
        except ValueError:
            raise BenchError(f"{what}: {t!r} is not {'an integer' if kind is int else 'a number'}") from None
        if kind is float and not (math.isfinite(v) and v > 0):
            raise BenchError(f"{what}: {t!r} must be a positive number")
        if kind is int and v < 0:
            raise BenchError(f"{what}: {t!r} must be >= 0")
        out.append(v)
    if len(set(out)) != len(out):
        raise BenchError(f"{what}: repeated values in {text!r}")
    return tuple(out)
