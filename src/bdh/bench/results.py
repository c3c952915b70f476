"""The result rows of a suite and the files made from them: scores (`evaluate_examples`), the best learning rate
(`best_lr`), one summary row per (model, setting, width) with a winner only beyond the seed spread (`summarize`)."""

from __future__ import annotations

import csv
import io
import math
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

import torch

from bdh.outputs import write_text
from bdh.seed_stats import beyond_seeds, goodness, spread_cell

from .spec import NO_WINNER, SPEED_COLUMNS, BenchError, SuiteDef, is_reference, run_key


def evaluate_examples(
    model: torch.nn.Module, task: Any, batch_size: int, batches: int | None, seed: int
) -> dict[str, float]:
    """Validation metrics plus ``val_loss`` (nats), batches weighted by examples, each key over the batches
    reporting it."""
    from bdh.train.evaluate import evaluate_metrics

    metrics, loss = evaluate_metrics(model, task, batch_size, batches, seed)
    return {**metrics, "val_loss": loss}


def _float(v: Any) -> float:
    try:
        f = float(v)
    except (TypeError, ValueError):
        return float("-inf")
    return f if math.isfinite(f) else float("-inf")


def best_lr(
    by_lr: dict[float, Sequence[dict[str, Any]]], score: Sequence[str], higher_is_better: bool = True
) -> tuple[float, dict[float, tuple[float, ...]]]:
    """The rate with the best mean score over seeds, and every rate's mean `goodness`; NaN is the worst, ties go low."""
    means = {
        lr: tuple(sum(goodness(r.get(c), higher_is_better) for r in rs) / len(rs) if rs else -math.inf for c in score)
        for lr, rs in by_lr.items()
    }
    return max(sorted(means), key=lambda lr: (means[lr], -lr)), means


def best_over_lr(
    rows: Iterable[dict[str, Any]], score: Sequence[str], higher_is_better: bool = True
) -> list[dict[str, Any]]:
    """Per (model, setting, width) the rows of `best_lr`'s rate with ``lrs_tried``; reference rows after, as
    they are."""
    groups: dict[tuple[str, str, str], dict[float, list[dict[str, Any]]]] = {}
    references = [{**r, "lrs_tried": ""} for r in rows if is_reference(r)]
    for r in rows:
        if is_reference(r):
            continue
        g = (str(r["model"]), str(r["setting"]), str(int(float(r["width"]))))
        groups.setdefault(g, {}).setdefault(float(r["lr"]), []).append(r)
    out: list[dict[str, Any]] = []
    for by_lr in groups.values():
        best, _ = best_lr(by_lr, score, higher_is_better)
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


#: the columns of every runs.csv row that are finite numbers (besides those of `run_key`)
COUNT_COLUMNS = ("params", "state_size", "lr")


def read_ledger(path: Path, scores: Sequence[str] = ()) -> list[dict[str, Any]]:
    """The typed rows of a ``runs.csv``; a damaged or repeated row is a one-line error naming the line."""
    how = "start anew with --overwrite instead of --resume, or choose another --out"
    try:
        rows = read_csv(path)
    except (UnicodeDecodeError, csv.Error) as exc:
        raise BenchError(f"{path}: not a bench runs.csv ({str(exc).splitlines()[0]}); {how}") from None
    seen: dict[tuple[str, ...], int] = {}
    for i, row in enumerate(rows, start=2):
        problem = _row_problem(row, scores)
        if problem is None and (key := run_key(row)) in seen:
            problem = f"the same run as line {seen[key]} ({' '.join(key[:5])}), which would count twice"
        if problem is not None:
            raise BenchError(f"{path}: line {i} has {problem}; not a bench runs.csv as written; {how}")
        seen[run_key(row)] = i
    return rows


def _row_problem(row: dict[str, Any], scores: Sequence[str]) -> str | None:
    """What is wrong with one ledger row (a missing column, a value that is not a number), or None."""
    try:
        run_key(row)
    except KeyError as exc:
        return f"no column {exc}"
    except (TypeError, ValueError):
        return "a value that is not a number in model, setting, width, lr, seed, steps or batch_size"
    for column in (*COUNT_COLUMNS, *scores):
        value = row.get(column)
        if value is None:
            return f"no column '{column}'"
        if value == "" and column in scores:
            continue  # a metric the task reported for no batch of this run
        try:
            number = float(value)
        except ValueError:
            return f"{column} {value!r}, not a number"
        if column in COUNT_COLUMNS and not math.isfinite(number):
            return f"{column} {value!r}, not a finite number"
        if column in scores and not _in_range(column, number):
            low, high = SCORE_RANGE.get(column, METRIC_RANGE)
            return f"{column} {value!r}, not a finite number in [{low:g}, {high:g}]"
    return None


#: the range of every metric a suite scores (its fractions: accuracies, validity), and of the other score columns
METRIC_RANGE = (0.0, 1.0)
SCORE_RANGE = {"val_loss": (0.0, math.inf)}


def _in_range(column: str, number: float) -> bool:
    """Whether a ledger's score is finite and within `SCORE_RANGE` / `METRIC_RANGE`."""
    low, high = SCORE_RANGE.get(column, METRIC_RANGE)
    return math.isfinite(number) and low <= number <= high


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


def pick_winner(scores: dict[str, Sequence[Any]], higher_is_better: bool = True) -> tuple[str | None, str]:
    """``(model, "beyond the spread")`` for the best mean if it beats every other beyond the seeds, else
    ``(None, why)``."""
    if len(scores) < 2:
        return None, "one model"
    if any(len(v) < 2 for v in scores.values()):
        return None, "one seed: no spread"
    values = {m: [goodness(x, higher_is_better) for x in v] for m, v in scores.items()}
    mean = {m: sum(v) / len(v) for m, v in values.items()}
    best = max(sorted(mean), key=lambda m: mean[m])
    if mean[best] == float("-inf"):
        return None, "no score"
    if all(beyond_seeds(scores[best], v, higher_is_better) for m, v in scores.items() if m != best):
        return best, "beyond the spread"
    return None, "within the spread"


def summarize(results: Iterable[dict[str, Any]], suite: SuiteDef) -> list[dict[str, Any]]:
    """One row per (model, setting, width): ``<c>_mean``, ``_min``, ``_max`` over seeds and the ``winner``
    (`pick_winner`); reference rows last, never competing."""
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
    winners = {g: pick_winner(s, suite.higher_is_better) for g, s in scores.items()}
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
    seeds = len(str(row.get("seeds", "")).split(";")) if lo is not None and hi is not None else 1
    return spread_cell(mean, lo, hi, seeds)


def markdown_table(summary: Sequence[dict[str, Any]], suite: SuiteDef) -> str:
    """The summary rows as markdown: ``mean (min–max)`` cells, the winner bold, ``— (why)`` where none wins."""
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
    better = "higher" if suite.higher_is_better else "lower"
    text = (
        f"# bench {suite.name}: best learning rate per (model, setting, width)\n\n"
        f"Seeds: {', '.join(map(str, seeds)) or 'none'}. Each metric is the mean over seeds with its range "
        "(min–max over seeds) in brackets; results.csv has one row per seed, summary.csv these rows.\n\n"
        f"Winner of a (setting, width): the model with the best mean `{suite.score[0]}` ({better} is better), "
        "declared (and bold) only when its worst seed is better than every other model's best seed; otherwise "
        "the winner column "
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
