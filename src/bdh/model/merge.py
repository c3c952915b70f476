"""Merging models by concatenating neurons (paper section 7.1, appendix B.4): E, Dx, Dy and the RoPE frequencies are
concatenated head by head, the embedding and readout averaged. `average` is the control: plain weight averaging."""

from __future__ import annotations

import torch

from bdh.errors import UserError

from .bdh import BDH
from .config import ABLATIONS, BDHConfig

#: configuration fields that two models must share to be merged
SHARED_FIELDS = (
    "n_layer",
    "n_embd",
    "n_head",
    "vocab_size",
    "causal",
    "positional",
    "rope_theta",
    "damping",
    "learn_damping",
    "decay_gate",
    "state_write",
    "write_gate",
    "ln_eps",
) + ABLATIONS


def _check_compatible(a: BDH, b: BDH, *, same_size: bool) -> None:
    for model, name in ((a, "first"), (b, "second")):
        if not isinstance(model, BDH):
            raise UserError(f"merge: the {name} model is a {type(model).__name__}, not a BDH model")
    ca, cb = a.config, b.config
    for f in SHARED_FIELDS:
        va, vb = getattr(ca, f), getattr(cb, f)
        if va != vb:
            raise UserError(
                f"merge: the models differ in {f} ({va!r} vs {vb!r}); they must share {', '.join(SHARED_FIELDS)}"
            )
    if same_size and ca.n != cb.n:
        raise UserError(f"merge: averaging needs models of the same size, got n = {ca.n} and n = {cb.n}")
    if not same_size:
        ca.require_paper_layer("merge: concatenating neurons")
    if not same_size and ca.positional == "rope-standard":
        raise UserError(
            "merge: rope-standard pairs neuron i with i + N/2, which concatenation would break; "
            "merge models with positional 'rope' (official, neighbouring pairs) or 'none'"
        )


@torch.no_grad()
def concatenate(a: BDH, b: BDH) -> BDH:
    """The model with the neurons of ``a`` and ``b`` side by side in every head, embeddings averaged."""
    _check_compatible(a, b, same_size=False)
    ca, cb = a.config, b.config
    H, D = ca.n_head, ca.n_embd
    config = ca.replace(n_neurons=ca.n + cb.n)
    merged = BDH(config).to(device=a.E.device, dtype=a.E.dtype)
    merged.E.copy_(torch.cat([a.E.view(H, ca.N, D), b.E.view(H, cb.N, D).to(a.E)], dim=1).view(H * (ca.N + cb.N), D))
    merged.Dx.copy_(torch.cat([a.Dx, b.Dx.to(a.Dx)], dim=2))
    merged.Dy.copy_(torch.cat([a.Dy, b.Dy.to(a.Dy)], dim=2))
    merged.freqs.copy_(torch.cat([a.freqs, b.freqs.to(a.freqs)]))
    merged.embed.weight.copy_((a.embed.weight + b.embed.weight.to(a.embed.weight)) / 2)
    merged.readout.copy_((a.readout + b.readout.to(a.readout)) / 2)
    return merged.train(a.training)


@torch.no_grad()
def average(a: BDH, b: BDH, weight: float = 0.5) -> BDH:
    """Plain weight averaging (1 - weight) a + weight b of two models of the same size (the control)."""
    _check_compatible(a, b, same_size=True)
    if not 0.0 <= weight <= 1.0:
        raise UserError(f"average: weight must lie in [0, 1], got {weight}")
    out = BDH(BDHConfig.from_dict(a.config.to_dict())).to(device=a.E.device, dtype=a.E.dtype)
    sb = b.state_dict()
    for name, tensor in a.state_dict().items():
        if name == "freqs":
            out.freqs.copy_(tensor)
            continue
        out.state_dict()[name].copy_((1 - weight) * tensor + weight * sb[name].to(tensor))
    return out.train(a.training)
