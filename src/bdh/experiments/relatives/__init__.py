"""BDH among its relatives: Zoology's MQAR frontier, a byte-level language model, and what each part of BDH is worth.

A zoo of sequence mixers (`zoo`), each sized to BDH's parameter count, trained on (a) MQAR (`frontier`, Zoology's
Figure 2) and (b) the embedded Shakespeare (`lm`), then judged against BDH beyond the seed spread (`verdict`,
`report`); both suites run through the bench engine. docs/bench.md, "BDH among its relatives"."""

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
