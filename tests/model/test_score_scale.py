"""The scale of the attention scores does not change what BDH computes or learns.

BDH's scores <R x_t, R x_tau> are unscaled (no 1/sqrt(N) as in softmax attention) and reach hundreds at
initialisation. That is harmless in fp32 and bf16: the attention output a_l enters the layer only through
LN(a_l) (Eq. 8: y_l = ReLU(Dy LN(a_l)) * x_l), and LN is invariant to a positive scale of its input, so
scaling every score by c > 0 leaves the logits and every gradient unchanged up to LN's epsilon. The
investigation in docs/bench.md ("Why BDH learned MQAR slowly") relies on this.
"""

from __future__ import annotations

import dataclasses

import pytest
import torch

from .helpers import rel_err, tiny_model


class ScaledScores(torch.nn.Module):
    """Wraps a BDH so that every attention score is multiplied by ``c`` (queries = keys scaled by sqrt(c))."""

    def __init__(self, model, c: float):
        super().__init__()
        self.model, self.root = model, c**0.5
        original, root = model.kernels, self.root

        def kernels(p):
            k = original(p)

            def encode(v, W):
                x, xr = k.encode(v, W)
                return x, xr * root

            return dataclasses.replace(k, encode=encode)

        model.kernels = kernels

    def forward(self, idx):
        return self.model(idx)


def _logits_and_grads(model, idx):
    model.zero_grad()
    out = model(idx)
    logits = out[0] if isinstance(out, tuple) else out
    torch.nn.functional.cross_entropy(logits.reshape(-1, logits.shape[-1]), idx.roll(-1, 1).reshape(-1)).backward()
    return logits.detach(), {n: p.grad.clone() for n, p in model.named_parameters()}


#: the bench's MQAR model at width 32 (n = 16 D): at initialisation the variance of a_l is about 2
BENCH_SIZE = dict(n_embd=32, n_head=4, n_neurons=512, vocab_size=64)


@pytest.mark.parametrize("c", [0.25, 16.0])
@pytest.mark.parametrize("positional", ["rope", "none"])
def test_scaling_the_scores_changes_nothing(c, positional):
    idx = torch.randint(0, 64, (2, 32), generator=torch.Generator().manual_seed(1))
    ref_logits, ref_grads = _logits_and_grads(tiny_model(0, positional=positional, **BENCH_SIZE), idx)
    scaled = ScaledScores(tiny_model(0, positional=positional, **BENCH_SIZE), c)
    logits, grads = _logits_and_grads(scaled, idx)
    # The only difference is LN's epsilon (1e-5) against the variance of a_l (about 2 on average, 2/16 at
    # c = 1/4, less on the first tokens, which read few scores): a relative change of the LN scale of
    # order 1e-4, seen as up to 1e-3 on the logits and a few 1e-3 on the gradients. 1e-2 leaves room for
    # float rounding, while a real dependence on the scale (LN in the wrong place) would show at order 1.
    assert rel_err(logits, ref_logits) < 1e-3
    for name, g in ref_grads.items():
        assert rel_err(grads["model." + name], g) < 1e-2, name


def test_only_epsilon_breaks_the_invariance():
    """Scaled far down, the variance of a_l meets LN's epsilon and the output starts to change: the
    1/sqrt(N) scaling of softmax attention moves the scores in that direction, not away from it."""
    idx = torch.randint(0, 64, (2, 32), generator=torch.Generator().manual_seed(1))
    ref = tiny_model(0, **BENCH_SIZE)(idx)
    tiny = ScaledScores(tiny_model(0, **BENCH_SIZE), 1e-6)(idx)
    assert rel_err(tiny, ref) > 1e-2


def test_the_wrapper_really_scales_the_scores():
    """Guard against a vacuous test: the wrapped model's attention outputs are c times the original ones."""
    from bdh.model.capture import BDHCapture

    idx = torch.randint(0, 256, (1, 12), generator=torch.Generator().manual_seed(2))
    ref, scaled = tiny_model(0), ScaledScores(tiny_model(0), 8.0)
    cap_ref, cap_scaled = BDHCapture(), BDHCapture()
    with torch.no_grad():
        ref(idx, hook=cap_ref)
        scaled.model(idx, hook=cap_scaled)
    # layer 0 sees the same input in both models, so its outputs differ by exactly the factor
    assert rel_err(cap_scaled.a[0], 8.0 * cap_ref.a[0]) < 1e-5
    assert rel_err(cap_scaled.attention[0], 8.0 * cap_ref.attention[0]) < 1e-5
