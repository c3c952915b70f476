"""`bdh.model.kernels.pytorch.per_head` (a @ W per head, one product a head, the weight not copied per sequence)
against the broadcast ``a @ W`` through autograd in values and gradients, and the pass that takes it: CUDA's training
pass only (`choose`'s ``triton`` encode), never a CPU pass."""

import pytest
import torch

from bdh.model.kernels.pytorch.per_head import per_head

from .helpers import rel_err, tiny_model


def _grads(fn, a, W, w, wants=(True, True)):
    a, W = a.clone().requires_grad_(wants[0]), W.clone().requires_grad_(wants[1])
    z = fn(a, W)
    (z.double() * w).sum().backward()
    return z.detach(), a.grad, W.grad


def _inputs(Ha, dtype=torch.float64, B=3, H=2, T=5, D=6, N=7):
    g = torch.Generator().manual_seed(Ha)
    a = torch.randn(B, Ha, T, D, generator=g, dtype=torch.float64).to(dtype)
    W = torch.randn(H, D, N, generator=g, dtype=torch.float64).to(dtype)
    return a, W, torch.randn(B, H, T, N, generator=g, dtype=torch.float64)


@pytest.mark.parametrize("Ha", [2, 1])  # z = Dy LN(a) per head; Dx v shared by the heads
@pytest.mark.parametrize("dtype, tol", [(torch.float64, 1e-12), (torch.float32, 1e-5)])
def test_values_and_gradients_equal_the_broadcast_product(Ha, dtype, tol):
    """The same D-, T- and B-term sums per entry as the broadcast product, perhaps in another order: fp64 and fp32
    differ by rounding (~1e-15, ~1e-6 of the largest)."""
    a, W, w = _inputs(Ha, dtype)
    got, want = _grads(per_head, a, W, w), _grads(torch.matmul, a, W, w)
    for x, y in zip(got, want):
        assert x.dtype == y.dtype == dtype and x.shape == y.shape and rel_err(x, y) < tol
    assert got[0].is_contiguous()  # the layout ``a @ W`` gives, which the Triton read-in reads


@pytest.mark.parametrize("wants", [(True, False), (False, True)])
def test_only_the_wanted_gradient_is_formed(wants):
    a, W, w = _inputs(2)
    got, want = _grads(per_head, a, W, w, wants), _grads(torch.matmul, a, W, w, wants)
    for x, y in zip(got[1:], want[1:]):
        assert (x is None) == (y is None) and (x is None or rel_err(x, y) < 1e-12)


def test_autocast_casts_both_as_the_matmul_would():
    """bf16 under autocast: z rounded once from an fp32 sum in both (an ulp, 2^-8, where the orders differ), the
    gradients' B partial sums rounded as autograd's: 1e-2 of the largest; fp32 leaves get fp32 gradients."""
    a, W, w = _inputs(2, torch.float32)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        got, want = _grads(per_head, a, W, w), _grads(torch.matmul, a, W, w)
    assert got[0].dtype == torch.bfloat16 and got[1].dtype == got[2].dtype == torch.float32
    for x, y in zip(got, want):
        assert rel_err(x.double(), y.double()) < 1e-2


# CUDA's choice runs the Triton kernels (in the interpreter here): that case is the gpu extra's; the CPU's is not
_TRITON = pytest.param(True, marks=pytest.mark.extra, id="True")


@pytest.mark.parametrize("cuda", [_TRITON, False])
def test_only_cuda_s_training_pass_takes_it(monkeypatch, cuda):
    """CUDA's choice forced on the CPU (the compiled loops off): every z = Dy LN(a) of a training pass is one
    `per_head` call; the CPU's choice (loops on or off) never calls it, so the CPU paths are unchanged."""
    from bdh.model.kernels import choice, dispatch

    if cuda:
        pytest.importorskip("triton", reason="Triton (the gpu extra) is not installed")
    monkeypatch.setattr(choice, "use_triton", lambda device: cuda)
    calls = []
    monkeypatch.setattr(dispatch, "per_head", lambda a, W: calls.append(a.shape) or per_head(a, W))
    idx = torch.randint(0, 256, (2, 11), generator=torch.Generator().manual_seed(0))
    for native in ("0", "1"):
        monkeypatch.setenv("BDH_NATIVE", native)
        model = tiny_model(seed=1).double().train()
        model(idx, mode="chunked").pow(2).mean().backward()
        assert len(calls) == (model.config.n_layer if cuda else 0)
        calls.clear()
