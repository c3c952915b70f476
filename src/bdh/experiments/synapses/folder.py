"""`write_analysis`: the synapse analysis of a saved model (`analyse`, paper section 6.3) written into a folder,
and the lines ``bdh synapses`` prints about it."""

from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path

from bdh.experiments.common import Report, prepare_out
from bdh.model import BDH

from ..scaffold import Log, no_log
from .analysis import analyse
from .options import SynapseOptions


@dataclass(frozen=True)
class WrittenAnalysis:
    """An analysis written by `write_analysis`: its ``report`` (``report.results`` holds every number), the ``path`` of
    report.md and the ``seconds`` it took."""

    report: Report
    path: Path
    seconds: float

    def summary(self) -> str:
        """The headline synapse's held-out test in both languages, and the report's path: what ``bdh synapses``
        prints."""
        res = self.report.results
        opts, head = res["options"], res["headline"]
        top, second = head[opts["language"]], head[opts["second_language"]]
        return (
            f"layer {res['layer']}, head {opts['head']}: synapse {tuple(head['synapse_in_head'])} held-out "
            f"U = {top['U']:.0f} of {top['U_opt']:.0f} (U/U_opt {top['auc']:.3f}, p {top['p']:.2g}); "
            f"{opts['second_language']}: U/U_opt {second['auc']:.3f}\n"
            f"{self.path}  ({self.seconds / 60:.1f} min)"
        )


def write_analysis(
    model: BDH,
    opts: SynapseOptions,
    out: str | Path,
    *,
    model_dir: Path,
    run_dir: Path,
    overwrite: bool = False,
    log: Log = no_log,
) -> WrittenAnalysis:
    """The synapse analysis (`analyse`) of ``model`` (saved in ``model_dir`` of the run ``run_dir``), written into
    ``out``, created empty (`bdh.experiments.common.prepare_out`). A layer or head the model lacks is a one-line
    `UserError`."""
    opts.check_model(model)
    out = prepare_out(out, overwrite=overwrite, inputs=[run_dir, model_dir])
    cfg = model.config
    setup = [
        (
            "model",
            f"{model_dir.name} of {Path(run_dir).name}: BDH-GPU, {cfg.n_layer} layers, d = {cfg.n_embd}, "
            f"{cfg.n_head} heads, n = {cfg.n}",
        )
    ]
    start = time.time()
    report = analyse(model, opts, out, setup=setup, log=log)
    report.results["model_dir"] = model_dir.name
    path = report.write(out)
    return WrittenAnalysis(report, path, time.time() - start)


__all__ = ["WrittenAnalysis", "write_analysis"]
