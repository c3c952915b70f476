"""What the viewer costs: `bdh.viz` page build time and size by input length, and at the paper's model size.

    python benchmarks/viz.py                   # the tables of docs/viz.md
    python benchmarks/viz.py --quick           # tiny lengths and a small model (a test; seconds)

Prints markdown: the machine, then (1) ``build_view`` + ``render`` wall seconds and the page size for
inputs of each ``--lengths`` on the main job's model (untrained; the viewer's own input limit is not
applied here, so lengths past it can be measured), (2) the same for a ``--paper-prompt``-byte prompt on
the paper's size ``BDHConfig()`` (random weights): page size, wall and CPU seconds, and the process's
peak resident memory. Inputs are seeded random bytes.
"""

from __future__ import annotations

import os
import sys
import time

import torch
from _shared import Parser, cpu_description, peak, reset_peak, run


def main_job_model() -> torch.nn.Module:
    """The main job's model (its default run config), untrained."""
    from bdh.registry import get_model
    from bdh.train.config import RunConfig

    config = RunConfig.from_dict({})
    return get_model(config.model.name)(config.model.config).eval()


def page(model: torch.nn.Module, tokens: int, seed: int = 0) -> tuple[float, float, int]:
    """(wall s, CPU s, page bytes) of ``build_view`` + ``render`` for ``tokens`` seeded random bytes."""
    from bdh.viz.export import build_view
    from bdh.viz.page import render

    idx = torch.randint(0, 256, (tokens,), generator=torch.Generator().manual_seed(seed))
    wall, cpu = time.perf_counter(), time.process_time()
    html = render(build_view(model, idx, kind="text"))
    return time.perf_counter() - wall, time.process_time() - cpu, len(html.encode())


def length_table(model: torch.nn.Module, lengths: list[int]) -> str:
    """Seconds and page size per input length, as a markdown table."""
    page(model, 16)  # warm-up: the first call pays one-off costs (allocator, lazy imports)
    rows = ["| tokens | seconds | page |", "|---:|---:|---:|"]
    for t in lengths:
        wall, _, size = page(model, t)
        rows.append(f"| {t:,} | {wall:.1f} | {size / 1e6:.1f} MB |")
    return "\n".join(rows)


def paper_table(config, prompt: int) -> str:
    """Page size, wall and CPU seconds and peak memory at the model size ``config``."""
    from bdh import BDH

    reset_peak()
    torch.manual_seed(0)
    model = BDH(config).eval()
    wall, cpu, size = page(model, prompt)
    return "\n".join(
        [
            "| | |",
            "|---|---|",
            f"| model | L={config.n_layer}, D={config.n_embd}, h={config.n_head}, n={config.n}, "
            f"{model.num_params():,} parameters, random weights |",
            f"| HTML size ({prompt}-byte prompt) | {size / 1e6:.2f} MB |",
            f"| `build_view` + `render` | {wall:.1f} s wall clock, {cpu:.1f} s of CPU time |",
            f"| peak resident memory of the process | {peak() / 2**20:.2f} GB |",
        ]
    )


def main(argv: list[str] | None = None) -> int:
    from bdh import BDHConfig

    ap = Parser(description=__doc__.split("\n")[0])
    ap.add_argument("--quick", action="store_true", help="tiny lengths and a small model: a test, not a measurement")
    ap.add_argument("--lengths", type=int, nargs="+", default=[512, 1024, 2048, 4096], help="input lengths")
    ap.add_argument("--paper-prompt", type=int, default=256, help="prompt bytes at the paper's size (default 256)")
    ap.add_argument("--threads", type=int, help="torch threads (default: torch's default)")
    args = ap.parse_args(argv)
    if args.threads:
        torch.set_num_threads(args.threads)
    words = sys.argv[1:] if argv is None else argv
    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan")
    print(
        f"command: `{' '.join(['python benchmarks/viz.py', *words])}`\nCPU: {cpu_description()}, {os.cpu_count()} "
        f"cores, {torch.get_num_threads()} torch threads; 1-minute load average {load:.2f} at the start "
        f"(above about {torch.get_num_threads() / 2:g}, other jobs were running); torch {torch.__version__}\n"
    )
    paper = BDHConfig()
    if args.quick:
        args.lengths, args.paper_prompt = [16, 32], 16
        paper = BDHConfig(n_layer=2, n_embd=32, n_head=2, n_neurons=256)
    print("Page build time and size by input length, the main job's model (untrained):\n")
    print(length_table(main_job_model(), args.lengths))
    print("\nAt the paper's size, `BDHConfig()`:\n" if not args.quick else "\nA small model (--quick):\n")
    print(paper_table(paper, args.paper_prompt))
    return 0


if __name__ == "__main__":
    run(main)
