"""One generation step that skips silent neurons (inference only).

In a trained BDH few neurons fire: x is sparse and y, gated by x, sparser still (paper section 6.4:
a few percent of y). A recurrent step per layer reads Dx (dense: every x must be computed), then the
state rows, Dy columns and E rows of the neurons that fire. Only those matter:

* a = q^T S reads the state rows where the rotated x is non-zero (both members of a RoPE pair);
* the write S += k v^T touches the same rows only;
* y = ReLU(Dy LN(a)) * x needs the Dy columns of the neurons with x > 0;
* E y needs the E rows of the neurons with y > 0.

With a fraction f of active neurons, the state traffic (the largest cost of a step, n D per layer)
drops by about 1/f. This is the same computation as the dense recurrent step (tested to float
tolerance); `BDH.stream` uses it when the batch is one sequence, the model has no damping and x is
sparse enough (``density_threshold``), and falls back to the dense step otherwise.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from bdh.errors import UserError

from .rope import rope_apply, rope_tables
from .state import BDHState


@torch.no_grad()
def sparse_token_step(model, token: torch.Tensor, state: BDHState, density_threshold: float = 0.3) -> torch.Tensor:
    """Advance ``state`` (batch of one, updated in place) by one token; return the logits (1, V).

    Layers whose x is denser than ``density_threshold`` run the dense update for that layer.
    """
    cfg = model.config
    if state.rho.shape[1] != 1 or model.log_u is not None:
        raise UserError("sparse_token_step: needs a batch of one sequence and a model without damping")
    H, n = cfg.n_head, cfg.n
    kind = cfg.positional
    if kind != "none":
        cos, sin = rope_tables(kind, model.freqs, state.pos, 1)
    v = model._ln(model.embed(token.view(1, 1))).view(-1)  # D
    for layer in range(cfg.n_layer):
        x = F.relu(torch.einsum("d,hdn->hn", v, model.Dx))  # H, N
        xr = rope_apply(kind, x.unsqueeze(1), cos, sin).squeeze(1) if kind != "none" else x
        S = state.rho[layer, 0]  # H, N, D (a view: updated in place)
        density = float((xr != 0).sum()) / n
        y = torch.zeros_like(x)
        if density > density_threshold:
            a = torch.bmm(xr.unsqueeze(1), S).squeeze(1)  # H, D
            S.add_(torch.bmm(xr.unsqueeze(-1), v.view(1, 1, -1).expand(H, 1, -1)))
            y = F.relu(torch.bmm(model._ln(a).unsqueeze(1), model.Dy).squeeze(1)) * x
        else:
            for h in range(H):
                rows = torch.nonzero(xr[h], as_tuple=True)[0]
                if rows.numel() == 0:
                    continue  # an empty read: a = 0, LN(0) = 0, y = 0 for this head
                q = xr[h, rows]
                a = q @ S[h, rows]  # D
                S[h, rows] += q.unsqueeze(-1) * v.view(1, -1)
                cols = torch.nonzero(x[h], as_tuple=True)[0]
                if cols.numel():
                    y[h, cols] = F.relu(model._ln(a) @ model.Dy[h][:, cols]) * x[h, cols]
        y_flat = y.reshape(n)
        active = torch.nonzero(y_flat, as_tuple=True)[0]
        ey = y_flat[active] @ model.E[active]  # D
        v = model._ln(v + model._ln(ey))
    state.pos += 1
    return (v @ model.readout).view(1, -1)
