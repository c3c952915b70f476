"""BDH-GPU against a GPT-2-style Transformer at equal parameters, across sizes (paper section 4.2,
Fig. 7, appendix B.2).

The paper reports that BDH-GPU "rivals GPT2-architecture Transformer performance on language and
translation tasks, at the same number of parameters (10M to 1B), for the same training data", with
"Transformer-like scaling laws". This experiment tests it at the scale a machine at hand allows:

1. **Ladder.** BDH at each size, scaled in its neuron count n only (as the paper's Table 5); the
   Transformer at each size with the depth and heads the config gives and the width that matches BDH's
   parameter count (`ladder`).
2. **Protocol.** Every run trains for the same number of tokens; the two models of a seed read the same
   batches in the same order; AdamW, weight decay 0.1, warmup and linear decay. Each model's learning
   rate is swept at the smallest size and then fixed for every size (`experiment`).
3. **Measures.** Final validation loss (nats and bits per byte) of every run, the validation curve of
   every run from its metrics.jsonl, per-direction target-side losses on the translation stream;
   training FLOPs, inference state and FLOPs per token beside the loss (`ladder`, `summary`).
4. **Fits.** L(N) = a N^-b + c per model with intervals from the covariance, refused when the sizes
   cannot determine it, and the crossover of the fitted curves (`fits`).
5. **Verdict.** At each size, the difference of the means against the seed spread: a win, a tie or
   undecided; the paper's claims checked from those (`verdict`), in report.md with the figures
   (`report`, `figures`).

Runs live in their own folders with a ``result.json``; ``--resume`` reuses those whose spec matches
(`runs`). `Config.quick` is the smoke test, `Config.full` the GPU ladder of 10M-100M parameters.
"""

from __future__ import annotations

from .config import Config
from .experiment import MARKER, choose_lr, describe_plan, prepare_resume, run
from .fits import PowerLawFit, crossovers, fit_power_law
from .ladder import MODELS, Rung, build_ladder, inference_cost, match_gpt, plan, train_flops_per_token
from .verdict import BDH_BETTER, GPT_BETTER, TIE, UNDECIDED, Comparison, compare, decide, findings

__all__ = [
    "BDH_BETTER",
    "GPT_BETTER",
    "MARKER",
    "MODELS",
    "TIE",
    "UNDECIDED",
    "Comparison",
    "Config",
    "PowerLawFit",
    "Rung",
    "build_ladder",
    "choose_lr",
    "compare",
    "crossovers",
    "decide",
    "describe_plan",
    "findings",
    "fit_power_law",
    "inference_cost",
    "match_gpt",
    "plan",
    "prepare_resume",
    "run",
    "train_flops_per_token",
]
