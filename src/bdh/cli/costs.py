"""The cost ``bdh experiment --help`` and ``bdh bench --help`` give each choice: the words of the "--help says" columns
of docs/experiments.md and docs/bench.md (tests/cli/test_help.py keeps them equal)."""

from __future__ import annotations

#: ``bdh experiment NAME``: its CPU default
EXPERIMENTS = {
    "synapses": "about 8 min",
    "merge": "about 21 min",
    "no-bptt": "about 13 min",
    "scaling": "about 22 min",
    "long-context": "hours (not timed)",
    "relatives": "about 1.5 h",
    "length": "up to 1.2 h",
}

#: ``bdh bench SUITE``: its CPU default
SUITES = {"recall": "about 27 min", "boardpath": "about 14 min", "sudoku": "about 40 min"}


def with_cost(kind: str, name: str, text: str) -> str:
    """``text`` (a choice's help line) with the cost of its CPU default on 2 cores, where one is known."""
    cost = (EXPERIMENTS if kind == "experiment" else SUITES).get(name)
    return f"{text} [2-core CPU: {cost}]" if cost else text
