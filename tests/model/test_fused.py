"""The fused element-wise functions (kernels/pytorch/fused.py) against the plain expressions: values and gradients."""

import pytest
import torch
import torch.nn.functional as F

from bdh import BDH, BDHConfig
from bdh.model.interop import NAME_MAP, to_official
from bdh.model.kernels.naive import naive_official_forward
from bdh.model.kernels.pytorch.dropout import DropMask, drop_mask
from bdh.model.kernels.pytorch.fused import relu_mul, rope_rotate
from bdh.model.kernels.pytorch.rope import official_frequencies, rope_plain, rope_tables, standard_frequencies

from .helpers import values_and_grads


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_relu_mul_is_bit_identical_to_autograd(dtype):
    torch.manual_seed(0)
    z = torch.randn(2, 3, 7, 16, dtype=dtype)
    z[0, 0, 0, :4] = 0.0  # the kink: ReLU'(0) = 0 in both
    x = torch.relu(torch.randn(2, 3, 7, 16, dtype=dtype))
    w = torch.randn(2, 3, 7, 16)
    fast, (dz, dx) = values_and_grads(relu_mul, z, x, weight=w)
    ref, (rz, rx) = values_and_grads(lambda a, b: torch.relu(a) * b, z, x, weight=w)
    assert torch.equal(fast, ref) and torch.equal(dz, rz) and torch.equal(dx, rx)


def test_relu_mul_in_bf16_and_with_one_input_frozen():
    torch.manual_seed(1)
    z = torch.randn(4, 32, dtype=torch.bfloat16)
    x = torch.randn(4, 32, dtype=torch.bfloat16)
    w = torch.randn(4, 32)
    fast, (dz, dx) = values_and_grads(relu_mul, z, x, weight=w)
    ref, (rz, rx) = values_and_grads(lambda a, b: torch.relu(a) * b, z, x, weight=w)
    assert torch.equal(fast, ref) and torch.equal(dz, rz) and torch.equal(dx, rx)
    zl = z.clone().requires_grad_()
    (relu_mul(zl, x) * w).sum().backward()  # x needs no gradient
    assert torch.equal(zl.grad, rz)


@pytest.mark.parametrize("kind", ["rope", "rope-standard"])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_rope_rotate_equals_the_plain_rotation(kind, dtype):
    N, T = 32, 9
    freqs = official_frequencies(N, 2.0**16) if kind == "rope" else standard_frequencies(N, 10000.0)
    cos, sin = rope_tables(kind, freqs, 3, T)
    torch.manual_seed(2)
    v = torch.randn(2, 2, T, N, dtype=dtype)
    w = torch.randn(2, 2, T, N)
    fast, (dv,) = values_and_grads(lambda t: rope_rotate(t, cos, sin, kind == "rope"), v, weight=w)
    ref, (rv,) = values_and_grads(lambda t: rope_plain(kind, t, cos.to(dtype), sin.to(dtype)), v, weight=w)
    tol = 1e-6 if dtype == torch.float32 else 1e-13
    assert torch.allclose(fast, ref, atol=tol, rtol=0) and torch.allclose(dv, rv, atol=tol, rtol=0)


def test_rope_rotate_in_bf16_stays_within_bf16_rounding():
    N, T = 64, 16
    cos, sin = rope_tables("rope", official_frequencies(N, 2.0**16), 0, T)
    torch.manual_seed(3)
    v = torch.randn(2, 2, T, N)
    w = torch.randn(2, 2, T, N)
    fast, (dv,) = values_and_grads(lambda t: rope_rotate(t, cos, sin, True), v.bfloat16(), weight=w)
    ref, (rv,) = values_and_grads(lambda t: rope_plain("rope", t, cos, sin), v, weight=w)  # fp32 reference
    assert fast.dtype == torch.bfloat16 and dv.dtype == torch.bfloat16
    # bf16 keeps 8 significant bits: relative error 2^-8 per rounding, a few roundings per value
    assert (fast.float() - ref).abs().max() <= 4 * 2**-8 * ref.abs().max()
    assert (dv.float() - rv).abs().max() <= 4 * 2**-8 * rv.abs().max()


def test_model_with_fused_ops_still_matches_the_official_math():
    """End to end: logits equal the transcription of the official forward, and gradients match the plain path."""
    torch.manual_seed(4)
    cfg = BDHConfig(n_layer=2, n_embd=16, n_head=2, n_neurons=64, dropout=0.0)
    model = BDH(cfg)
    idx = torch.randint(0, 256, (2, 11))
    sd = to_official(model)
    assert torch.allclose(model(idx), naive_official_forward(sd, idx, cfg.n_layer, cfg.n_head), atol=1e-5)
    # the gradient of every parameter against autograd through the official-math transcription
    target = torch.randint(0, 256, (2, 11))
    F.cross_entropy(model(idx).view(-1, 256), target.view(-1)).backward()
    ref_sd = {k: v.detach().clone().requires_grad_() for k, v in sd.items()}
    F.cross_entropy(
        naive_official_forward(ref_sd, idx, cfg.n_layer, cfg.n_head).view(-1, 256), target.view(-1)
    ).backward()
    for name, p in model.named_parameters():
        ref = ref_sd[NAME_MAP[name]].grad
        assert torch.allclose(p.grad, ref.view(p.shape), atol=1e-6, rtol=1e-4), name


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_relu_mul_with_a_drop_mask_equals_the_plain_masked_product(dtype):
    torch.manual_seed(5)
    z = torch.randn(2, 3, 7, 16, dtype=dtype)
    x = torch.relu(torch.randn(2, 3, 7, 16, dtype=dtype))
    drop = torch.rand(2, 3, 7, 16) < 0.3
    w = torch.randn(2, 3, 7, 16)
    fast, (dz, dx) = values_and_grads(lambda a, b: relu_mul(a, b, DropMask(drop)), z, x, weight=w)
    ref, (rz, rx) = values_and_grads(lambda a, b: (torch.relu(a) * b).masked_fill(drop, 0), z, x, weight=w)
    assert torch.equal(fast, ref) and torch.equal(dz, rz) and torch.equal(dx, rx)
    assert (dz[drop] == 0).all() and (dx[drop] == 0).all() and (fast[drop] == 0).all()


def test_rope_apply_in_bf16_rotates_in_fp32_and_rounds_once():
    """bf16 'rope' goes through the complex fp32 multiply: within one bf16 rounding of the fp32 rotation."""
    from bdh.model.kernels import apply_rope as rope_apply

    N, T = 64, 16
    cos, sin = rope_tables("rope", official_frequencies(N, 2.0**16), 5, T)
    torch.manual_seed(6)
    v = torch.randn(2, 2, T, N)
    w = torch.randn(2, 2, T, N)
    fast, (dv,) = values_and_grads(lambda t: rope_apply("rope", t, cos, sin), v.bfloat16(), weight=w)
    ref, (rv,) = values_and_grads(lambda t: rope_plain("rope", t, cos, sin), v.bfloat16().float(), weight=w)
    assert fast.dtype == torch.bfloat16 and dv.dtype == torch.bfloat16
    assert ((fast.float() - ref).abs() <= 2**-8 * ref.abs() + 1e-30).all()
    # the incoming gradient is rounded to bf16 too: two roundings, of the pair's size
    assert (dv.float() - rv).abs().max() <= 2 * 2**-8 * rv.abs().max()


def test_relu_mul_with_bf16_draws_equals_the_plain_masked_product():
    torch.manual_seed(7)
    z = torch.randn(2, 3, 7, 16, dtype=torch.bfloat16)
    x = torch.relu(torch.randn(2, 3, 7, 16, dtype=torch.bfloat16))
    mask = drop_mask(z.shape, 0.3, dtype=z.dtype)
    assert mask.threshold is not None
    w = torch.randn(2, 3, 7, 16)
    fast, (dz, dx) = values_and_grads(lambda a, b: relu_mul(a, b, mask), z, x, weight=w)
    ref, (rz, rx) = values_and_grads(lambda a, b: (torch.relu(a) * b).masked_fill(mask.dropped(), 0), z, x, weight=w)
    assert torch.equal(fast, ref) and torch.equal(dz, rz) and torch.equal(dx, rx)
