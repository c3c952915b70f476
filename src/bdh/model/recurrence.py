"""Recurrent depth as the weight-shared reasoning models train it (HRM, TRM, the RRN; docs/bench.md "Sudoku"):
options of the configs of the models whose layer passes all apply the same weights (BDH, Hyper-SET, GPT with
``share_layers``), declared here once.

* ``random_depth: [lo, hi]``: in training mode, every forward (and `pass_logits`) runs a number of passes drawn
  uniformly from lo..hi, from torch's random stream as dropout is (seeded by the run); eval mode runs the
  configured depth, and ``n_layer`` given to a call always wins.
* ``deep_supervision``: the training objective takes the loss after every pass, not only the last (the mean of the
  passes' cross-entropies; `bdh.train.parts.Objective`), through the model's ``pass_logits``.

Neither changes what the weights mean: both are runtime fields (a checkpoint loads with or without them)."""

from __future__ import annotations

#: the config fields of the options (each model lists them in its ``RUNTIME_FIELDS``)
FIELDS = frozenset({"random_depth", "deep_supervision"})


def depth_complaint(
    random_depth: tuple[int, int] | None, deep_supervision: bool, shared: bool
) -> tuple[str, str] | None:
    """(field, why) for options a config cannot take, or None: ``random_depth`` needs two integers 1 <= lo <= hi,
    and either option a model whose passes share their weights (``shared``)."""
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
    """The pass count a call asked for (``n_layer``), else one drawn from ``random_depth`` in training mode, else
    None: the model's configured depth (the model's own checks of ``n_layer`` apply to what is returned)."""
    if n_layer is not None or random_depth is None or not training:
        return n_layer
    import torch  # here: the configs import this module, and building a command's help imports no torch

    lo, hi = random_depth
    return int(torch.randint(lo, hi + 1, ()).item())
