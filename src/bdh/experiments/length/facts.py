"""The capacity map of ``bdh experiment length`` (``facts``, ``facts_read``): recall through a gap read at D = 1, 2,
4, ... facts and at each test length, the largest D each model keeps at >= `KEPT` against distance, and the frontier
of facts kept against state size (Zoology's frontier with a distance axis)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from ..common import Report, save_figure
from .cells import cell_text, pooled, read_label
from .config import Config

#: the accuracy at which a count of facts counts as kept
KEPT = 0.9
#: the lengths of the frontier figure (those the run read)
FRONTIER = (16_384, 2**20)
#: the fixed-state delta-rule baselines the map is meant to hold beside BDH (registered names); the report names the
#: ones a run left out
DELTA_BASELINES = ("deltanet", "gated-deltanet")


def fits(facts: int, length: int) -> bool:
    """Whether a test sequence of ``length`` tokens holds ``facts`` pairs and their questions (4D tokens)."""
    return 4 * facts <= length


def read_counts(config: Config, record: dict[str, Any]) -> list[int | None]:
    """The counts of facts a run is read at: None for its own (rows without ``facts``: a run of ``recall_pairs``), or
    its trained count (a run of ``facts``), then each of ``facts_read`` beside it; induction: its own only."""
    if record["task"] != "recall_gap":
        return [None]
    own = record.get("facts")
    trained = config.recall_pairs if own is None else own
    return [own] + sorted(c for c in config.facts_read if c != trained)


def map_rows(config: Config, records: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Every recall_gap row read through a state or a window (attention within T) or whole, with its run's model,
    seed, state size, trained count ``trained`` and read count ``facts``."""
    out = []
    for r in records:
        if r["task"] != "recall_gap":
            continue
        trained = r.get("facts") or config.recall_pairs
        for row in r["rows"]:
            facts = row.get("facts") or trained
            out.append({"model": r["model"], "seed": r["seed"], "state_size": r.get("state_size"), **row,
                        "trained": trained, "facts": facts})  # fmt: skip
    return out


def map_cells(rows: list[dict[str, Any]]) -> dict[tuple, dict[str, Any]]:
    """(model, read, trained, facts, length) -> the seeds pooled (`report.pooled`)."""
    return pooled(rows, key=lambda r: (r["model"], r["read"], r["trained"], r["facts"], r["length"]))


def kept(cells: dict[tuple, dict[str, Any]], series: tuple[str, str, int], length: int) -> int | None:
    """The largest count of facts read at ``length`` whose pooled accuracy is >= `KEPT` with every smaller count read
    there also >= `KEPT` (0: not even the smallest); None: no count read there."""
    model, read, trained = series
    counts = sorted(f for (m, r, t, f, n) in cells if (m, r, t, n) == (model, read, trained, length))
    best = 0
    for count in counts:
        cell = cells[(model, read, trained, count, length)]
        if cell.get("accuracy", 0.0) < KEPT:
            break
        best = count
    return best if counts else None


def series_of(config: Config, cells: dict[tuple, dict[str, Any]]) -> list[tuple[str, str, int]]:
    """The (model, read, trained count) series of the map, in the config's model order."""
    found = {(m, r, t) for (m, r, t, _, _) in cells if m in config.models}
    return sorted(found, key=lambda s: (config.models.index(s[0]), s[1], s[2]))


def _label(series: tuple[str, str, int]) -> str:
    return f"{read_label(series[0], series[1])}, trained at D = {series[2]}"


def state_sizes(rows: list[dict[str, Any]]) -> dict[str, int]:
    """model -> its state size (``state_size()``, Zoology's count, recorded at training)."""
    return {r["model"]: r["state_size"] for r in rows if r.get("state_size") is not None}


def capacity_section(report: Report, out: Path, config: Config, records: list[dict], lengths: tuple[int, ...]) -> dict:
    """The report's map: accuracy per (model, trained D, read D) and length, the facts kept against distance, the two
    figures; what goes into results.json."""
    rows = [r for r in map_rows(config, records) if r["length"] in lengths]
    cells = map_cells(rows)
    if not config.facts and not config.facts_read:
        return {}
    report.heading("The capacity map: how many facts are kept, and how far")
    report.text(
        "recall_gap read at D facts (4D tokens of pairs and questions, the rest of the sequence the gap): a cell is "
        "the accuracy over the D questions of each test sequence, the seeds pooled, with its 95 % Wilson interval; "
        "read D above the trained D: facts past the trained count. –: not read (no room for 4D tokens, or stopped "
        f"at chance). Kept: the largest D read at >= {KEPT} with every smaller D read also >= {KEPT}."
    )
    seeds, series = len(config.seeds), series_of(config, cells)
    table = []
    for s in series:
        counts = sorted({f for (m, r, t, f, _) in cells if (m, r, t) == s})
        for count in counts:
            past = " (past the trained count)" if count > s[2] else ""
            table.append([_label(s), f"{count}{past}"] + [cell_text(cells.get((*s, count, n)), seeds) for n in lengths])
    report.table(["model", "read D"] + [f"{n:,}" for n in lengths], table)
    sizes = state_sizes(rows)
    kept_rows = {_label(s): {n: kept(cells, s, n) for n in lengths} for s in series}
    report.heading(f"Facts kept at >= {KEPT}", level=3)
    report.table(
        ["model", "state size"] + [f"{n:,}" for n in lengths],
        [
            [_label(s), sizes.get(s[0], "n/a")] + ["–" if v is None else v for v in kept_rows[_label(s)].values()]
            for s in series
        ],  # fmt: skip
    )
    left = [name for name in DELTA_BASELINES if name not in config.models]
    if left:
        report.text(f"Not in this run: {', '.join(left)} (the delta-rule baselines; `--set models=[...]` adds them).")
    report.figure(kept_figure(out, series, kept_rows, lengths), "facts kept against distance")
    frontier = [n for n in FRONTIER if n in lengths]
    if frontier and sizes:
        report.figure(frontier_figure(out, series, kept_rows, sizes, frontier), "facts kept against state size")
    return {"kept": kept_rows, "state_sizes": sizes}


def kept_figure(out: Path, series: list, kept_rows: dict, lengths: tuple[int, ...]) -> str:
    """Facts kept at >= `KEPT` against test length (log2 axes), one line per model, read and trained count."""
    from bdh.plotting import pyplot

    plt = pyplot()
    fig, ax = plt.subplots(figsize=(10, 5.5))
    for s in series:
        pts = [(n, v) for n, v in kept_rows[_label(s)].items() if v is not None]
        if pts:
            ax.plot([p[0] for p in pts], [max(p[1], 0.5) for p in pts], marker="o", label=_label(s))
    ax.set_xscale("log", base=2)
    ax.set_yscale("log", base=2)
    ax.set_xlabel("test length (tokens)", fontsize=12)
    ax.set_ylabel(f"facts kept at >= {KEPT} (0 drawn at 1/2)", fontsize=12)
    ax.set_title("recall through a gap: facts kept against distance", fontsize=13)
    ax.grid(alpha=0.3)
    _legend_or_note(ax, "no model was read at any length")
    return save_figure(fig, out / "figures" / "facts_kept")


def frontier_figure(out: Path, series: list, kept_rows: dict, sizes: dict[str, int], frontier: list[int]) -> str:
    """Facts kept against state size (log axes), one panel per length of `FRONTIER` that was read."""
    from bdh.plotting import pyplot

    plt = pyplot()
    fig, axes = plt.subplots(1, len(frontier), figsize=(max(10, 7 * len(frontier)), 5.5), squeeze=False)
    for ax, length in zip(axes[0], frontier):
        for s in series:
            value = kept_rows[_label(s)].get(length)
            if value is not None and s[0] in sizes:
                ax.scatter([sizes[s[0]]], [max(value, 0.5)], label=_label(s))
        ax.set_xscale("log")
        ax.set_yscale("log", base=2)
        ax.set_xlabel("state size (Zoology's count)", fontsize=12)
        ax.set_ylabel(f"facts kept at >= {KEPT} (0 drawn at 1/2)", fontsize=12)
        ax.set_title(f"at {length:,} tokens", fontsize=13)
        ax.grid(alpha=0.3)
        _legend_or_note(ax, f"no model was read at {length:,} tokens")
    return save_figure(fig, out / "figures" / "facts_frontier")


def _legend_or_note(ax, note: str) -> None:
    """The panel's legend, or where nothing was drawn in it, a note saying so (an empty panel is not a result)."""
    if ax.get_legend_handles_labels()[0]:
        ax.legend(fontsize=9)
    else:
        ax.text(0.5, 0.5, note, transform=ax.transAxes, ha="center", va="center", fontsize=12)
