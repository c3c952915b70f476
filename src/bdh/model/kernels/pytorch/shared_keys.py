"""The parallel form of linear attention when the keys are the queries (BDH: k = q = R x), with a lean backward: A = (x
x^T) * W (W the damped causal mask, Eq. 8), and with k = q the gradient is one product,

    dx = (dA + dA^T) x,          dA = (do v^T) * W,          dv = A^T do,

a third less of the backward's attention matmuls than autograd's dq + dk."""

from __future__ import annotations

import torch


class SharedKeyAttention(torch.autograd.Function):
    """a = ((x x^T) * W) @ v, the backward as in the module docstring."""

    @staticmethod
    def forward(ctx, x: torch.Tensor, v: torch.Tensor, W: torch.Tensor | None) -> torch.Tensor:
        scores = x @ x.mT
        if W is not None:
            scores.mul_(W)
        ctx.save_for_backward(x, v, scores, W)
        return scores @ v

    @staticmethod
    def backward(ctx, g: torch.Tensor):
        x, v, scores, W = ctx.saved_tensors
        g = g.to(x.dtype)
        dx = dv = None
        if ctx.needs_input_grad[0]:
            dA = g @ v.mT
            if W is not None:
                dA.mul_(W)
            dx = (dA + dA.mT) @ x
        if ctx.needs_input_grad[1]:
            dv = scores.mT @ g
            if v.shape[1] != dv.shape[1]:
                dv = dv.sum(dim=1, keepdim=True)  # values shared by the heads
        return dx, dv, None


def shared_key_attention(x: torch.Tensor, v: torch.Tensor, W: torch.Tensor | None) -> torch.Tensor:
    """((x x^T) * W) @ v for x (B, H, T, N), v (B, 1 or H, T, D), W (1 or H, T, T) or None; cast to autocast's
    dtype here."""
    if torch.is_autocast_enabled(x.device.type):
        low = torch.get_autocast_dtype(x.device.type)
        x, v = x.to(low), v.to(low)
    return SharedKeyAttention.apply(x, v, None if W is None else W.to(x.dtype))
