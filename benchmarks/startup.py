"""How long the ``bdh`` command takes to start: ``bdh --help`` and every ``bdh CMD --help``.

    python benchmarks/startup.py               # every command, 5 runs each
    python benchmarks/startup.py --runs 10

Each command runs in a fresh process (``python -m bdh ...``); the table gives the median wall time and
its ratio to two baselines measured in the same run: starting Python with nothing (``python -c pass``)
and ``python -c "import torch"`` (what every command paid before the CLI imported lazily). The target
is <= 0.5 s per ``--help``.
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import time

from _shared import Parser, run


def wall(argv: list[str], runs: int) -> float:
    """Median wall seconds of ``argv`` over ``runs`` fresh processes (after one warm-up run)."""
    subprocess.run(argv, capture_output=True, check=True)
    times = []
    for _ in range(runs):
        t0 = time.perf_counter()
        subprocess.run(argv, capture_output=True, check=True)
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def commands() -> list[list[str]]:
    """The argv words of every command and command group."""
    sys.path.insert(0, "src")
    from bdh.cli import build_parser

    out: list[list[str]] = []

    def walk(parser: argparse.ArgumentParser, words: list[str]) -> None:
        out.append(words)
        for action in parser._actions:
            if isinstance(action, argparse._SubParsersAction):
                for name, sub in action.choices.items():
                    walk(sub, words + [name])

    walk(build_parser(), [])
    return out


def main() -> None:
    ap = Parser(description=__doc__.split("\n")[0])
    ap.add_argument("--runs", type=int, default=5, help="runs per command (default 5)")
    args = ap.parse_args()
    py = sys.executable
    empty = wall([py, "-c", "pass"], args.runs)
    torch_import = wall([py, "-c", "import torch"], args.runs)
    print(
        f"baselines: python -c pass {empty:.3f} s, python -c 'import torch' {torch_import:.3f} s "
        f"({args.runs} runs each)\n"
    )
    print("| command | median s | x python | x import torch |\n|---|---:|---:|---:|")
    worst = 0.0
    for words in commands():
        t = wall([py, "-m", "bdh", *words, "--help"], args.runs)
        worst = max(worst, t)
        print(
            f"| bdh {' '.join(words + ['--help'])} | {t:.3f} | {t / empty:.1f} | {t / torch_import:.2f} |", flush=True
        )
    print(f"\nslowest: {worst:.3f} s (target <= 0.5 s)")


if __name__ == "__main__":
    run(main)
