"""The ``bdh bench`` runner: `run_suite` trains a suite's `RunSpec` list with the public trainer, evaluates each model
on the whole validation set and writes ``runs.csv`` (the resume ledger), ``results.csv``, ``summary.csv``,
``results.md``, ``plots/`` and ``runs/`` (docs/bench.md)."""

from __future__ import annotations

import json
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Any

from bdh.outputs import check_output, empty_folder, folder_entries, folder_lock, refuse_held, write_text
from bdh.typed_config import TypedConfig, bounded

from .engine import TableLedger, fit, pending, train_all
from .results import best_over_lr, evaluate_examples, read_ledger, results_markdown, summarize, write_csv
from .spec import TRIVIAL, BenchError, BenchInterrupted, RunSpec, SuiteDef, run_key
from .trivial import trivial_rows


# ---------------------------------------------------------------------- one run
def train_one(
    spec: RunSpec, run_dir: Path, *, device: str = "cpu", threads: int | None = None, extra: Any = None
) -> dict[str, Any]:
    """Train one run, evaluate it and return its row; ``extra``: the suite's further columns."""
    config = run_config(spec, run_dir, device=device, threads=threads)
    start, cpu_start = time.time(), time.process_time()
    result = fit(config, BenchInterrupted)
    cpu_train = time.process_time() - cpu_start
    model, task = result.model, result.task
    scores = evaluate_examples(model, task, spec.eval_batch_size, spec.eval_batches, spec.seed)
    if extra is not None:
        scores.update(extra(spec, model, task))
    return result_row(spec, config.to_dict(), result, scores, wall=time.time() - start, cpu_train=cpu_train)


def train_row(
    spec: RunSpec, run_dir: Path, *, out: Path, device: str, threads: int | None, extra: Any = None
) -> dict[str, Any]:
    """`train_one` with ``run_dir`` relative to ``out``, module-level for worker processes."""
    row = train_one(spec, run_dir, device=device, threads=threads, extra=extra)
    return {**row, "run_dir": run_dir.relative_to(out).as_posix()}


def run_config(spec: RunSpec, run_dir: Path, *, device: str, threads: int | None) -> Any:
    """The run config of ``spec``: one final evaluation batch, no memory check, the spec's time budget."""
    from bdh.train.config import sweep_run_config

    return sweep_run_config(
        spec.model_section,
        spec.task_section,
        run_dir,
        lr=spec.lr,
        steps=spec.steps,
        batch_size=spec.batch_size,
        seed=spec.seed,
        eval={"every": 0, "batches": 1, "final_batches": 1, "batch_size": spec.eval_batch_size},
        logs=20,
        device=device,
        threads=threads,
        check_memory=False,
        max_minutes=spec.max_minutes,
    )


def result_row(
    spec: RunSpec, resolved: dict[str, Any], result: Any, scores: dict[str, Any], *, wall: float, cpu_train: float
) -> dict[str, Any]:
    """The ``runs.csv`` row of a trained run: spec, sizes, result, ``scores``, seconds (``max_minutes`` under
    a budget)."""
    model = result.model
    return {
        "suite": spec.suite,
        "model": spec.model,
        "setting": spec.setting,
        **spec.setting_columns,
        "width": spec.width,
        "n_embd": resolved["model"].get("n_embd", ""),
        "n_layer": getattr(model, "depth", ""),  # what the model class declares, never guessed from its fields
        "params": sum(p.numel() for p in model.parameters()),
        "state_size": int(model.state_size()),
        "lr": spec.lr,
        "seed": spec.seed,
        "steps": result.step,
        "batch_size": spec.batch_size,
        "tokens": result.tokens,
        "wall_s": round(wall, 2),
        "tok_per_s": round(result.tokens / max(result.seconds, 1e-9), 1),
        "cpu_s_per_step": round(cpu_train / max(result.step, 1), 4),
        **({} if spec.max_minutes is None else {"max_minutes": spec.max_minutes}),
        **scores,
        "config": json.dumps(
            {"model": resolved["model"], "task": resolved["task"]}, sort_keys=True, separators=(",", ":")
        ),
        "run_dir": "",
    }


# ---------------------------------------------------------------------- the suite loop
@dataclass
class BenchOptions(TypedConfig):
    """How a suite is run (not what it sweeps)."""

    out: Path = Path("runs/bench")  # the output folder (``bdh bench`` gives runs/bench-<suite>-<time>).
    resume: bool = False  # skip the runs already in ``out/runs.csv`` (otherwise ``out`` must be new or empty).
    device: str = "cpu"
    # PyTorch CPU threads of a run (None: PyTorch's default, shared among the ``jobs``).
    threads: int | None = bounded(None, ge=1)
    # runs trained at once, each in a worker process (`bdh.bench.workers`); 1: in this process.
    jobs: int = bounded(1, ge=1)
    plots: bool = True
    overwrite: bool = False  # empty a non-empty ``out`` first (not with ``resume``, which continues it).

    def __post_init__(self) -> None:
        super().__post_init__()  # the declared ranges
        if not isinstance(self.out, (str, Path)):
            self._fail("out", f"expected a folder path, got {self.out!r}")
        self.out = Path(self.out)
        for name in ("resume", "plots", "overwrite"):
            self._check_bool(name)
        if self.resume and self.overwrite:
            self._fail("overwrite", "resume continues the output folder, overwrite replaces it: give one of them")

    def worker_threads(self) -> int | None:
        """A run's threads: ``threads``, or this process's shared among ``jobs`` (one at least)."""
        if self.threads is not None or self.jobs == 1:
            return self.threads
        import torch

        return max(1, torch.get_num_threads() // self.jobs)


def prepare_out(opts: BenchOptions, suite: SuiteDef | None = None) -> None:
    """The output folder: continued with ``resume`` (ledger checked), emptied with ``overwrite``, else refused."""
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
    if opts.resume and out.is_dir() and not ours and (out / "config.yaml").is_file():
        raise BenchError(  # --overwrite would delete a trained run
            f"--resume: {out} is a training run folder (its config.yaml), not a bench output folder; "
            "choose another --out (a new folder)"
        )
    if opts.resume and out.is_dir() and not ours:
        raise BenchError(
            f"--resume: {out} has no runs.csv (not a bench output folder); pass --overwrite instead of --resume "
            "to replace it, or choose another --out"
        )
    if opts.resume and ledger.is_file():
        read_ledger(ledger, suite.scored() if suite else ())  # refused before anything is written
    if opts.resume or opts.overwrite:
        refuse_held(out)  # a worker of an earlier attempt still training into a run folder
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
    """Train every spec not in ``runs.csv``, then write results, summary, markdown and plots; returns ``{"runs",
    "results", "summary", "files", "skipped"}``. ``finish(results, out)`` writes a suite's own files."""
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
    rows = read_ledger(out / "runs.csv", suite.scored()) if opts.resume and (out / "runs.csv").is_file() else []
    ledger = TableLedger(out / "runs.csv", rows, run_key, suite.columns())
    todo = pending(specs, ledger, opts.resume)
    skipped = len(specs) - len(todo)
    if skipped:
        log(f"bench {suite.name}: {skipped} run(s) already in {out / 'runs.csv'}, skipped")

    jobs, threads = opts.jobs, opts.worker_threads()

    def label(i: int, spec: RunSpec) -> str:
        return f"[{i}/{len(todo)}] {spec.model} {spec.setting} width {spec.width}"

    def start(i: int, spec: RunSpec) -> None:
        log(f"bench {suite.name} {label(i, spec)} lr {spec.lr:g} seed {spec.seed}")

    def done(i: int, spec: RunSpec, row: dict[str, Any]) -> None:
        shown = ", ".join(f"{m} {float(row[m]):.3f}" for m in suite.metrics if m in row)
        who = f"{label(i, spec)} seed {spec.seed}: " if jobs > 1 else ""  # runs in flight finish out of order
        log(
            f"    {who}{row['params']:,} params, state {row['state_size']:,}: {shown}; "
            f"{row['wall_s']:.1f} s, {row['tok_per_s']:,.0f} tok/s"
        )

    train = partial(train_row, out=out, device=opts.device, threads=threads, extra=suite.extra)
    train_all(
        todo,
        lambda s: out / "runs" / s.model / s.run_name(),
        ledger,
        train,
        jobs=jobs,
        on_start=start,
        on_done=done,
        interrupted=BenchInterrupted,
    )
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
    order = {s.key(): i for i, s in enumerate(specs)}  # the plan's order, whichever run finished first
    chosen = sorted((r for r in rows if run_key(r) in order), key=lambda r: order[run_key(r)])
    results = best_over_lr(chosen, suite.score, suite.higher_is_better)
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
