"""BDH among its relatives: Zoology's MQAR frontier, a byte-level language model, and what each part of BDH is worth.

The question readers of the paper ask first ("isn't it just linear attention with Q = K?") is answered the way
Zoology (Arora et al. 2023) answers it for gated convolutions: a zoo of sequence mixers, each sized to BDH's
parameter count, trained on the same tasks, read against the recurrent state each needs.

1. **Models** (`zoo`): registered models and BDH's ablated rows (BDH with one of its ablations turned on), one
   line each in `zoo.MODELS`.
2. **(a) The MQAR frontier** (`frontier`, Zoology's Figure 2): accuracy against the width and against the state
   size at two sequence lengths, through the recall suite of ``bdh bench``.
3. **(b) The language model** (`lm`): the embedded Shakespeare at the main job's parameter count, bits per byte at
   equal tokens and at equal wall-clock (the trainer's time budget), against the byte unigram.
4. **(c) Verdicts** (`verdict`): every model and ablated row against BDH, setting by setting, beyond the seed spread
   or not, with the CPU seconds per step beside every score; the report (`report`).

Both suites run through the bench engine (`bdh.bench.runner.run_suite`: its runs.csv ledger makes ``--resume``
work); `costs` estimates the plan's time from steps timed on the machine at hand.
"""

from __future__ import annotations

from .config import Config
from .experiment import MARKER, describe_plan, parts, prepare_resume, run
from .frontier import FrontierSweep
from .lm import LMSweep, byte_unigram
from .verdict import BETTER, WORSE, Verdict, compare, tally
from .zoo import MODELS

__all__ = [
    "BETTER",
    "MARKER",
    "MODELS",
    "WORSE",
    "Config",
    "FrontierSweep",
    "LMSweep",
    "Verdict",
    "byte_unigram",
    "compare",
    "describe_plan",
    "parts",
    "prepare_resume",
    "run",
    "tally",
]
