"""The long-context report: tables by recipe (mean over seeds, min–max), figures, and the verdict on the
targets (carried loss far out at or below the windowed loss at T, the state's gain, recall far back)."""

from __future__ import annotations

import math
from collections.abc import Sequence
from pathlib import Path

from bdh.analysis.stats import above_chance
from bdh.seed_stats import mean, spread_cell
from bdh.tasks.facts import VALUE_LETTERS
from bdh.tasks.lengths import wilson_interval

from ..common import Report, save_figure
from .config import RECIPES, Config

#: the carried-loss columns: buckets that end at these positions (bytes)
CARRIED_AT = (1024, 4096, 16384, 65536)
#: allowed windowed cost of a recipe against ``official`` (bits per byte), and the state's required gain
WINDOW_COST, STATE_GAIN = 0.05, 0.05
#: the distance (bytes) at which recall through the state must be above chance (issue target: 4k)
RECALL_AT = 4096


def _bucket(curve: dict, hi: int) -> float:
    """Bits in the bucket of ``curve`` that ends at ``hi`` (NaN if none does)."""
    for edge, bits in zip(curve["edges"][1:], curve["bits"]):
        if edge == hi:
            return bits
    return float("nan")


def _span(curve: dict, lo: int, hi: int) -> float:
    """Bits over the buckets inside [lo, hi), weighted by their counts (NaN if none)."""
    total = count = 0.0
    for a, b, bits, c in zip(curve["edges"][:-1], curve["edges"][1:], curve["bits"], curve["count"]):
        if a >= lo and b <= hi and c:
            total, count = total + bits * c, count + c
    return total / count if count else float("nan")


def _stat(values: Sequence[float]) -> str:
    vals = [v for v in values if v is not None and not math.isnan(v)]
    if not vals:
        return "-"
    return spread_cell(mean(vals), min(vals), max(vals), len(vals))


def by_recipe(records: Sequence[dict]) -> dict[str, list[dict]]:
    out: dict[str, list[dict]] = {}
    for r in records:
        out.setdefault(r["recipe"], []).append(r)
    return out


def summary(runs: list[dict], length: int) -> dict[str, float]:
    """Seed means of the headline numbers of one recipe."""
    far_lo = min(16384, length // 4)
    s = {"windowed": mean([r["windowed"]["total_bits"] for r in runs])}
    if "carried" in runs[0]:
        s["carried_far"] = mean([_span(r["carried"], far_lo, length) for r in runs])
        s["gain_1k_4k"] = mean([_span(r["cut"], 1024, 4096) - _span(r["carried"], 1024, 4096) for r in runs])
    return s


def carried_table(report: Report, groups: dict[str, list[dict]]) -> None:
    report.table(
        ["recipe", "windowed (T)", *(f"carried at {h // 1024}k" for h in CARRIED_AT), "cut to T, 1k–4k"],
        [
            [
                name,
                _stat([r["windowed"]["total_bits"] for r in runs]),
                *(_stat([_bucket(r["carried"], h) for r in runs]) if "carried" in runs[0] else "-" for h in CARRIED_AT),
                _stat([_span(r["cut"], 1024, 4096) for r in runs]),
            ]
            for name, runs in groups.items()
        ],
    )


def gain_table(report: Report, groups: dict[str, list[dict]]) -> None:
    labels = next(iter(groups.values()))[0]["cut"]["buckets"]
    rows = []
    for name, runs in groups.items():
        if "carried" not in runs[0]:
            continue
        gains = [[c - k for c, k in zip(r["cut"]["bits"], r["carried"]["bits"])] for r in runs]
        rows.append([name, *(_stat([g[i] for g in gains]) for i in range(len(labels)))])
    report.table(["recipe", *labels], rows)


def recall_table(report: Report, groups: dict[str, list[dict]]) -> None:
    distances = [row["distance"] for row in next(iter(groups.values()))[0]["recall"]]
    rows = []
    for name, runs in groups.items():
        for via in ("carried", "cut"):
            if via not in runs[0]["recall"][0]:
                continue
            cells = [_stat([r["recall"][i][via]["recall"] for r in runs]) for i in range(len(distances))]
            ctl = _stat([mean([row[via]["control"] for row in r["recall"]]) for r in runs])
            rows.append([name, "state" if via == "carried" else "cut to T", *cells, ctl])
    report.table(["recipe", "read by", *(f"{d:,}" for d in distances), "control accuracy"], rows)


def words_table(report: Report, groups: dict[str, list[dict]]) -> None:
    """Bits per letter on recurring words by distance to their previous occurrence: state against cut context."""
    first = next((runs for runs in groups.values() if "words" in runs[0]), None)
    if first is None:
        return
    labels = [row["distance"] for row in first[0]["words"]]
    rows = []
    for name, runs in groups.items():
        if "words" not in runs[0]:
            continue
        gains = [
            _stat([r["words"][i]["cut_bits"] - r["words"][i]["carried_bits"] for r in runs]) for i in range(len(labels))
        ]
        rows.append([name, *gains])
    rows.append(["letters scored (seed 0 of the first recipe)", *(str(row["letters"]) for row in first[0]["words"])])
    report.table(["recipe", *labels], rows)


def cause_table(report: Report, groups: dict[str, list[dict]]) -> None:
    """Far share of a_t, and the eval-time damping and position-offset ablations, per undamped recipe."""
    for name, runs in groups.items():
        if "cause" not in runs[0]:
            continue
        c0 = runs[0]["cause"]
        labels = c0["far_share"]["buckets"]
        report.text(f"**{name}** (mean over seeds):")
        share = [_stat([r["cause"]["far_share"]["share"][i] for r in runs]) for i in range(len(labels))]
        damped = [_stat([r["cause"]["eval_damping_alibi"]["bits"][i] for r in runs]) for i in range(len(labels))]
        carried = [_stat([r["carried"]["bits"][i] for r in runs]) for i in range(len(labels))]
        cut = [_stat([r["cut"]["bits"][i] for r in runs]) for i in range(len(labels))]
        report.table(
            ["", *labels],
            [
                ["far share, norm(a_far) / norm(a)", *share],
                ["carried bits", *carried],
                ["carried bits, ALiBi damping at evaluation only", *damped],
                ["cut to T bits", *cut],
            ],
        )
        at0 = mean([r["cause"]["offset"]["position_0"]["total_bits"] for r in runs])
        at50k = mean([r["cause"]["offset"]["position_50000"]["total_bits"] for r in runs])
        report.text(
            f"First 2T bytes read from an empty state at position 0: {at0:.4f} bits; at position 50,000: "
            f"{at50k:.4f} bits (RoPE scores depend on t - tau only)."
        )


def generation_table(report: Report, groups: dict[str, list[dict]], reference: dict) -> None:
    keys = ("ngram_first", "ngram_last", "zlib_first", "zlib_last")
    rows = [["held-out text", *(f"{reference[k]:.3f}" for k in keys)]]
    for name, runs in groups.items():
        if "generation" in runs[0]:
            rows.append([name, *(_stat([r["generation"][k] for r in runs]) for k in keys)])
    report.table(
        ["recipe", "n-gram bits, first 1k", "n-gram bits, last 1k", "zlib ratio, first", "zlib ratio, last"], rows
    )


def speed_table(report: Report, groups: dict[str, list[dict]]) -> None:
    rows = []
    for name, runs in groups.items():
        if "speed" in runs[0]:
            ratio = [r["speed"]["carried_tokens_per_s"] / r["speed"]["windowed_tokens_per_s"] for r in runs]
            tps = mean([r["speed"]["carried_tokens_per_s"] for r in runs])
            rows.append([name, f"{tps:,.0f}", _stat(ratio), f"{runs[0]['state_bytes']:,}"])
    report.table(["recipe", "carried tokens/s", "carried / windowed", "state bytes per stream"], rows)


def curves_figure(out: Path, groups: dict[str, list[dict]], T: int) -> str:
    from bdh.plotting import pyplot

    plt = pyplot()
    fig, (ax, bx) = plt.subplots(1, 2, figsize=(14, 5.5))
    for name, runs in groups.items():
        key = "carried" if "carried" in runs[0] else "cut"
        edges = runs[0][key]["edges"]
        mids = [max(1.0, (a + b) / 2) for a, b in zip(edges[:-1], edges[1:])]
        ax.plot(
            mids,
            [mean([r[key]["bits"][i] for r in runs]) for i in range(len(mids))],
            marker="o",
            label=name + ("" if key == "carried" else " (context cut to T)"),
        )
        if key == "carried":
            gain = [mean([r["cut"]["bits"][i] - r["carried"]["bits"][i] for r in runs]) for i in range(len(mids))]
            bx.plot(mids, gain, marker="o", label=name)
    for a, title, ylabel in (
        (ax, "loss by position, state carried (GPT: sliding window)", "bits per byte"),
        (bx, "what the state adds over a context cut to T", "cut-to-T bits - carried bits"),
    ):
        a.axvline(T, color="grey", linestyle=":", label=f"T = {T}")
        a.set_xscale("log", base=2)
        a.set_xlabel("position in the stream (bytes)", fontsize=12)
        a.set_ylabel(ylabel, fontsize=12)
        a.set_title(title, fontsize=13)
        a.grid(alpha=0.3)
        a.legend(fontsize=10)
    bx.axhline(0, color="black", linewidth=0.8)
    return save_figure(fig, out / "figures" / "context")


def recall_figure(out: Path, groups: dict[str, list[dict]]) -> str:
    from bdh.plotting import pyplot

    plt = pyplot()
    fig, ax = plt.subplots(figsize=(10, 5.5))
    for name, runs in groups.items():
        via = "carried" if "carried" in runs[0]["recall"][0] else "cut"
        ds = [row["distance"] for row in runs[0]["recall"]]
        ax.plot(
            ds,
            [mean([r["recall"][i][via]["recall"] for r in runs]) for i in range(len(ds))],
            marker="o",
            label=name + (" (state)" if via == "carried" else " (window)"),
        )
    ax.axhline(0, color="black", linewidth=0.8, label="no recall (the control)")
    ax.set_xscale("log", base=2)
    ax.set_xlabel("bytes between the fact and the question", fontsize=12)
    ax.set_ylabel("recall: accuracy - control accuracy", fontsize=12)
    ax.set_title("a fact read once, asked for later", fontsize=13)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=10)
    return save_figure(fig, out / "figures" / "recall")


def verdicts(groups: dict[str, list[dict]], length: int) -> list[tuple[str, bool | None, str]]:
    """Per BDH recipe: flat far out (carried at 16k-64k <= windowed), cost against official, the state's gain."""
    base = summary(groups["official"], length)["windowed"] if "official" in groups else None
    found = []
    for name, runs in groups.items():
        if "carried" not in runs[0]:
            continue
        s = summary(runs, length)
        cost = None if base is None else s["windowed"] - base
        flat = s["carried_far"] <= s["windowed"]
        cheap = None if cost is None else cost <= WINDOW_COST
        pays = s["gain_1k_4k"] >= STATE_GAIN
        numbers = f"carried at 16k–64k {s['carried_far']:.3f}, windowed {s['windowed']:.3f}" + (
            "" if cost is None else f", windowed cost against official {cost:+.3f}"
        )
        found.append(
            (
                f"{name}: reads past T (carried far <= windowed at T, cost <= {WINDOW_COST})",
                flat and cheap is not False,
                numbers,
            )
        )
        found.append(
            (
                f"{name}: the state pays (>= {STATE_GAIN} bits over the cut context at 1k–4k)",
                pays,
                f"gain {s['gain_1k_4k']:+.3f}",
            )
        )
        found.append(recall_verdict(name, runs))
    return found


def recall_verdict(name: str, runs: list[dict]) -> tuple[str, bool | None, str]:
    """Recall through the state at the first probed distance of at least `RECALL_AT` bytes: above chance
    (`bdh.analysis.stats.above_chance`) when the Wilson interval of the accuracy on the value's letters lies above
    the control's (the letters of every seed pooled)."""
    rows = [(i, row) for i, row in enumerate(runs[0]["recall"]) if row["distance"] >= RECALL_AT]
    title = f"{name}: recall through the state above chance at {RECALL_AT:,} bytes"
    if not rows:
        return title, None, f"no recall distance of {RECALL_AT:,} bytes or more was probed"
    i, row = rows[0]
    got = [r["recall"][i]["carried"] for r in runs]
    n = sum(g["trials"] for g in got) * VALUE_LETTERS
    hit, ctl = mean([g["accuracy"] for g in got]), mean([g["control"] for g in got])
    right, top = round(hit * n), wilson_interval(round(ctl * n), n)[1]  # the letters right; the control's top
    low = wilson_interval(right, n)[0]
    numbers = f"at {row['distance']:,} bytes: accuracy {hit:.3f} (from {low:.3f}), control {ctl:.3f} (to {top:.3f})"
    return title, above_chance(right, n, top), f"{numbers}, {n} letters"


def position_sections(report: Report, config: Config, out: Path, groups: dict[str, list[dict]]) -> None:
    """Loss by position, what the state adds, why it breaks: the carried, cut and damped readings."""
    report.heading("Loss by position")
    report.text(
        "windowed: windows of T from an empty state; carried: the state carried from the stream's start; "
        "cut to T: every byte from at most T bytes before it (stride "
        f"{config.cut_stride})."
    )
    carried_table(report, groups)
    report.figure(curves_figure(out, groups, config.seq_len), "loss by position, and what the state adds")
    report.heading("What the state adds: cut-to-T bits minus carried bits, by position")
    gain_table(report, groups)
    report.heading("Why the state breaks")
    report.text(
        "far share: the norm of the part of the attention read-out a_t that comes from tokens more than T "
        "away (before the previous window's start), over the norm of a_t. ALiBi damping at evaluation only: "
        "the same weights, the far tokens forgotten."
    )
    cause_table(report, groups)


def write_report(config: Config, out: Path, records: list[dict], reference: dict, seconds: float) -> Path:
    """report.md, results.json and the figures of the runs' ``records``; returns the report's path."""
    groups = by_recipe(records)
    report = Report("BDH past its training window: recipes side by side")
    report.text(
        f"Model L={config.n_layer}, D={config.n_embd}, h={config.n_head}, n={config.n_neurons}, "
        f"{config.steps} steps of {config.batch_size} x {config.seq_len} bytes of Shakespeare per run, seeds "
        f"{config.seeds}. Measured on {config.eval_lanes} held-out streams of {config.eval_length:,} bytes "
        f"(the validation split). Bits per byte; mean over seeds (min–max). Training and measuring took "
        f"{seconds / 60:.1f} min of wall time over all runs."
    )
    position_sections(report, config, out, groups)
    report.heading("Words read before")
    report.text(
        "Bits per letter on words of 5+ letters after their first 2 letters, where the word last occurred the "
        "given number of bytes earlier (always more than T): cut-to-T bits minus carried bits (positive: the "
        "state remembers the word). The last column is first occurrences, where there is nothing to remember."
    )
    words_table(report, groups)
    report.heading("Recall through the state")
    report.text("Accuracy on the value's letters with the fact minus without it (the control), by distance.")
    recall_table(report, groups)
    report.figure(recall_figure(out, groups), "recall by distance")
    report.heading("Long generation")
    report.text(
        f"{config.generate_bytes:,} bytes sampled at temperature 0.8 after {256} bytes of held-out text; "
        f"the first and last 1,000 scored by a {config.ngram}-gram model of the training split and by zlib."
    )
    generation_table(report, groups, reference)
    report.heading("Speed and memory")
    speed_table(report, groups)
    report.heading("Verdict")
    report.findings(verdicts(groups, config.eval_length))
    report.results = {
        "config": config.to_dict(),
        "recipes": {k: v for k, v in RECIPES.items() if k in groups},
        "runs": records,
        "summary": {k: summary(v, config.eval_length) for k, v in groups.items()},
        "reference_text": reference,
        "seconds": seconds,
    }
    return report.write(out)


__all__ = ["write_report"]
