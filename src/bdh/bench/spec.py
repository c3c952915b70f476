"""What a suite is made of: its runs (`RunSpec`), sweep (`Sweep`, `QUICK`, `FULL`), `SuiteDef` and `Trivial`."""

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
    """One training run of a suite."""

    suite: str
    model: str
    setting: str  # a short label of the task setting (e.g. ``N64-D4``); setting_columns: the same as result columns.
    setting_columns: dict[str, Any]
    width: int  # the nominal width of the sweep (BDH's ``n_embd``; the others sized to BDH's parameters there).
    lr: float
    seed: int  # model initialisation and data order (the data sets are fixed).
    model_section: dict[str, Any]
    task_section: dict[str, Any]
    steps: int
    batch_size: int
    # eval_batch_size, eval_batches: the validation pass after training (None: the whole set).
    eval_batch_size: int = 64
    eval_batches: int | None = None
    # a time budget (``train.max_minutes``): the length planned from the step time, up to ``steps`` (equal wall-clock);
    # None: exactly ``steps`` (equal tokens).
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
    """A run row's identity: model, setting, width, rate, seed, length (steps or ``<minutes>min``), batch size."""
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
    """What every suite's sweep has (errors name ``<suite>.<field>``); `validate` checks rules between fields."""

    #: the suite's name (its runs and errors) and the models it knows
    suite: ClassVar[str]
    MODELS: ClassVar[tuple[str, ...]]

    # BDH's ``n_embd``; the baselines are matched to BDH's parameter count at each width.
    widths: tuple[int, ...] = bounded((32, 64), ge=1)
    # the models compared (`bdh.bench.models.bench_models`) that the suite can run (`check_models`).
    models: tuple[str, ...] = ()
    # lrs, seeds: the learning rates (the best is reported) and run seeds; two seeds by default, so that a winner can be
    # declared beyond their spread.
    lrs: tuple[float, ...] = bounded((1e-3, 3e-3), gt=0)
    seeds: tuple[int, ...] = bounded((0, 1), ge=0, lt=2**63)
    steps: int = bounded(300, ge=1)
    batch_size: int = bounded(32, ge=1)
    # n_layer, n_head: layers (the suite says which) and heads of every model.
    n_layer: int = bounded(4, ge=1)
    n_head: int = bounded(4, ge=1)
    neuron_mult: int = bounded(16, ge=1)  # BDH's n = neuron_mult * n_embd.
    data_seed: int = bounded(0, ge=0)
    eval_batch_size: int = bounded(128, ge=1)

    @classmethod
    def _key(cls, field: str) -> str:
        """Errors name a field ``recall.lrs`` (the suite), or ``Sweep.lrs`` for a class without a suite."""
        return f"{getattr(cls, 'suite', cls.__name__)}.{field}"

    def validate(self) -> None:
        """A one-line `BenchError` unless n = neuron_mult * width splits into ``n_head`` even heads at every width."""
        for w in self.widths:
            n = self.neuron_mult * w
            if n % (2 * self.n_head):
                raise BenchError(
                    f"{self._key('widths')}: at width {w} BDH has n = neuron_mult x width = {n} neurons, not a "
                    f"multiple of 2 x n_head = {2 * self.n_head} (each head needs an even share: RoPE rotates pairs)"
                )

    def check_models(self, section: Callable[[str, int], Any]) -> None:
        """A one-line `BenchError` for a model whose ``for_budget`` refuses the suite's form (causal
        or bidirectional)."""
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
    """Sweep field ``name`` of ``base`` with another default, the same range: ``redefault(Sweep, "steps", 3000)``."""
    return dataclasses.field(default=default, metadata=base.__dataclass_fields__[name].metadata)


@dataclass(frozen=True)
class Trivial:
    """A suite's trivial answer as a reference row: each position's most frequent training target given its input."""

    label: str  # how results.md names the row, e.g. ``trivial (predict no path)``.
    train_size: Callable[[Any], int]  # the training examples of a task (the first that many of its training stream).
    # ``(task, train_size, seed) -> model``; None: `bdh.bench.trivial.fit_token_prior`.
    fit: Callable[[Any, int, int], torch.nn.Module] | None = None


#: the smoke-test (``--quick``, one seed) and GPU-sized (``--full``) values every suite's sweep shares
QUICK = {"widths": (16,), "seeds": (0,), "steps": 20, "batch_size": 16, "neuron_mult": 8}
FULL = {"batch_size": 64, "neuron_mult": 32}


@dataclass
class SuiteDef:
    """What the runner needs to know about a suite."""

    name: str
    setting_columns: list[str]  # the names of the task-setting columns, in table order.
    metrics: list[str]  # the metric columns (validation metrics computed after training), in table order.
    score: list[str]  # the columns compared (in this order) to pick the best learning rate and the winner.
    higher_is_better: bool = True  # the direction of the score columns (False for a loss).
    # optional ``(spec, model, task) -> dict`` of extra columns measured on the trained model; extra_columns: their
    # names; extra_metrics: those summarised over seeds; extra_settings: those that describe the setting.
    extra: Callable[[RunSpec, torch.nn.Module, Any], dict[str, Any]] | None = None
    extra_columns: list[str] = field(default_factory=list)
    extra_metrics: list[str] = field(default_factory=list)
    extra_settings: list[str] = field(default_factory=list)
    trivial: Trivial | None = None  # the suite's reference row (`Trivial`); None: no such row.

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
