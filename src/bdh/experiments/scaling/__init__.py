"""BDH-GPU against a GPT-2-style Transformer at equal parameters, across sizes (paper section 4.2,
Fig. 7, appendix B.2).

A ladder of sizes (`ladder`), the same tokens and batches for both models of a seed, each model's learning rate
swept at the smallest size (`experiment`), power-law fits (`fits`) and per-size verdicts against the seed spread
(`verdict`), in report.md (`report`, `figures`); runs resume from their folders (`runs`). The protocol is in
docs/experiments.md."""

from __future__ import annotations

from .config import Config
from .experiment import MARKER, choose_lr, describe_plan, prepare_resume, run
from .fits import crossovers, fit_power_law
from .ladder import build_ladder, inference_cost, train_flops_per_token
from .verdict import BDH_BETTER, GPT_BETTER, TIE, UNDECIDED, compare, decide, findings

__all__ = [
    "BDH_BETTER",
    "GPT_BETTER",
    "MARKER",
    "TIE",
    "UNDECIDED",
    "Config",
    "build_ladder",
    "choose_lr",
    "compare",
    "crossovers",
    "decide",
    "describe_plan",
    "findings",
    "fit_power_law",
    "inference_cost",
    "prepare_resume",
    "run",
    "train_flops_per_token",
]
