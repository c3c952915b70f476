"""The memory-lean chunked attention (state recomputed in backward) against the plain forms."""

import itertools

import pytest
import torch

from bdh.model.kernels.pytorch import attention
from bdh.model.kernels.pytorch.chunked_lean import chunked_lean

from .helpers import rel_err


@pytest.fixture(params=["kept", "recomputed"])
def state_policy(request, monkeypatch):
    """Both ways of getting the per-chunk states in backward: kept by the forward pass, or recomputed."""
    from bdh.model.kernels.pytorch import chunked_lean as module

    monkeypatch.setattr(module, "_keep_states", lambda chunks, D, T: request.param == "kept")
    return request.param


@pytest.mark.parametrize(
    "damped, with_state, shared_v, chunk",
    list(itertools.product([False, True], [False, True], [True, False], [1, 4, 5, 16])),
)
def test_values_and_all_gradients_equal_the_recurrent_form(damped, with_state, shared_v, chunk, state_policy):
    g = torch.Generator().manual_seed(0)
    B, H, T, N, D = 2, 3, 13, 6, 5
    q = torch.randn(B, H, T, N, generator=g, dtype=torch.float64)
    k = torch.randn(B, H, T, N, generator=g, dtype=torch.float64)
    v = torch.randn(B, 1 if shared_v else H, T, D, generator=g, dtype=torch.float64)
    s0 = torch.randn(B, H, N, D, generator=g, dtype=torch.float64) if with_state else None
    log_u = torch.tensor([0.9, 0.5, 1.0], dtype=torch.float64).log() if damped else None
    w_out = torch.randn(B, H, T, D, generator=g, dtype=torch.float64)
    w_state = torch.randn(B, H, N, D, generator=g, dtype=torch.float64)

    def run(fn):
        leaves = [t.clone().requires_grad_() if t is not None else None for t in (q, k, v, s0)]
        out, state = fn(*leaves)
        ((out * w_out).sum() + (state * w_state).sum()).backward()
        return out.detach(), state.detach(), [t.grad if t is not None else None for t in leaves]

    ref = run(lambda a, b, c, d: attention.recurrent(a, b, c, log_u=log_u, state=d, need_state=True))
    got = run(lambda a, b, c, d: chunked_lean(a, b, c, chunk_size=chunk, log_u=log_u, state=d))
    assert rel_err(got[0], ref[0]) < 1e-12 and rel_err(got[1], ref[1]) < 1e-12
    for a, b in zip(got[2], ref[2]):
        if b is None:
            assert a is None
        else:
            assert rel_err(a, b) < 1e-12


def test_unused_final_state_and_float32():
    q = torch.rand(1, 2, 20, 8, requires_grad=True)
    v = torch.randn(1, 1, 20, 4, requires_grad=True)
    out, _ = chunked_lean(q, q, v, chunk_size=6)
    out.sum().backward()
    q2 = q.detach().clone().requires_grad_()
    v2 = v.detach().clone().requires_grad_()
    ref, _ = attention.parallel(q2, q2, v2)
    ref.sum().backward()
    assert rel_err(out, ref) < 1e-6 and rel_err(q.grad, q2.grad) < 1e-5 and rel_err(v.grad, v2.grad) < 1e-5


@pytest.mark.parametrize("damped", [False, True])
def test_bf16_autocast_runs_backward_and_stays_close_to_fp32(damped, state_policy):
    """Under autocast the inputs are cast to bf16 (the backward runs outside autocast) and the state is
    summed in fp32."""
    torch.manual_seed(5)
    B, H, T, N, D = 2, 2, 37, 16, 8
    q = torch.relu(torch.randn(B, H, T, N))
    v = torch.randn(B, 1, T, D)
    log_u = torch.log(torch.tensor([0.9, 0.99])) if damped else None
    w = torch.randn(B, H, T, D)
    grads = {}
    for low in (False, True):
        ql, vl = q.clone().requires_grad_(), v.clone().requires_grad_()
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=low):
            out, state = chunked_lean(ql, ql, vl, chunk_size=8, log_u=log_u)
        assert state.dtype == torch.float32
        (out.float() * w).sum().backward()
        assert ql.grad.dtype == torch.float32 and vl.grad.dtype == torch.float32
        grads[low] = (out.float(), state, ql.grad, vl.grad)
    for ref, got in zip(grads[False], grads[True]):
        # bf16 rounds each product to 8 significant bits; sums of ~T*N terms keep the error at a few 2^-8 of the scale
        assert (got - ref).abs().max() <= 0.03 * ref.abs().max()


@pytest.mark.parametrize(
    "damped, with_state, T, chunk", list(itertools.product([False, True], [False, True], [13, 16], [1, 4, 5, 16, 32]))
)
def test_shared_keys_path_equals_separate_keys_and_the_recurrent_form(damped, with_state, T, chunk, state_policy):
    """k is q (BDH): one gradient (P + P^T) x; it must equal dq + dk of the general path and of the recurrent form."""
    g = torch.Generator().manual_seed(4)
    B, H, N, D = 2, 3, 6, 5
    x = torch.randn(B, H, T, N, generator=g, dtype=torch.float64)
    v = torch.randn(B, 1, T, D, generator=g, dtype=torch.float64)
    s0 = torch.randn(B, H, N, D, generator=g, dtype=torch.float64) if with_state else None
    log_u = torch.tensor([0.9, 0.5, 1.0], dtype=torch.float64).log() if damped else None
    w_out = torch.randn(B, H, T, D, generator=g, dtype=torch.float64)
    w_state = torch.randn(B, H, N, D, generator=g, dtype=torch.float64)

    def run(fn):
        xl, vl = x.clone().requires_grad_(), v.clone().requires_grad_()
        sl = s0.clone().requires_grad_() if with_state else None
        out, state = fn(xl, vl, sl)
        ((out * w_out).sum() + (state * w_state).sum()).backward()
        return [out.detach(), state.detach(), xl.grad, vl.grad] + ([sl.grad] if with_state else [])

    shared = run(lambda a, b, c: chunked_lean(a, a, b, chunk_size=chunk, log_u=log_u, state=c))
    separate = run(lambda a, b, c: chunked_lean(a, a.clone(), b, chunk_size=chunk, log_u=log_u, state=c))
    ref = run(lambda a, b, c: attention.recurrent(a, a, b, log_u=log_u, state=c, need_state=True))
    for got, other, r in zip(shared, separate, ref):
        assert rel_err(got, r) < 1e-12 and rel_err(other, r) < 1e-12


def test_chunk_major_layout_round_trips():
    from bdh.model.kernels.pytorch.chunked_lean import _Chunks

    t = torch.randn(2, 3, 11, 4)
    for C in (1, 3, 4, 11, 20):
        chunks = _Chunks.of(t, C)
        assert torch.equal(chunks.joined(), t)
        every = [g[i] for g in chunks.groups for i in range(g.shape[0])]
        assert torch.equal(torch.cat(every, dim=2), t)
        assert all(g.is_contiguous() for g in chunks.groups) and len(chunks.groups) == 1 + (11 % C > 0 and C < 11)


def test_the_initial_state_is_not_modified():
    s0 = torch.randn(1, 2, 4, 3)
    before = s0.clone()
    x = torch.randn(1, 2, 9, 4, requires_grad=True)
    out, state = chunked_lean(x, x, torch.randn(1, 1, 9, 3), chunk_size=4, state=s0)
    (out.sum() + state.sum()).backward()
    assert torch.equal(s0, before)


def test_kept_and_recomputed_states_give_identical_bf16_results(monkeypatch):
    """The kept states are the ones the matmuls read (cast to bf16), so both ways agree bit for bit."""
    from bdh.model.kernels.pytorch import chunked_lean as module

    g = torch.Generator().manual_seed(6)
    x = torch.relu(torch.randn(2, 2, 29, 16, generator=g)).bfloat16()
    v = torch.randn(2, 1, 29, 8, generator=g).bfloat16()
    w = torch.randn(2, 2, 29, 8, generator=g)
    res = {}
    for keep in (True, False):
        monkeypatch.setattr(module, "_keep_states", lambda chunks, D, T, keep=keep: keep)
        xl, vl = x.clone().requires_grad_(), v.clone().requires_grad_()
        out, state = chunked_lean(xl, xl, vl, chunk_size=8, log_u=torch.log(torch.tensor([0.9, 0.99])))
        ((out.float() * w).sum() + state.sum()).backward()
        res[keep] = (out, state, xl.grad, vl.grad)
    for a, b in zip(res[True], res[False]):
        assert torch.equal(a, b)


def test_states_are_kept_only_when_they_are_no_larger_than_q():
    from bdh.model.kernels.pytorch.chunked_lean import _keep_states

    assert _keep_states(16, 128, 2048) and not _keep_states(16, 256, 2048)
