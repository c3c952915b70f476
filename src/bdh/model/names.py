"""The names a BDH config chooses its computation by, defined once (no PyTorch import): attention forms, modes, RoPE
schemes, state writes, write gates, write keys, and the `STATE_RULES` the kernels are chosen by."""

from __future__ import annotations

ATTENTION_FORMS = ("parallel", "chunked", "recurrent")
MODES = (*ATTENTION_FORMS, "sparse")
POSITIONAL = ("rope", "rope-standard", "none")
STATE_WRITES = ("add", "delta")
WRITE_GATES = ("sigmoid", "hard", "annealed")
WRITE_KEYS = ("unit", "centred", "signed")
STATE_RULES = ("plain", "learned", "gated", "delta")

__all__ = ["ATTENTION_FORMS", "MODES", "POSITIONAL", "STATE_RULES", "STATE_WRITES", "WRITE_GATES", "WRITE_KEYS"]
