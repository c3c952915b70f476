"""Which neurons hold the fact (`bdh.analysis.memory.trace_fact`): for each BDH run on ``induction``, at the longest
length it read, the test sequence of the first few with the longest gap, its fact (the answer after the trigger)
traced from where it was written to the question at the end: every head's share of the read, and the neurons."""

from __future__ import annotations

from typing import Any

from bdh.analysis.memory import induction_write, longest_gap, trace_fact

from ..common import Report
from .config import Config

#: neurons kept per traced run
TOP = 6
#: test sequences searched for the longest gap to trace
ROWS = 8


def trace_record(
    config: Config, record: dict[str, Any], task: Any, model: Any, test_seed: int
) -> dict[str, Any] | None:
    """The trace of one run (JSON-ready), or None where there is none to make: not BDH, not the induction task with
    one trigger, or no length read."""
    read = [r["length"] for r in record["rows"] if r["read"] == "state" and r["status"] == "ok"]
    if record["task"] != "induction" or config.induction_triggers != 1 or not read or not hasattr(model, "log_u"):
        return None
    length = max(read)
    x, y, row = longest_gap(task, length, n=config.test_sequences, seed=test_seed, rows=ROWS)
    trace = trace_fact(model, x[0].to(model.E.device), induction_write(x[0]), top=TOP, chunk=max(config.seq_len, 1024))
    return {"length": length, "row": row, "answer": int(y[0, -1]), **trace.to_dict()}


def trace_section(report: Report, records: list[dict[str, Any]]) -> None:
    """The report's section: per traced run, the heads' shares and the neurons that hold the fact."""
    traced = [r for r in records if r.get("trace")]
    if not traced:
        return
    report.heading("Which neurons hold the fact")
    report.text(
        f"Of the first {ROWS} test sequences at the longest length read, the one with the longest gap, traced through "
        "the state (`bdh.analysis.memory`): a head's share "
        "is the fact's part of the question's read score, fact / (|fact| + |every other position|); a neuron's purity "
        "is the same ratio in its own row of the state (1: the fillers wrote nothing there)."
    )
    rows = []
    for r in traced:
        t = r["trace"]
        shares = " ".join(f"L{h['layer']}H{h['head']} {h['share']:.2f}" for h in t["heads"])
        top = ", ".join(f"L{n['layer']}H{n['head']}#{n['neuron']} ({n['purity']:.2f})" for n in t["neurons"])
        right = "yes" if t["predicted"] == t["answer"] else "no"
        rows.append(
            [f"{r['model']} s{r['seed']}", f"{t['length']:,}", f"{t['length'] - 1 - t['write']:,}", right, shares, top]
        )
    report.table(["run", "length", "gap", "answered", "heads' shares", "top neurons (purity)"], rows)
