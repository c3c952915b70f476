"""The gate's Triton kernels (`bdh.model.kernels.triton.gate`: y = ReLU(z) * x with dropout drawn inside) against the
PyTorch form (`bdh.model.kernels.pytorch.fused.relu_mul`, autograd) in values and gradients, run by Triton's CPU
interpreter; the mask is a function of the seed and nothing else, and no mask tensor is kept for the backward."""

import pytest
import torch

from bdh.model.kernels.pytorch.fused import relu_mul

from .helpers import interpreted, rel_err

pytestmark = pytest.mark.extra  # the gpu extra
triton = pytest.importorskip("triton", reason="Triton (the gpu extra) is not installed")


@pytest.fixture(scope="module")
def gate_triton():
    return interpreted("bdh.model.kernels.triton.gate", "gate_triton")


def _inputs(shape=(2, 3, 7, 50), dtype=torch.float64, seed=0):
    """z of either sign (some exactly 0: ReLU's kink), x of either sign, a weight for the loss; 2,100 entries (three
    programs, the last one partly masked)."""
    g = torch.Generator().manual_seed(seed)
    z = torch.randn(*shape, generator=g, dtype=torch.float64)
    z[..., ::11] = 0.0
    x = torch.randn(*shape, generator=g, dtype=torch.float64)
    w = torch.randn(*shape, generator=g, dtype=torch.float64)
    return z.to(dtype), x.to(dtype), w.to(dtype)


def _grads(fn, z, x, w):
    z, x = z.clone().requires_grad_(), x.clone().requires_grad_()
    y = fn(z, x)
    (y * w).sum().backward()
    return y.detach(), z.grad, x.grad


def _kept(gate_triton, shape, p, seed):
    """The entries the kernel keeps at (p, seed): ReLU(1) * 1 is 1 where kept, 0 where dropped."""
    ones = torch.ones(shape, dtype=torch.float32)
    return gate_triton(ones, ones, p=p, seed=seed) != 0


@pytest.mark.parametrize("dtype, tol", [(torch.float64, 1e-15), (torch.float32, 1e-6), (torch.bfloat16, 1e-2)])
@pytest.mark.parametrize("p", [0.0, 0.25])
def test_values_and_gradients_equal_the_pytorch_form(gate_triton, dtype, tol, p):
    """Against ReLU(z) * x with the kernel's mask zeroed, through autograd. Both compute each entry from the same
    two or three numbers and round once (torch's element-wise bf16 ops compute in fp32 too), so they differ by at
    most an ulp of the result: bounds 1e-15 (fp64), 1e-6 (fp32), 1e-2 (bf16: 2^-8 = 3.9e-3 an ulp) of the largest."""
    z, x, w = _inputs(dtype=dtype)
    keep = _kept(gate_triton, z.shape, p, seed=7)
    got = _grads(lambda z, x: gate_triton(z, x, p=p, seed=7), z, x, w)
    want = _grads(lambda z, x: relu_mul(z, x) * keep, z, x, w)
    for a, b in zip(got, want):
        assert a.dtype == dtype and rel_err(a.double(), b.double()) < tol
    assert (got[0][~keep] == 0).all() and (got[1][~keep] == 0).all() and (got[2][~keep] == 0).all()


def test_the_mask_is_drawn_at_rate_p_from_the_seed_alone(gate_triton):
    """The same seed keeps the same entries (whatever z and x), another seed others; the fraction dropped is p
    within 5 standard deviations (sqrt(p (1 - p) / n) = 0.0072 at n = 4,096: bound 0.036)."""
    shape, p = (4, 1024), 0.3
    a, b, c = (_kept(gate_triton, shape, p, seed) for seed in (11, 11, 12))
    assert torch.equal(a, b) and not torch.equal(a, c)
    assert abs((~a).float().mean().item() - p) < 0.036 and abs((~c).float().mean().item() - p) < 0.036
    z, x, _ = _inputs(shape=shape, dtype=torch.float32)
    y = gate_triton(z.abs() + 1, x.abs() + 1, p=p, seed=11)  # all entries positive: zero only where dropped
    assert torch.equal(y != 0, a)
    torch.manual_seed(5)
    first = gate_triton(z.abs() + 1, x, p=p)
    torch.manual_seed(5)
    assert torch.equal(gate_triton(z.abs() + 1, x, p=p), first)  # seed=None: drawn from torch's generator


def test_the_backward_keeps_z_and_x_only(gate_triton):
    """No mask and no ReLU(z) is saved for the backward pass: the tensors autograd keeps are z and x."""
    z, x, _ = _inputs(dtype=torch.float32)
    z, x = z.requires_grad_(), x.requires_grad_()
    saved = []
    with torch.autograd.graph.saved_tensors_hooks(lambda t: saved.append(t) or t, lambda t: t):
        gate_triton(z, x, p=0.5, seed=3)
    assert len(saved) == 2 and all(s.dtype == torch.float32 and s.shape == z.shape for s in saved)
    assert saved[0].data_ptr() == z.data_ptr() and saved[1].data_ptr() == x.data_ptr()


def test_bad_input_is_refused_with_one_line(gate_triton, monkeypatch):
    z, x, _ = _inputs(dtype=torch.float32)
    with pytest.raises(ValueError, match="must share a shape and a dtype"):
        gate_triton(z, x[..., :3])
    with pytest.raises(ValueError, match="must share a shape and a dtype"):
        gate_triton(z, x.double())
    with pytest.raises(ValueError, match="floating-point"):
        gate_triton(z.long(), x.long())
    with pytest.raises(ValueError, match=r"p must be in \[0, 1\)"):
        gate_triton(z, x, p=1.0)
    with pytest.raises(ValueError, match="seed must be an int"):
        gate_triton(z, x, p=0.1, seed=-1)
    monkeypatch.setenv("TRITON_INTERPRET", "0")
    with pytest.raises(ValueError, match="need z and x on one CUDA device"):
        gate_triton(z, x)


def test_the_model_with_the_triton_gate_computes_the_fused_gate(gate_triton, monkeypatch):
    """The choice table takes the Triton gate (forced on the CPU here, the compiled loops off): without dropout the
    logits and every parameter's gradient equal the fused gate's (fp64, the same products rounded once: 1e-12).
    With dropout drawn in the gate (the CPU's ``in-gate`` masks, here by the kernel), the pass is reproducible from
    torch's seed and differs between seeds."""
    from bdh.model.kernels import Pass, choice

    from .helpers import tiny_model

    monkeypatch.setenv("BDH_NATIVE", "0")
    idx = torch.randint(0, 256, (2, 9), generator=torch.Generator().manual_seed(0))
    results = {}
    for name, on in (("fused", False), ("triton", True)):
        monkeypatch.setattr(choice, "use_triton", lambda device, on=on: on)
        model = tiny_model(seed=1).double().train()
        assert model.kernels(Pass("parallel", 0, 9)).choice.gate == name
        logits = model(idx)
        logits.pow(2).mean().backward()
        results[name] = [logits.detach()] + [p.grad for p in model.parameters()]
    for a, b in zip(results["triton"], results["fused"]):
        assert rel_err(a, b) < 1e-12
    model = tiny_model(seed=1, dropout=0.3).double().train()
    c = model.kernels(Pass("parallel", 0, 9)).choice
    assert (c.gate, c.masks) == ("triton", "in-gate")
    runs = []
    for seed in (4, 4, 5):
        torch.manual_seed(seed)
        runs.append(model(idx).detach())
    assert torch.equal(runs[0], runs[1]) and not torch.equal(runs[0], runs[2])
