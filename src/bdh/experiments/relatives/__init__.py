"""BDH among its relatives: Zoology's MQAR frontier, a byte-level language model, and what each part of BDH is worth.

A zoo of sequence mixers (`zoo`), each sized to BDH's parameter count, trained on (a) MQAR (`frontier`, Zoology's
Figure 2) and (b) the embedded Shakespeare (`lm`), then judged against BDH beyond the seed spread (`verdict`,
`report`); both suites run through the bench engine. docs/bench.md, "BDH among its relatives"."""

from __future__ import annotations

from .config import Config
from .experiment import MARKER, describe_plan, parts, prepare_resume, run
from .lm import byte_unigram

__all__ = ["MARKER", "Config", "byte_unigram", "describe_plan", "parts", "prepare_resume", "run"]
