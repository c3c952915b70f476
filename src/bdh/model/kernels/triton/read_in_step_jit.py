"""The Triton kernel of `bdh.model.kernels.triton.read_in_step` (imported only when it runs: Triton is optional)."""

from __future__ import annotations

import triton
import triton.language as tl


@triton.jit
def read_in_step_kernel(
    z_ptr, x_ptr, e_ptr, part_ptr, K, D, ROWS, SPLIT,
    BK: tl.constexpr, BD: tl.constexpr, ACC: tl.constexpr,
):  # fmt: skip
    """For one token of sequence b: the share of rows ROWS of E y over this program's rows of E (H N, D) and BD of
    its columns, y = ReLU(z) * x formed here and rounded to z's dtype (as the gate writes it), E's entries rounded to
    z's dtype (as autocast's matmul casts E), the products summed in ACC into ``part`` (B, SPLIT, D), which the
    caller sums. z and x are (B, H N) contiguous."""
    split, col, b = tl.program_id(0), tl.program_id(1), tl.program_id(2)
    d = col * BD + tl.arange(0, BD)
    live_d = d < D
    acc = tl.zeros([BD], dtype=ACC)
    for start in range(split * ROWS, split * ROWS + ROWS, BK):
        k = start + tl.arange(0, BK)
        live_k = k < K
        z = tl.load(z_ptr + b * K + k, mask=live_k, other=0.0).to(ACC)
        x = tl.load(x_ptr + b * K + k, mask=live_k, other=0.0).to(ACC)
        y = (tl.maximum(z, 0.0) * x).to(z_ptr.dtype.element_ty).to(ACC)  # one product, rounded once
        where = k[:, None].to(tl.int64) * D + d[None, :]
        e = tl.load(e_ptr + where, mask=live_k[:, None] & live_d[None, :], other=0.0)
        acc += tl.sum(y[:, None] * e.to(z_ptr.dtype.element_ty).to(ACC), axis=0)
    tl.store(part_ptr + (b * SPLIT + split) * D + d, acc, mask=live_d)
