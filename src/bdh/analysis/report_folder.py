"""The brain-view report written to a folder atomically (``report.json`` and figures), and what ``bdh
inspect`` prints."""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from bdh.model import BDH

from . import report


@dataclass(frozen=True)
class WrittenReport:
    """A report written by `write_report`: its dict (JSON-ready, as in ``report.json``) and that file's path."""

    report: dict[str, Any]
    path: Path

    def summary(self) -> str:
        """The table of `bdh.analysis.report.summary_rows` and the report's path: what ``bdh inspect`` prints."""
        return f"{report.format_table(self.report['summary'])}\n\nreport: {self.path} ({self.report['seconds']:.0f} s)"


def write_report(
    model: BDH,
    tokens: torch.Tensor,
    out: Path,
    *,
    source: str,
    model_dir: Path,
    opts: report.InspectOptions | None = None,
    figures: bool = True,
    log: Callable[[str], None] = lambda msg: None,
) -> WrittenReport:
    """Inspect ``model`` on ``tokens`` into ``out`` atomically; a bad layer, head or input is one `UserError` first."""
    from bdh.outputs import atomic_folder, write_text

    from . import figures as figs

    cfg = model.config
    report.check_request(cfg, tokens, opts or report.InspectOptions())
    log(f"model {model_dir} (n = {cfg.n}, {cfg.n_head} heads, {cfg.n_layer} layers); input: {source}")
    with atomic_folder(out) as tmp:
        with torch.no_grad():
            rep, raw = report.inspect_model(model, tokens, opts, log=log)
        rep["source"] = {"model": str(model_dir), "input": source}
        write_text(tmp / "report.json", json.dumps(rep, indent=1, allow_nan=False) + "\n")
        if figures:
            log("figures")
            figs.write_all(raw, tmp, source)
    return WrittenReport(rep, Path(out) / "report.json")


__all__ = ["WrittenReport", "write_report"]
