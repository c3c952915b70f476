"""The names a BDH config chooses its computation by, defined once (no PyTorch import): `ATTENTION_FORMS` (the three
equal forms of Eq. 8's attention, `bdh.model.kernels.pytorch.attention`), `MODES` (a form, or ``sparse``) and
`POSITIONAL` (the RoPE schemes of `bdh.model.kernels.pytorch.rope`, or none), `STATE_WRITES` (``add``, Eq. 8's
Hebbian sum, or ``delta``, ours), `WRITE_GATES` (the delta rule's write strength: ``sigmoid``, or ``hard``, ours),
`WRITE_KEYS` (the delta rule's write keys: ``unit``, or ``centred``, ours) and `STATE_RULES` (the state rule those
fields make, the name the kernels are chosen by: `bdh.model.state_rules`)."""

from __future__ import annotations

ATTENTION_FORMS = ("parallel", "chunked", "recurrent")
MODES = (*ATTENTION_FORMS, "sparse")
POSITIONAL = ("rope", "rope-standard", "none")
STATE_WRITES = ("add", "delta")
WRITE_GATES = ("sigmoid", "hard")
WRITE_KEYS = ("unit", "centred")
STATE_RULES = ("plain", "learned", "gated", "delta")

__all__ = ["ATTENTION_FORMS", "MODES", "POSITIONAL", "STATE_RULES", "STATE_WRITES", "WRITE_GATES", "WRITE_KEYS"]
