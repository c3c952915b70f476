"""Why the state of a window-trained BDH breaks past T: measurements on a trained model, no retraining
(docs/long-context.md, "Why the state breaks").

`far_share`: the share of the read-out a_t (Eq. 8) that comes from tokens more than T away; `damped_curve`: the
carried loss with a damping U applied at evaluation only; `offset_curve`: the loss read from an empty state at a
large absolute position (RoPE: it must match position 0, so the positions are not the cause)."""

from __future__ import annotations

import torch
from torch import nn

from bdh.analysis.loss_by_position import ContextCurve, carried_curve, position_edges
from bdh.errors import UserError


def measurable(model: nn.Module) -> bool:
    """Whether `far_share` and `damped_curve` apply: Eq. 8's rule with a fixed U (a learned U, a decay gate or the
    delta rule changes what the state holds, and setting ``log_u`` would not reach it)."""
    return getattr(model, "state_rule", lambda: None)() == "plain"


def _require_plain(model: nn.Module, what: str) -> None:
    if not measurable(model):
        raise UserError(f"{what}: needs Eq. 8's state rule with a fixed U (not a learned U, decay gate or delta rule)")


@torch.no_grad()
def far_share(model: nn.Module, tokens: torch.Tensor, window: int) -> dict[str, list]:
    """Mean ||a_far|| / ||a|| by position bucket over layers, heads and streams (``model`` in eval mode, as `measure`
    gives it). With chunks of T, the tokens before the previous chunk's start contribute ``u^(T + i) (R x_t)^T S_prev``
    to a_t (S_prev: the state there, i: the token's place in its chunk)."""
    _require_plain(model, "far_share")
    L = tokens.shape[1] - 1
    curve = ContextCurve(position_edges(window, L), window, "far share")
    log_u = None if model.log_u is None else model.log_u.float()
    state, prev, start = model.init_state(tokens.shape[0]), None, 0
    while start < L:
        part = tokens[:, start : min(start + window, L)]
        shares: list[torch.Tensor] = []

        def hook(_model, layer, act, prev=prev, shares=shares):
            if prev is None:
                return
            t = torch.arange(act.xr.shape[2], dtype=torch.float32) + window
            q = act.xr if log_u is None else act.xr * torch.exp(log_u.view(-1, 1, 1) * t.view(1, -1, 1))
            far = q @ prev.rho[layer]
            shares.append((far.norm(dim=-1) / act.a.norm(dim=-1).clamp_min(1e-12)).mean(dim=1))  # B, T

        _, new_state = model.step(part, state, hook=hook)
        if shares:
            curve.add(torch.stack(shares).mean(dim=0), start)
        prev, state, start = state, new_state, start + part.shape[1]
    means = [s / c if c else float("nan") for s, c in zip(curve.loss_sum, curve.count)]
    return {"edges": curve.edges, "buckets": curve.labels, "share": means}


@torch.no_grad()
def damped_curve(model: nn.Module, tokens: torch.Tensor, window: int, retention: tuple[float, ...]) -> ContextCurve:
    """`carried_curve` with the damping U = diag(``retention``) applied at evaluation only (restored after)."""
    _require_plain(model, "damped_curve")
    saved = model.log_u
    model.log_u = torch.log(torch.tensor(retention, dtype=torch.float32, device=model.E.device))
    try:
        return carried_curve(model, tokens, window, chunk=window)
    finally:
        model.log_u = saved


@torch.no_grad()
def offset_curve(model: nn.Module, tokens: torch.Tensor, window: int, offset: int) -> ContextCurve:
    """The carried loss of the first ``2 * window`` positions read from an empty state at position ``offset``
    (``model`` in eval mode, as for `far_share`)."""
    part = tokens[:, : 2 * window + 1]
    curve = ContextCurve(position_edges(window, part.shape[1] - 1), window, f"from position {offset}")
    state = model.init_state(tokens.shape[0])
    state.pos = offset
    logits, _ = model.step(part[:, :-1], state)
    losses = torch.nn.functional.cross_entropy(logits.float().transpose(1, 2), part[:, 1:], reduction="none")
    curve.add(losses, 0)
    return curve


def cause_record(model: nn.Module, tokens: torch.Tensor, window: int) -> dict:
    """The three measurements on ``tokens`` (the experiment's held-out streams), ``model`` in eval mode
    (its mode restored after)."""
    was_training = model.training
    model.eval()
    try:
        return _cause(model, tokens, window)
    finally:
        model.train(was_training)


def _cause(model: nn.Module, tokens: torch.Tensor, window: int) -> dict:
    from bdh.model.config import alibi_retention

    zero = offset_curve(model, tokens, window, 0)
    far = offset_curve(model, tokens, window, 50_000)
    return {
        "far_share": far_share(model, tokens, window),
        "eval_damping_alibi": damped_curve(model, tokens, window, alibi_retention(model.config.n_head)).to_dict(),
        "offset": {"position_0": zero.to_dict(), "position_50000": far.to_dict()},
    }


__all__ = ["cause_record", "damped_curve", "far_share", "measurable", "offset_curve"]
