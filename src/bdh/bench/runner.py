"""The shared machinery of the ``bdh bench`` suites: one training run per sweep point, the result rows,
best-over-learning-rate selection, and the output folder (CSV, markdown table, plots).

A suite (``bdh.bench.recall``, ``boardpath``, ``sudoku``) turns its sweep definition into a list of
`RunSpec`: one training run each (model, task setting, width, learning rate, seed) with the run config
sections it needs. `run_suite` trains them one after the other through the public trainer
(`bdh.train.Trainer`), evaluates each trained model on the task's validation set itself (per example,
so metrics of different validation slices are never mixed), and appends one row per run to
``runs.csv``. From those rows `best_over_lr` keeps, for every (model, setting, width), the learning
rate with the best mean score over seeds, as Zoology reports its sweeps; those rows are
``results.csv`` and ``results.md``, and the plots are drawn from them by `bdh.viz.plots.bench_plots`.

Output folder (``--out``)::

    runs.csv           one row per training run (every learning rate); the resume ledger
    results.csv        the rows of the best learning rate per (model, setting, width), one per seed
    results.md         the same as a markdown table
    plots/             bench-<suite>-<x>.png/.svg (accuracy against width and against state size)
    runs/<model>/...   the trainer's run folder of every run (config.yaml, metrics.jsonl, checkpoint)

Every file is written to a temporary name and renamed. With ``resume`` the runs already in
``runs.csv`` are skipped.
"""

from __future__ import annotations

import csv
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

from bdh.errors import UserError
from bdh.outputs import check_output, write_text

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


class BenchError(UserError):
    """A bench request that cannot be run (bad sweep, existing output folder); one line."""


class BenchInterrupted(Exception):
    """A run was stopped by SIGINT/SIGTERM; it is not recorded, so ``--resume`` trains it again."""

    def __init__(self, signum: int):
        super().__init__(f"interrupted by signal {signum}")
        self.signum = signum


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
class Sweep:
    """What the sweep of every suite has; each suite's sweep adds its task settings and data sets.

    Attributes:
        widths: BDH's ``n_embd``; the baselines are matched to BDH's parameter count at each width.
        models: any of the suite's `MODELS`.
        lrs, seeds: the learning rates (the best is reported) and run seeds (model initialisation and data
            order; the data sets come from ``data_seed``).
        steps, batch_size: optimiser steps and examples per step of every run.
        n_layer, n_head: layers (the suite says which) and heads of every model.
        neuron_mult: BDH's n = neuron_mult * n_embd.
        data_seed: the seed of the data sets.
        eval_batch_size: examples per batch of the validation pass after training.
    """

    #: the suite's name (its runs and errors) and the models it knows
    suite: ClassVar[str]
    MODELS: ClassVar[tuple[str, ...]]

    widths: tuple[int, ...] = (32, 64)
    models: tuple[str, ...] = ()
    lrs: tuple[float, ...] = (1e-3, 3e-3)
    seeds: tuple[int, ...] = (0,)
    steps: int = 300
    batch_size: int = 32
    n_layer: int = 4
    n_head: int = 4
    neuron_mult: int = 16
    data_seed: int = 0
    eval_batch_size: int = 128

    def validate(self) -> None:
        bad = [m for m in self.models if m not in self.MODELS]
        if bad:
            raise BenchError(
                f"--models: {', '.join(bad)} not in the {self.suite} suite (known: {', '.join(self.MODELS)})"
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


#: the smoke-test (``--quick``) and GPU-sized (``--full``) values every suite's sweep shares
QUICK = {"widths": (16,), "steps": 20, "batch_size": 16, "neuron_mult": 8}
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
            (the Sudoku depth sweep).
        extra_columns: the names of those extra columns.
    """

    name: str
    setting_columns: list[str]
    metrics: list[str]
    score: list[str]
    extra: Callable[[RunSpec, torch.nn.Module, Any], dict[str, Any]] | None = None
    extra_columns: list[str] = field(default_factory=list)

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


# ---------------------------------------------------------------------- one run
@torch.no_grad()
def evaluate_examples(
    model: torch.nn.Module, task: Any, batch_size: int, batches: int | None, seed: int
) -> dict[str, float]:
    """The task's validation metrics, each batch weighted by its number of examples, plus ``val_loss``
    (nats per scored token). Batches are taken in order; MQAR validation batches never mix slices,
    so a per-slice metric is averaged only over the batches of its own slice."""
    import torch.nn.functional as F

    from bdh.tasks.base import IGNORE_INDEX

    device = next(model.parameters()).device
    n = task.num_batches("val", batch_size)
    n = n if batches is None else min(n, batches)
    was = model.training
    model.eval()
    sums: dict[str, float] = {}
    weights: dict[str, int] = {}
    loss_sum, count = 0.0, 0
    try:
        for i in range(n):
            x, y = task.batch("val", i, batch_size, seed)
            x, y = x.to(device), y.to(device)
            logits = model(x).float()
            c = int((y != IGNORE_INDEX).sum())
            if c:
                loss_sum += float(
                    F.cross_entropy(
                        logits.reshape(-1, logits.shape[-1]), y.reshape(-1), ignore_index=IGNORE_INDEX, reduction="sum"
                    )
                )
                count += c
            for k, v in task.metrics(logits, y, x).items():
                if v is None or (isinstance(v, float) and math.isnan(v)):
                    continue
                sums[k] = sums.get(k, 0.0) + float(v) * len(x)
                weights[k] = weights.get(k, 0) + len(x)
    finally:
        model.train(was)
    out = {k: sums[k] / weights[k] for k in sums}
    out["val_loss"] = loss_sum / count if count else float("nan")
    return out


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
    Each kept row gets ``lrs_tried`` (the learning rates compared, ';'-separated)."""
    groups: dict[tuple[str, str, str], dict[float, list[dict[str, Any]]]] = {}
    for r in rows:
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
    return out


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


def markdown_table(rows: Sequence[dict[str, Any]], suite: SuiteDef) -> str:
    """The result rows as a markdown table (the setting, sizes, chosen learning rate, metrics, speed)."""
    cols = [
        "model",
        *suite.setting_columns,
        "width",
        "n_embd",
        "params",
        "state_size",
        "lr",
        "seed",
        "val_loss",
        *suite.metrics,
        "wall_s",
        "tok_per_s",
    ]
    head = "| " + " | ".join(cols) + " |\n|" + "---|" * len(cols) + "\n"
    order = sorted(
        rows,
        key=lambda r: (
            [_float(r.get(c)) for c in suite.setting_columns],
            _float(r.get("width")),
            str(r.get("model")),
            _float(r.get("seed")),
        ),
    )
    body = "".join("| " + " | ".join(_fmt(r.get(c)) for c in cols) + " |\n" for r in order)
    return head + body


# ---------------------------------------------------------------------- the suite loop
@dataclass
class BenchOptions:
    """How a suite is run (not what it sweeps).

    Attributes:
        out: the output folder.
        resume: skip the runs already in ``out/runs.csv`` (otherwise ``out`` must be new or empty).
        device: the trainer's device (``cpu`` by default, so timings are CPU timings).
        threads: PyTorch CPU threads (None: PyTorch's default).
        plots: draw the plots.
    """

    out: Path
    resume: bool = False
    device: str = "cpu"
    threads: int | None = None
    plots: bool = True
    overwrite: bool = False


def prepare_out(opts: BenchOptions) -> None:
    """Check and create the output folder: a non-empty one is continued with ``resume``, emptied with
    ``overwrite``, refused otherwise (the suite writes into it as its runs finish, each file atomically)."""
    out = check_output(
        opts.out,
        overwrite=opts.resume or opts.overwrite,
        folder=True,
        how="add --resume to continue it or --overwrite to replace it",
    )
    if opts.resume and out.is_dir() and any(out.iterdir()) and not (out / "runs.csv").is_file():
        raise BenchError(f"--resume: {out} has no runs.csv (not a bench output folder)")
    if opts.overwrite and out.is_dir():
        shutil.rmtree(out)
    out.mkdir(parents=True, exist_ok=True)


def run_suite(
    suite: SuiteDef,
    specs: Sequence[RunSpec],
    opts: BenchOptions,
    log: Callable[[str], None] = lambda s: print(s, file=sys.stderr, flush=True),
    finish: Callable[[list[dict[str, Any]], Path], list[Path]] | None = None,
    prepared: bool = False,
) -> dict[str, Any]:
    """Train every spec not yet in ``runs.csv``, then write results.csv, results.md and the plots.

    Returns ``{"runs": rows, "results": best rows, "files": written files, "skipped": run count skipped}``.
    ``finish(results, out)`` may write suite-specific files (the Sudoku depth table) and returns them.
    ``prepared``: `prepare_out` was already called (the suite wrote its data into the folder first).
    """
    if not prepared:
        prepare_out(opts)
    out = opts.out
    columns = suite.columns()
    rows = read_csv(out / "runs.csv") if opts.resume else []
    done = {run_key(r) for r in rows}
    skipped = 0
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
    wanted = {s.key() for s in specs}
    chosen = [r for r in rows if run_key(r) in wanted]
    results = best_over_lr(chosen, suite.score)
    files: list[Path] = []
    if not rows:
        write_csv(out / "runs.csv", rows, columns)
    files.append(out / "runs.csv")
    write_csv(out / "results.csv", results, columns)
    files.append(out / "results.csv")
    write_text(
        out / "results.md",
        f"# bench {suite.name}: best learning rate per (model, setting, width)\n\n" + markdown_table(results, suite),
    )
    files.append(out / "results.md")
    if finish is not None:
        files += finish(results, out)
    if opts.plots and results:
        from bdh.viz import plots

        made, why = plots.bench_plots(results, out / "plots")
        files += made
        for reason in why:
            log(f"bench {suite.name}: plot skipped: {reason}")
    return {"runs": rows, "results": results, "files": files, "skipped": skipped}


# ---------------------------------------------------------------------- sizing helpers
def size_by_params(
    budget: int, make: Callable[[int], Any], step: int, start: int | None = None, limit: int = 4096
) -> Any:
    """The config ``make(d)`` (d a multiple of ``step``) whose ``num_params()`` is closest to ``budget``."""
    best, err = None, math.inf
    d = start or step
    while d <= limit:
        cfg = make(d)
        n = cfg.num_params()
        if abs(n - budget) < err:
            best, err = cfg, abs(n - budget)
        if n > budget:
            break
        d += step
    if best is None:
        raise BenchError(f"no width fits a budget of {budget} parameters")
    return best


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
