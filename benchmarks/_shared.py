"""Pieces the benchmark scripts share: one-line errors (`Parser`, `run`), the official checkout as a module, and peak
resident memory.

The scripts are run as files (``python benchmarks/perf.py``), so this module is imported from the same
folder; nothing of the official code is copied, it is loaded from the path the user gives.
"""

from __future__ import annotations

import argparse
import importlib.util
import platform
import resource
import sys
from collections.abc import Callable
from pathlib import Path
from typing import NoReturn


class Parser(argparse.ArgumentParser):
    """``argparse.ArgumentParser`` whose errors are one line, ``PROG: error: MESSAGE (see 'PROG --help')``, exit
    status 2 (no usage block), as the ``bdh`` commands print them."""

    def error(self, message: str) -> NoReturn:
        print(f"{self.prog}: error: {message} (see '{self.prog} --help')", file=sys.stderr)
        sys.exit(2)


def run(main: Callable[[], int | None]) -> NoReturn:
    """``sys.exit(main())`` with the one-line errors of the ``bdh`` commands: a `bdh.errors.UserError` (a value a
    check refuses, a damaged model folder) is ``PROG: error: MESSAGE`` on stderr and exit status 2, no traceback."""
    from bdh.errors import UserError

    try:
        code = main()
    except UserError as exc:
        print(f"{Path(sys.argv[0]).name}: error: {' '.join(str(exc).split())}", file=sys.stderr)
        code = 2
    sys.exit(code)


def load_official(checkout: Path):
    """The official ``bdh.py`` as a module named ``official_bdh`` (our package is also called ``bdh``)."""
    path = Path(checkout) / "bdh.py"
    if not path.is_file():
        raise SystemExit(f"error: {checkout}: no bdh.py (give the path of a pathwaycom/bdh checkout)")
    spec = importlib.util.spec_from_file_location("official_bdh", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def status_kib(field: str) -> int:
    """A ``/proc/self/status`` field in KiB (OSError where there is none)."""
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(field + ":"):
                return int(line.split()[1])
    raise OSError(f"{field} not in /proc/self/status")


def reset_peak() -> int:
    """Reset the peak resident size (VmHWM) where Linux allows it; return the current size in KiB."""
    try:
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")  # resets VmHWM, the peak resident set size
        return status_kib("VmRSS")
    except OSError:
        return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss


def rss_mb() -> float:
    """The current resident size in MiB (``/proc/self/status`` VmRSS; elsewhere the peak, the closest the standard
    library gives without psutil)."""
    try:
        return status_kib("VmRSS") / 1024
    except OSError:
        return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def peak() -> int:
    """The peak resident size in KiB since the last `reset_peak`."""
    try:
        return status_kib("VmHWM")
    except OSError:
        return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss


def cpu_description() -> str:
    """The CPU's model name and the flags that decide the bf16 speed (from /proc/cpuinfo on Linux)."""
    name, flags = platform.processor() or platform.machine(), set()
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                key, _, value = line.partition(":")
                if key.strip() == "model name":
                    name = value.strip()
                elif key.strip() == "flags":
                    flags = set(value.split())
                if name and flags:
                    break
    except OSError:
        pass
    wanted = ("avx2", "avx512f", "avx512_bf16", "amx_bf16")
    return f"{name} [{' '.join(f for f in wanted if f in flags) or 'flags unknown'}]"


def recall_gap_parser(description: str, lengths: list[int]) -> argparse.ArgumentParser:
    """The arguments of the benchmarks that read one trained model of ``bdh experiment length``'s recall_gap task
    (recall_fillers, recall_writes): its folder, the test lengths (default ``lengths``), sequences, pairs, threads."""
    from bdh.cli.checks import integer

    p = Parser(description=description)
    p.add_argument("model", type=Path, help="a model folder of a recall_gap run of bdh experiment length")
    p.add_argument("--lengths", type=integer(1), nargs="+", default=lengths)
    p.add_argument(
        "--sequences", type=integer(1), default=64, help="test sequences per length (the experiment's first)"
    )
    p.add_argument("--pairs", type=integer(1), default=8, help="D, the key-value pairs the run was trained with")
    p.add_argument("--threads", type=integer(1), default=2)
    return p
