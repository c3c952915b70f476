"""Comparing two forms of one model (a fast path and its reference): the same weights, values and gradients."""

from __future__ import annotations

import torch


def rel_err(a: torch.Tensor, b: torch.Tensor, floor: float = 0.0) -> float:
    """||a - b|| / max(||b||, floor): relative, or absolute below ``floor`` (for a tensor that is zero in exact
    arithmetic, which two forms give as different rounding noise)."""
    scale = max(b.norm().item(), floor)
    return (a - b).norm().item() / scale if scale else (a - b).norm().item()


def outputs_and_grads(model: torch.nn.Module, idx: torch.Tensor) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    """Logits and the gradients of a fixed weighted sum of them with respect to every parameter."""
    model.zero_grad()
    logits = model(idx)
    weight = torch.linspace(-1, 1, logits.numel(), dtype=logits.dtype).view_as(logits)
    (logits * weight).sum().backward()
    return logits.detach(), {n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None}


def assert_same_model(fast: torch.nn.Module, ref: torch.nn.Module, idx: torch.Tensor, tol: float) -> None:
    """``fast`` and ``ref`` (the same weights) give logits and every parameter gradient within ``tol`` (relative)."""
    ref.load_state_dict(fast.state_dict())
    a, grads_a = outputs_and_grads(fast.eval(), idx)
    b, grads_b = outputs_and_grads(ref.eval(), idx)
    assert rel_err(a, b) <= tol
    assert grads_a.keys() == grads_b.keys() and grads_a
    for name in grads_a:
        assert rel_err(grads_a[name], grads_b[name]) <= tol, name


def randomize(model: torch.nn.Module, std: float = 0.3) -> torch.nn.Module:
    """Every parameter N(0, std) (some start at zero or tiny), so every path of the model carries weight."""
    with torch.no_grad():
        for p in model.parameters():
            p.normal_(0, std)
    return model
