"""The names a BDH config chooses its computation by, defined once (no PyTorch import): the config declares
its fields with them, the kernels dispatch on them, experiments sweep them.

* `ATTENTION_FORMS` — the three interchangeable forms of the linear attention of Eq. 8
  (`bdh.model.kernels.pytorch.attention`), proven equal by tests;
* `MODES` — what a forward pass can be asked for: a form, or ``sparse`` (the top-k read-in of
  `bdh.model.kernels.pytorch.sparse`);
* `POSITIONAL` — the positional schemes (`bdh.model.kernels.pytorch.rope`): the official interleaved RoPE, the standard
  halves layout, none.
* `STATE_WRITES` — how a token writes the state: ``add`` (Eq. 8's Hebbian sum) or ``delta`` (ours, DeltaNet's
  correction, `bdh.model.kernels.pytorch.token_rules`).
"""

from __future__ import annotations

ATTENTION_FORMS = ("parallel", "chunked", "recurrent")
MODES = (*ATTENTION_FORMS, "sparse")
POSITIONAL = ("rope", "rope-standard", "none")
STATE_WRITES = ("add", "delta")

__all__ = ["ATTENTION_FORMS", "MODES", "POSITIONAL", "STATE_WRITES"]
