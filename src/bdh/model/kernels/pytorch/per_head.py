"""The per-head products of Eq. 8 (z = Dy LN(a), and Dx v where it is not fused) without copying the weight per
sequence: `per_head`, a (B, H_a, T, D) @ W (H, D, N) -> (B, H, T, N), H_a = H or 1 (an input shared by the heads).

``a @ W`` broadcasts W (H, D, N) against the batch: ``torch.matmul`` expands it to (B, H, D, N) and copies it to make
one batched product (B h D N numbers written and read again), then its backward reads the copy for dA and writes
B partial weight gradients. Here each head is one batched product over the B sequences whose weight operand has
batch stride 0 (W_h read, not copied) and whose output is head h's slice of the (B, H, T, N) result (batch stride
H T N: cuBLAS writes it in place), so z keeps the layout ``a @ W`` gives; dA is formed the same way. dW_h = sum_b
a_bh^T dz_bh: the rows of dz for one head are not one matrix in (B, H, T, N) storage, so its B partial gradients
are summed as autograd sums them (one product over the B H slices, then the sum over B)."""

from __future__ import annotations

import torch


def _per_head(a: torch.Tensor, W: torch.Tensor, out: torch.Tensor) -> torch.Tensor:
    """out[:, h] = a[:, h or 0] @ W[h] for every head: one batched product a head, W[h] broadcast over the batch
    (stride 0) and written into out's (B, T, ·) slice of head h."""
    B = a.shape[0]
    for h in range(W.shape[0]):
        torch.bmm(a[:, min(h, a.shape[1] - 1)], W[h].expand(B, -1, -1), out=out[:, h])
    return out


class PerHead(torch.autograd.Function):
    """a @ W per head without the weight's B copies (module docstring)."""

    @staticmethod
    def forward(ctx, a: torch.Tensor, W: torch.Tensor) -> torch.Tensor:
        B, _, T, _ = a.shape
        H, _, N = W.shape
        ctx.save_for_backward(a, W)
        return _per_head(a, W, a.new_empty(B, H, T, N))

    @staticmethod
    def backward(ctx, g: torch.Tensor):
        a, W = ctx.saved_tensors
        B, Ha, T, D = a.shape
        H = W.shape[0]
        g = g.contiguous()
        da = dW = None
        if ctx.needs_input_grad[0]:  # dA_h = g_h W_h^T; an input shared by the heads sums them
            da = _per_head(g, W.mT, a.new_empty(B, H, T, D))
            da = da if Ha == H else da.sum(dim=1, keepdim=True)
        if ctx.needs_input_grad[1]:  # dW_h = sum_b a_bh^T g_bh: the B H slices' products, summed over B
            rows = a.expand(B, H, T, D).reshape(B * H, T, D)  # a shared input: B H T D numbers, n / D times fewer
            dW = torch.bmm(rows.mT, g.view(B * H, T, -1)).view(B, H, D, -1).sum(dim=0)
        return da, dW


def per_head(a: torch.Tensor, W: torch.Tensor) -> torch.Tensor:
    """a (B, H or 1, T, D) @ W (H, D, N) -> (B, H, T, N), ``a @ W`` in values and gradients without copying W per
    sequence (module docstring); under autocast both in its dtype, as the matmul autocast would run."""
    if torch.is_autocast_enabled(a.device.type):
        low = torch.get_autocast_dtype(a.device.type)
        a, W = a.to(low), W.to(low)
    elif a.dtype != W.dtype:
        return a @ W  # torch's own refusal of mixed dtypes, one line
    return PerHead.apply(a.contiguous(), W)
