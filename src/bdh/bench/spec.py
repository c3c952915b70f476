"""What a ``bdh bench`` suite is made of: its runs (`RunSpec`), its sweep (`Sweep`, with the `QUICK` and `FULL`
values every suite shares), what the runner needs to know of it (`SuiteDef`: columns, metrics, score) and its
trivial answer (`Trivial`); the columns of the result rows and the errors of a bench.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, ClassVar

import torch

from bdh.errors import Interrupted, UserError
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
#: speed columns summarised over seeds (results.md shows their mean): every score reads beside its compute
SPEED_COLUMNS = ["wall_s", "tok_per_s", "cpu_s_per_step"]
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
        max_minutes: a time budget (the trainer's ``train.max_minutes``, `bdh.train.budget`): the run's length is
            planned from the time its steps take, up to ``steps``, and the schedule decays over it (runs at
            equal wall-clock); None: exactly ``steps`` steps (runs at equal tokens).
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
    max_minutes: float | None = None

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
                "max_minutes": self.max_minutes,
            }
        )

    def run_name(self) -> str:
        length = f"{self.max_minutes:g}min" if self.max_minutes is not None else str(self.steps)
        return f"{self.setting}-w{self.width}-lr{self.lr:g}-s{self.seed}-{length}x{self.batch_size}"


def run_key(row: dict[str, Any]) -> tuple[str, ...]:
    """The identity of a run row: model, setting, width, learning rate, seed, length and batch size,
    normalised as text (a run of another length is another result). The length is the number of steps, or
    for a run under a time budget (a row with ``max_minutes``) the budget, ``<minutes>min``: such a run's
    ``steps`` column holds the steps it planned and trained, which the budget chose."""
    minutes = row.get("max_minutes")
    timed = minutes not in (None, "")
    return (
        str(row["model"]),
        str(row["setting"]),
        str(int(float(row["width"]))),
        f"{float(row['lr']):.6g}",
        str(int(float(row["seed"]))),
        f"{float(minutes):g}min" if timed else str(int(float(row["steps"]))),
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
        models: the models compared: by default the suite's `MODELS` (its choice), or any registered model the
            bench can size and BDH's ablated rows (`bdh.bench.models.bench_models`, declared by each suite with
            `bdh.typed_config.one_of`) that the suite can run (`check_models`).
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

    def check_models(self, section: Callable[[str, int], Any]) -> None:
        """A one-line `BenchError` for a model of ``models`` that the suite cannot run: ``section(model, width)``
        sizes each at the first width as a run of the suite does (a suite's `validate` calls it). A model refuses
        there, in its config's ``for_budget`` (`bdh.sizing.BudgetSized`), what it does not have: a causal-only
        model the bidirectional board suites, a bidirectional-only one the causal recall suite."""
        for width in self.widths[:1]:
            for model in self.models:
                try:
                    section(model, width)
                except UserError as exc:
                    raise BenchError(
                        f"{self._key('models')}: {model!r} cannot run in the {self.suite} suite: {exc}"
                    ) from None

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
        fit: ``(task, train_size, seed) -> model``, the trivial answer as a model scored like the others; None:
            `bdh.bench.trivial.fit_token_prior` (each position's most frequent target given its input token). A
            suite may give another (the byte unigram of a language model's training split).
    """

    label: str
    train_size: Callable[[Any], int]
    fit: Callable[[Any, int, int], torch.nn.Module] | None = None


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
        score: the columns compared (in this order) to pick the best learning rate and the winner.
        higher_is_better: the direction of the score columns: True (accuracy) or False (a loss, bits per byte).
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
    higher_is_better: bool = True
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

    def scored(self) -> list[str]:
        """The score columns of every runs.csv row: the validation loss and the metrics."""
        return ["val_loss", *self.metrics]

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


def is_reference(row: dict[str, Any]) -> bool:
    """Whether a result row is a reference row (the trivial answer), not a trained model."""
    return str(row.get("model", "")) == TRIVIAL
