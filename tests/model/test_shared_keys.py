"""The parallel form with keys = queries (kernels/pytorch/shared_keys.py) against autograd through the plain form."""

import itertools

import pytest
import torch

from bdh import BDH, BDHConfig
from bdh.model.kernels.naive import naive_linear_attention
from bdh.model.kernels.pytorch import attention
from bdh.model.kernels.pytorch.attention import causal_weights
from bdh.model.kernels.pytorch.shared_keys import shared_key_attention

from .helpers import rel_err


@pytest.mark.parametrize(
    "causal, damped, shared_v", list(itertools.product([True, False], [False, True], [True, False]))
)
def test_values_and_gradients_equal_separate_keys_and_the_naive_sum(causal, damped, shared_v):
    g = torch.Generator().manual_seed(0)
    B, H, T, N, D = 2, 3, 11, 6, 5
    x = torch.randn(B, H, T, N, generator=g, dtype=torch.float64)
    v = torch.randn(B, 1 if shared_v else H, T, D, generator=g, dtype=torch.float64)
    log_u = torch.tensor([0.9, 0.5, 1.0], dtype=torch.float64).log() if damped else None
    w = torch.randn(B, H, T, D, generator=g, dtype=torch.float64)

    def run(separate: bool):
        xl, vl = x.clone().requires_grad_(), v.clone().requires_grad_()
        if separate:
            out, _ = attention.parallel(xl, xl.clone(), vl, log_u=log_u, causal=causal)
        else:
            out = shared_key_attention(xl, vl, causal_weights(log_u, T, causal, xl.device, xl.dtype))
        (out * w).sum().backward()
        return out.detach(), xl.grad, vl.grad

    fast, plain = run(False), run(True)
    naive = naive_linear_attention(x, x, v, None if log_u is None else log_u.exp(), causal=causal)
    assert rel_err(fast[0], naive) < 1e-12
    for a, b in zip(fast, plain):
        assert rel_err(a, b) < 1e-12


def test_shared_path_is_taken_only_for_training_without_state(monkeypatch):
    """`bdh.model.kernels.choose` picks the shared-key kernel for a plain training forward, nothing else."""
    from bdh.model.kernels.pytorch import shared_keys

    calls = []
    original = shared_keys.SharedKeyAttention.apply
    monkeypatch.setattr(shared_keys.SharedKeyAttention, "apply", lambda *a: calls.append(1) or original(*a))
    model = BDH(BDHConfig(n_layer=2, n_embd=16, n_head=2, n_neurons=64, vocab_size=32, dropout=0.0))
    idx = torch.randint(0, 32, (1, 6))
    model(idx)
    assert len(calls) == 2  # one per layer
    model(idx, detach_kv=True)  # keys cut from the graph (training without BPTT): the plain form
    model(idx, mode="chunked")
    model.step(idx, model.init_state(1), mode="parallel")  # a carried state
    with torch.no_grad():
        model(idx)
    assert len(calls) == 2


def test_bf16_autocast_stays_close_to_fp32():
    torch.manual_seed(1)
    x = torch.relu(torch.randn(2, 2, 33, 16))
    v = torch.randn(2, 1, 33, 8)
    w = torch.randn(2, 2, 33, 8)
    res = {}
    for low in (False, True):
        xl, vl = x.clone().requires_grad_(), v.clone().requires_grad_()
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=low):
            out = shared_key_attention(xl, vl, causal_weights(None, 33, True, xl.device, xl.dtype))
        (out.float() * w).sum().backward()
        assert xl.grad.dtype == torch.float32 and vl.grad.dtype == torch.float32
        res[low] = (out.float(), xl.grad, vl.grad)
    for ref, got in zip(res[False], res[True]):
        assert (got - ref).abs().max() <= 0.03 * ref.abs().max()
