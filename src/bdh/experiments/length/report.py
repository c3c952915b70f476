"""The length experiment's report: one table per task (models x test lengths), the cost of the long reads, the
figure (accuracy against length, log2 axis), the text models' recall, and results.json (one row per model, task,
seed, read and test length)."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

from bdh.seed_stats import mean

from ..common import Report, save_figure
from .cells import cell_text, pooled, read_label
from .config import Config
from .facts import capacity_section
from .memory import trace_section
from .reading import HELD_TOKENS


def command_line(config: Config) -> str:
    """The command that makes ``config``: the preset (none, ``--quick`` or ``--full``) with the fewest differences,
    and a ``--set`` for each field that still differs."""
    best: tuple[int, str, list[str]] | None = None
    for preset, flag in ((None, ""), ("quick", " --quick"), ("full", " --full")):
        base = Config.preset(preset).to_dict()
        mine = config.to_dict()
        sets = [f" --set {k}={_value(v)}" for k, v in mine.items() if v != base[k]]
        if best is None or len(sets) < best[0]:
            best = (len(sets), flag, sets)
    assert best is not None
    return "bdh experiment length" + best[1] + "".join(best[2])


def _value(value: Any) -> str:
    if isinstance(value, list):
        return "[" + ",".join(str(v) for v in value) + "]"
    return str(value)


def flat_rows(records: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Every measured row with its run's model, task and seed (results.json's ``rows``)."""
    return [{"model": r["model"], "task": r["task"], "seed": r["seed"], **row} for r in records for row in r["rows"]]


def _series(config: Config, cells: dict, task: str) -> list[tuple[str, str]]:
    """The (model, read) pairs of a task, in the config's model order."""
    found = {(m, r) for (t, m, r, _) in cells if t == task and m in config.models}
    return sorted(found, key=lambda s: (config.models.index(s[0]), s[1]))


def shown_lengths(config: Config, rows: list[dict[str, Any]]) -> tuple[int, ...]:
    """The report's test lengths: the config's, and those up to max_length that a resumed folder read before (a
    ``min_length`` read skips them)."""
    return config.lengths_with(r["length"] for r in rows)


def accuracy_table(report: Report, config: Config, cells: dict, task: str, lengths: tuple[int, ...]) -> None:
    """Models (and reads) x test lengths: pooled accuracy over seeds and its 95 % Wilson interval."""
    series = _series(config, cells, task)
    seeds = len(config.seeds)
    rows = [[read_label(m, r)] + [cell_text(cells.get((task, m, r, L)), seeds) for L in lengths] for m, r in series]
    report.table(["model"] + [f"{L:,}" for L in lengths], rows)


def cost_table(report: Report, config: Config, rows: list[dict[str, Any]]) -> None:
    """Per model and read, at T and at the longest length it read: tokens/s, the state's bytes, the peak memory."""

    def peak(rs: list[dict[str, Any]]) -> float:
        return max((r["peak_bytes"] or 0) for r in rs) / 2**20

    out = []
    for model in config.models:
        for read in ("state", "state-hard", "state-hard-top1", "whole", "window"):
            mine = [r for r in rows if r["model"] == model and r["read"] == read and r["status"] == "ok"]
            if not mine:
                continue
            at_t = [r for r in mine if r["length"] == config.seq_len]
            longest = max(r["length"] for r in mine)
            far = [r for r in mine if r["length"] == longest]
            out.append(
                [
                    read_label(model, read),
                    mean([r["tokens_per_s"] for r in at_t if r["tokens_per_s"] is not None]),
                    f"{longest:,}",
                    mean([r["tokens_per_s"] for r in far if r["tokens_per_s"] is not None]),
                    max(r["state_bytes"] for r in far) / 2**20,
                    peak(at_t) if at_t else None,
                    peak(far),
                ]
            )
    headers = ["model", "tokens/s at T", "longest read", "tokens/s there", "state MiB", "peak MiB at T", "peak there"]
    report.table(headers, out, digits=1)
    held = HELD_TOKENS.bit_length() - 1
    report.text(
        "state MiB: the bytes of the carried state of the sequences read together (all of them at T; fewer at the "
        f"longest lengths, at most 2^{held} tokens held at once). peak: the largest rise of the process's resident "
        "memory during the read of one block of sequences (the state, a chunk's activations, the allocator's slack; "
        "the block's tokens are made before the read)."
    )


def accuracy_figure(out: Path, config: Config, cells: dict, chance: dict[str, float], lengths: tuple[int, ...]) -> str:
    """Accuracy against test length (log2 axis), one panel per task, a line per model and read."""
    from bdh.plotting import pyplot

    plt = pyplot()
    fig, axes = plt.subplots(1, len(config.tasks), figsize=(max(10, 7 * len(config.tasks)), 5.5), squeeze=False)
    for ax, task in zip(axes[0], config.tasks):
        for m, r in _series(config, cells, task):
            pts = [(L, cells[(task, m, r, L)]) for L in lengths if "accuracy" in cells.get((task, m, r, L), {})]
            if not pts:
                continue
            xs, ys = [p[0] for p in pts], [p[1]["accuracy"] for p in pts]
            err = [[y - p[1]["low"] for y, p in zip(ys, pts)], [p[1]["high"] - y for y, p in zip(ys, pts)]]
            ax.errorbar(xs, ys, yerr=err, marker="o", capsize=3, label=read_label(m, r))
        ax.axhline(chance[task], color="grey", linestyle="--", label="chance")
        ax.axvline(config.seq_len, color="grey", linestyle=":", label=f"T = {config.seq_len}")
        ax.set_xscale("log", base=2)
        ax.set_ylim(-0.02, 1.02)
        ax.set_xlabel("test length (tokens)", fontsize=12)
        ax.set_ylabel("accuracy", fontsize=12)
        ax.set_title(task, fontsize=13)
        ax.grid(alpha=0.3)
        ax.legend(fontsize=9)
    return save_figure(fig, out / "figures" / "accuracy")


def text_table(report: Report, text: list[dict[str, Any]]) -> None:
    rows = []
    for r in text:
        carried = r["carried"]
        rows.append(
            [
                r["model"],
                f"{r['distance']:,}",
                "n/a" if carried is None else carried["accuracy"],
                "n/a" if carried is None else carried["control"],
                r["window"]["accuracy"],
                r["window"]["control"],
                r["window"]["trials"],
            ]
        )
    headers = ["model", "distance (bytes)", "carried", "control", "window of T", "control", "trials"]
    report.table(headers, rows)


def _phases(config: Config) -> str:
    """The training: its steps and batch, and a curriculum's short phase first."""
    if not config.short_steps:
        return f"{config.steps} steps of {config.batch_size}"
    batch = config.batch_size if config.batch_at_t is None else config.batch_at_t
    lr = "" if config.lr_at_t is None else f" at learning rate {config.lr_at_t:g}"
    return (
        f"after {config.short_steps} steps of {config.batch_size} at {config.short_len}, a curriculum over lengths "
        f"that is our deviation; then {config.steps} steps of {batch}{lr}"
    )


def _stopping(config: Config) -> str:
    if not config.stop_after_chance:
        return "every length was read."
    return (
        f"–: not read, after {config.stop_after_chance} lengths in a row at chance (the interval reaching down to "
        "chance; `stop_after_chance`)."
    )


def recorded_seconds(records: list[dict]) -> float:
    """The seconds the runs' records hold: every training and every read, whichever invocation did them."""
    return sum(r.get("train_seconds", 0.0) + sum(row.get("seconds") or 0.0 for row in r["rows"]) for r in records)


def text_section(report: Report, config: Config, text: list[dict[str, Any]]) -> None:
    """Recall through prose: the text models' rows (`text.text_recall`), or how to add them."""
    report.heading("Recall through prose (text models)")
    if not text:
        report.text("None given: `--set text_models=[FOLDER,...]` (byte-level model folders) adds it.")
        return
    report.text(
        "The long-context experiment's probe: a fact in held-out Shakespeare, asked `distance` bytes later; "
        "accuracy on the value's letters with the fact and without it (control), through the state (carried) "
        f"and through a window of T = {config.seq_len} bytes."
    )
    text_table(report, text)


def write_report(config: Config, out: Path, records: list[dict], text: list[dict], seconds: float) -> Path:
    """report.md, results.json and the figure of the runs' ``records`` and the ``text`` recall rows."""
    every = flat_rows(records)
    lengths = shown_lengths(config, every)
    rows = [r for r in every if r["length"] in lengths]
    cells = pooled([r for r in rows if "facts" not in r])  # the tables per task: each run at its own count
    chance = {task: config.chance(task) for task in config.tasks}
    report = Report("Memory past the training length: induction heads and recall through a gap")
    spent = recorded_seconds(records)
    report.text(
        f"Made by `{command_line(config)}`: {spent / 60:.1f} min of training and reading as its runs recorded them "
        f"(this invocation {seconds / 60:.1f} min of wall time here; a resumed one skips what was done)."
    )
    report.text(
        f"Every model trained at T = {config.seq_len} ({_phases(config)}, seeds {list(config.seeds)}), then read "
        f"on fixed test sets of {config.test_sequences} sequences per length. A cell "
        "is the accuracy with the seeds pooled and its 95 % Wilson interval; OOM: the whole-context read's estimated "
        f"memory passes {config.attention_gb:g} GB; {_stopping(config)} Recurrent models read through their state, "
        "T tokens at a time; a model without one reads each sequence whole."
    )
    for task in config.tasks:
        report.heading(f"{task} (chance {chance[task]:.3f})")
        if task == "recall_gap" and config.facts:
            report.text("Its runs are trained at the counts of `facts`: the capacity map below.")
            continue
        accuracy_table(report, config, cells, task, lengths)
    report.figure(accuracy_figure(out, config, cells, chance, lengths), "accuracy against test length")
    trace_section(report, records)
    capacity = capacity_section(report, out, config, records, lengths)
    report.heading("The cost of the long reads")
    cost_table(report, config, rows)
    text_section(report, config, text)
    report.results = {
        "command": command_line(config),
        "config": dataclasses.asdict(config),
        "rows": rows,
        "training": [{k: v for k, v in r.items() if k != "rows"} for r in records],
        "text_recall": text,
        "capacity": capacity,
        "seconds": seconds,
        "recorded_seconds": spent,
    }
    return report.write(out)
