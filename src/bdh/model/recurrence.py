"""Recurrent depth as weight-shared reasoning models train it (HRM, TRM, the RRN; docs/bench.md "Sudoku"), for models
whose passes share their weights (BDH, Hyper-SET, GPT with ``share_layers``); both are runtime fields.

* ``random_depth: [lo, hi]``: in training, each forward runs a pass count drawn from lo..hi (torch's random stream);
eval runs the configured depth; ``n_layer`` given to a call wins.
* ``deep_supervision``: the loss is the mean over every pass (the model's ``pass_logits``), not only the last."""

from __future__ import annotations

#: the config fields of the options (each model lists them in its ``RUNTIME_FIELDS``)
FIELDS = frozenset({"random_depth", "deep_supervision"})


def depth_complaint(
    random_depth: tuple[int, int] | None, deep_supervision: bool, shared: bool
) -> tuple[str, str] | None:
    """(field, why) for options a config cannot take (1 <= lo <= hi; weight-shared passes only), or None."""
    if random_depth is not None:
        if len(random_depth) != 2 or any(isinstance(k, bool) or not isinstance(k, int) for k in random_depth):
            return "random_depth", f"must be [lo, hi], two integers, or null; got {random_depth!r}"
        lo, hi = random_depth
        if not 1 <= lo <= hi < 2**31:
            return "random_depth", f"[lo, hi] needs 1 <= lo <= hi < 2**31, got [{lo}, {hi}]"
        if not shared:
            return "random_depth", "a random number of passes needs weight-shared passes (every pass the same layer)"
    if deep_supervision and not shared:
        return "deep_supervision", "a loss at every pass needs weight-shared passes (every pass the same layer)"
    return None


def passes_of(n_layer: int | None, random_depth: tuple[int, int] | None, training: bool) -> int | None:
    """The pass count asked for (``n_layer``), else drawn from ``random_depth`` in training, else None (configured)."""
    if n_layer is not None or random_depth is None or not training:
        return n_layer
    import torch  # here: the configs import this module, and building a command's help imports no torch

    lo, hi = random_depth
    return int(torch.randint(lo, hi + 1, ()).item())
