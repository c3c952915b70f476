"""``bdh experiment length``: every (model, task, seed) trained at T, then read on the fixed test sets of T, 2T, ...

The output folder (docs/experiments.md): the marker ``length.json``, ``runs/``, ``models/`` (what a resumed run
reads again), ``results/<run>.json`` (written as each row ends), ``figures/``, report.md and results.json."""

from __future__ import annotations

import shutil
import time
from functools import partial
from pathlib import Path
from typing import Any

import torch

from bdh.analysis.stats import above_chance
from bdh.model import hard_read
from bdh.tasks.lengths import fixed_test_set, wilson_interval

from ..common import lm_config, train_config
from ..scaffold import ExperimentFolder, Log
from . import reading
from .config import Config
from .facts import fits, read_counts
from .memory import trace_record
from .records import ledger, read_record, run_name

#: config fields that only choose which runs and rows are made, or how they are read: a resumed folder may change them
SELECTORS = (
    "models",
    "tasks",
    "seeds",
    "max_length",
    "min_length",
    "read_batch",
    "whole_tokens",
    "attention_gb",
    "stop_after_chance",
    "text_models",
    "text_distances",
    "text_trials",
    "device",
    "facts",
    "facts_read",
    "hard_reads",
    "hard_read_top1_heads",
)
#: models read through attention: whole (up to the memory cutoff) and through a window of T
ATTENTION = ("gpt",)
#: BDH reads in the chunked form, 64 tokens a chunk (equal to its other forms, tests/model): the delta rule's cost
#: per token grows with its chunk's length (a triangular solve per chunk), 3x at 256 against 64 (docs/long-context.md)
BDH_READ = {"attention": "chunked", "chunk_size": 64}
#: the seed of the fixed test sets (the same sets for every model and training seed)
TEST_SEED = 0
#: the output folder, marked by ``length.json`` (what ``--resume`` continues, with the same config)
FOLDER = ExperimentFolder("length", SELECTORS)
MARKER = FOLDER.marker
prepare_resume = FOLDER.prepare_resume


def reads_of(
    model_name: str, model: torch.nn.Module, hard_reads: bool = False, top1_heads: tuple[int, ...] = ()
) -> tuple[str, ...]:
    """How a model is read: ``state`` (it has one), ``whole``, and for attention ``whole`` and ``window``; with
    ``hard_reads``, a BDH with the delta rule's sigmoid gate also ``state-hard`` (`bdh.model.hard_read`), and with
    ``top1_heads`` ``state-hard-top1`` (those heads' writes through their key's largest neuron)."""
    if model_name in ATTENTION:
        return ("whole", "window")
    if not reading.has_state(model):
        return ("whole",)
    if not (hard_reads and getattr(model, "soft_gated", False)):
        return ("state",)
    return ("state", "state-hard", "state-hard-top1") if top1_heads else ("state", "state-hard")


def read_model(model: torch.nn.Module, read: str, top1_heads: tuple[int, ...] = ()) -> torch.nn.Module:
    """The model a read form reads: the hard-gated twins of ``state-hard`` and ``state-hard-top1``, else ``model``."""
    if read == "state-hard":
        return hard_read(model)
    return hard_read(model, top1_heads) if read == "state-hard-top1" else model


def train_run(
    config: Config, out: Path, model: str, task: str, seed: int, log: Log, facts: int | None = None
) -> dict[str, Any]:
    """Train one run (replacing an unfinished one; with a curriculum, its short phase first) on ``facts`` pairs
    (None: the task's own), save its model; its training record."""
    name = run_name(model, task, seed, facts)
    start, init_from = time.time(), None
    phase = partial(_train, config, model=model, task=task, seed=seed, log=log, facts=facts)
    if config.short_steps:
        init_from = phase(out / "runs" / f"{name}-short", init_from=None).run_dir
    result = phase(out / "runs" / name, init_from=init_from)
    result.model.save_pretrained(out / "models" / name)
    final = {k: v for k, v in result.metrics.items() if isinstance(v, (int, float))}
    state_size = getattr(result.model, "state_size", None)
    record = {
        "model": model,
        "task": task,
        "seed": seed,
        "params": result.model.num_params(),
        "state_size": int(state_size()) if callable(state_size) else None,
        "train_seconds": time.time() - start,
        "final": final,
        "rows": [],
    }
    return record if facts is None else {**record, "facts": facts}


def _train(
    config: Config,
    run_dir: Path,
    *,
    model: str,
    task: str,
    seed: int,
    init_from: Path | None,
    log: Log,
    facts: int | None = None,
) -> Any:
    """One training phase (`phase_config`), replacing an attempt that did not finish."""
    if run_dir.exists():
        shutil.rmtree(run_dir)  # an attempt that did not finish: its model was never saved
    run = phase_config(config, run_dir, model=model, task=task, seed=seed, init_from=init_from, facts=facts)
    t = run.train
    log(f"length: training {run_dir.name} ({t.max_steps} steps of {t.batch_size} x {run.task.config.seq_len})")
    return train_config(run)


def phase_config(
    config: Config,
    run_dir: Path,
    *,
    model: str,
    task: str,
    seed: int,
    init_from: Path | None,
    facts: int | None = None,
) -> Any:
    """The run config of one training phase (nothing written; `preflight` checks every one before the first step):
    the short phase of a curriculum (``init_from`` None and ``short_steps``), or the run at T (from ``init_from``,
    the short phase's run, with ``lr_at_t`` and ``batch_at_t`` where set), on ``facts`` pairs (None: the task's
    own)."""
    short = init_from is None and config.short_steps > 0
    seq_len, steps = (config.short_len, config.short_steps) if short else (config.seq_len, config.steps)
    after_short = init_from is not None
    batch_size = config.batch_at_t if after_short and config.batch_at_t is not None else config.batch_size
    lr = config.lr_at_t if after_short and config.lr_at_t is not None else config.lr
    return lm_config(
        run_dir,
        None,
        config.model_section(model, task),
        steps=steps,
        batch_size=batch_size,
        seq_len=seq_len,
        lr=lr,
        seed=seed,
        init_from=init_from,
        device=config.device,
        task=config.task_section(task, seq_len, facts),
        sections={"optim": {"decay": "constant", "weight_decay": 0.0}},
    )


def rows_per_read(config: Config, model_name: str, model: torch.nn.Module, read: str, length: int) -> int:
    """Sequences read together: ``read_batch`` through a window, or through a state (at most `reading.HELD_TOKENS`
    tokens); whole: ``whole_tokens // length``, for attention within the memory cutoff (0: not even one)."""
    if read == "window":
        return config.read_batch
    if read.startswith("state"):
        return max(1, min(config.read_batch, reading.HELD_TOKENS // length))
    rows = max(1, config.whole_tokens // length)
    if model_name in ATTENTION:
        limit = config.attention_gb * 2**30
        while rows and reading.attention_bytes(model, rows, length) > limit:
            rows //= 2
    return min(rows, config.test_sequences)


def read_row(config: Config, model_name: str, model: torch.nn.Module, task: Any, read: str, length: int) -> dict:
    """One row: the model's accuracy on the fixed test set of ``length`` tokens read by ``read``, with its cost."""
    row: dict[str, Any] = {"length": length, "gap": task.test_gap(length), "read": read}
    rows = rows_per_read(config, model_name, model, read, length)
    if rows == 0:
        gb = reading.attention_bytes(model, 1, length) / 2**30
        return {**row, "status": f"out of memory (estimated {gb:.1f} GB > {config.attention_gb:g} GB)"}
    if read == "whole":
        try:
            model = reading.at_length(model, length)  # once per length, not per batch of rows
        except ValueError as exc:  # a model that cannot read this length
            return {**row, "status": str(exc)}
    if read.startswith("state-hard"):
        model, read = read_model(model, read, config.hard_read_top1_heads), "state"
    fn = {
        "state": partial(reading.read_state, model, chunk=config.seq_len),
        "whole": partial(reading.read_whole, model),
        "window": partial(reading.read_window, model, window=config.seq_len),
    }[read]
    parts = []
    n = config.test_sequences
    for i in range(0, n, rows):
        x, y = fixed_test_set(task, length, n=n, seed=TEST_SEED, rows=range(i, min(n, i + rows)))
        parts.append(reading.measured(partial(fn, x, y), reading.device_of(model)))
    right, scored = sum(p["right"] for p in parts), sum(p["n"] for p in parts)
    low, high = wilson_interval(right, scored)
    seconds, tokens = sum(p["seconds"] for p in parts), sum(p["tokens"] for p in parts)
    peaks = [p["peak_bytes"] for p in parts if p["peak_bytes"] is not None]
    return {
        **row,
        "status": "ok",
        "accuracy": right / scored,
        "low": low,
        "high": high,
        "right": right,
        "n": scored,
        "sequences": n,
        "state_bytes": max(p["state_bytes"] for p in parts),
        "peak_bytes": max(peaks) if peaks else None,
        "seconds": seconds,
        "tokens": tokens,
        "tokens_per_s": tokens / seconds if seconds > 0 else None,
    }


def _task(config: Config, task: str, facts: int | None = None) -> Any:
    from bdh.registry import get_task

    fields = {k: v for k, v in config.task_section(task, facts=facts).items() if k != "name"}
    cls = get_task(task)
    return cls(cls.config_class(**fields))


def at_chance(row: dict[str, Any], chance: float) -> bool:
    """Whether a read row is no better than guessing: not `bdh.analysis.stats.above_chance` (its interval reaches
    down to chance)."""
    return row["status"] == "ok" and not above_chance(row["right"], row["n"], chance)


def measure_run(config: Config, out: Path, record: dict[str, Any], log: Log) -> None:
    """Every row of one run not in its record yet, each written to the record's file as it ends: at its own count of
    facts and at each of ``facts_read`` (`facts.read_counts`); a read form stops after ``stop_after_chance`` lengths
    in a row at chance (the longer lengths are not read), counting the rows an earlier invocation read at lengths
    this config skips (``min_length``)."""
    from bdh.devices import resolve_device
    from bdh.model import BDH
    from bdh.model.io import load_pretrained, read_model_config

    name, runs = run_name(record["model"], record["task"], record["seed"], record.get("facts")), ledger(out)
    done = {(r["length"], r["read"], r.get("facts")): r for r in record["rows"]}
    folder = out / "models" / name
    runtime = BDH_READ if issubclass(read_model_config(folder)[0], BDH) else {}
    model = load_pretrained(folder, map_location=resolve_device(config.device), **runtime)
    chance, stop = config.chance(record["task"]), config.stop_after_chance
    for count in read_counts(config, record):
        task = _task(config, record["task"], count or record.get("facts"))
        for read in reads_of(record["model"], model, config.hard_reads, config.hard_read_top1_heads):
            streak = 0
            for length in config.lengths_with(n for n, r, c in done if r == read and c == count):
                if stop and streak >= stop:
                    log(f"length: {name} ({read}) at chance at {streak} lengths in a row: not read from {length:,}")
                    break
                if count and not fits(count, length):
                    continue
                row = done.get((length, read, count))
                if row is None:
                    row = read_row(config, record["model"], model, task, read, length)
                    row = row if count is None else {**row, "facts": count}
                    got = f"{row['accuracy']:.3f}" if row["status"] == "ok" else row["status"]
                    told = "" if count is None else f", {count} facts"
                    log(f"length: {name} at {length:,} ({read}{told}): {got}")
                    record["rows"].append(row)
                    runs.add(name, record)
                streak = streak + 1 if at_chance(row, chance) else 0
    if "trace" not in record:
        own = _task(config, record["task"], record.get("facts"))
        record["trace"] = trace_record(config, record, own, model, TEST_SEED)
        runs.add(name, record)


def _run_one(
    config: Config, out: Path, model: str, task: str, seed: int, facts: int | None, resume: bool, log: Log
) -> dict[str, Any]:
    """One run's record: trained (or found finished with ``resume``), then read."""
    name = run_name(model, task, seed, facts)
    record = read_record(out, model, task, seed, facts) if resume and (out / "models" / name).is_dir() else None
    if record is None:
        record = ledger(out).add(name, train_run(config, out, model, task, seed, log, facts))
    measure_run(config, out, record, log)
    return record


def run(config: Config, out: Path, *, log: Log = print, resume: bool = False) -> Path:
    """Train and read every (model, task, seed), reusing finished trainings and rows with ``resume``; write the
    report."""
    from .report import write_report
    from .text import text_recall

    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    FOLDER.mark(config.to_dict(), out, resume, defaults=Config().to_dict())
    start = time.time()
    records = []
    for task in config.tasks:
        for model in config.models:
            for seed in config.seeds:
                for facts in config.trained_facts(task):
                    records.append(_run_one(config, out, model, task, seed, facts, resume, log))
    text = text_recall(config, log) if config.text_models else []
    report = write_report(config, out, records, text, time.time() - start)
    log(f"length: done in {(time.time() - start) / 60:.1f} min")
    return report
