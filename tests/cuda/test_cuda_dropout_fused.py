"""The training step's dropout on the GPU, drawn inside the compiled Triton kernels (issue 58, point 2): the gated
read-in (`bdh.model.kernels.triton.read_in`, what a paper-size training step takes) and the gate
(`bdh.model.kernels.triton.gate`) draw the mask by Philox from (seed, entry) and never write it. Compiled for the
device: the same entries as the PyTorch form with the kernel's mask (values and gradients: the backward draws the same
mask again), the rate, the seed alone deciding the mask, and the model's training pass against ``BDH_TRITON=0``'s with
``F.dropout``'s masks replaced by the kernel's. fp32 with TF32 off (tests/cuda/conftest.py) and bf16."""

from __future__ import annotations

import pytest
import torch
from model.helpers import rel_err, tiny_model

from bdh.model.kernels import Pass
from bdh.model.kernels.pytorch.fused import relu_mul

pytestmark = pytest.mark.cuda
pytest.importorskip("triton", reason="Triton is not installed")

GPU = torch.device("cuda")


def _inputs(B=2, H=4, T=70, N=300, D=96, dtype=torch.float32, seed=0):
    """z (some exactly 0), x, E (H N, D), a loss weight: two or more tiles of every dimension of the three products
    at every dtype (bf16 64 x 128 x 64), the last ones partly masked, a row tile across the batch boundary."""
    g = torch.Generator().manual_seed(seed)
    z = torch.randn(B, H, T, N, generator=g, dtype=torch.float64)
    z[..., ::7] = 0.0
    x = torch.randn(B, H, T, N, generator=g, dtype=torch.float64)
    E = torch.randn(H * N, D, generator=g, dtype=torch.float64) / (H * N) ** 0.5
    w = torch.randn(B, 1, T, D, generator=g, dtype=torch.float64)
    return tuple(t.to(GPU, dtype) for t in (z, x, E, w))


def _kept(shape, p: float, seed: int) -> torch.Tensor:
    """The entries the compiled gate keeps at (p, seed): ReLU(1) * 1 is 1 where kept, 0 where dropped."""
    from bdh.model.kernels.triton.gate import gate_triton

    ones = torch.ones(shape, device=GPU)
    return gate_triton(ones, ones, p=p, seed=seed) != 0


def _grads(fn, z, x, E, w):
    z, x, E = (t.clone().requires_grad_() for t in (z, x, E))
    out = fn(z, x, E)
    (out.double() * w.double()).sum().backward()
    return out.detach(), z.grad, x.grad, E.grad


@pytest.mark.parametrize("dtype, tol", [(torch.float32, 1e-5), (torch.bfloat16, 1e-2)])
def test_the_read_ins_dropout_is_the_gate_kernels_mask_in_values_and_gradients(dtype, tol):
    """Against ReLU(z) * x with the gate kernel's mask at the same seed, E y per head summed, / (1 - p), in fp64 on
    the same inputs. fp32: the same sums in another order (1e-5 of the largest, the CPU tests' fp32 bound). bf16: the
    kernel rounds y to bf16 (2^-9 an entry) and sums in fp32, so 1e-2 of the largest as the interpreter tests bound
    it (tests/model/test_read_in_triton.py). The dropped entries get no gradient: the backward drew the same mask."""
    from bdh.model.kernels.triton.read_in import gated_read_in_triton

    p, seed = 0.1, 12345
    z, x, E, w = _inputs(dtype=dtype)
    keep = _kept(z.shape, p, seed)
    got = _grads(lambda z, x, E: gated_read_in_triton(z, x, E, p=p, seed=seed), z, x, E, w)

    def form(z, x, E):
        H, N = z.shape[1], z.shape[3]
        return (relu_mul(z, x) * keep @ E.view(H, N, -1)).sum(dim=1, keepdim=True) / (1 - p)

    want = _grads(form, *(t.double() for t in (z, x, E, w)))
    for a, b in zip(got, want):
        assert a.dtype == dtype and a.shape == b.shape and rel_err(a.double(), b) < tol
    assert (got[1][~keep] == 0).all() and (got[2][~keep] == 0).all()


def test_the_compiled_mask_has_rate_p_and_is_a_function_of_the_seed():
    """At paper width (h 4, N 8,192, 64 tokens: 2^21 entries a sequence, 2 sequences) the fraction dropped is p within
    5 standard deviations (sqrt(p (1 - p) / n) = 1.5e-4 at n = 2^22: bound 7.3e-4); the same seed the same entries,
    another seed others; seed=None draws it from torch's generator (reproducible by ``torch.manual_seed``)."""
    from bdh.model.kernels.triton.read_in import gated_read_in_triton

    shape, p = (2, 4, 64, 8192), 0.1
    a, b, c = (_kept(shape, p, seed) for seed in (3, 3, 4))
    assert torch.equal(a, b) and not torch.equal(a, c)
    bound = 5 * (p * (1 - p) / a.numel()) ** 0.5
    assert abs((~a).float().mean().item() - p) < bound and abs((~c).float().mean().item() - p) < bound
    z, x, E, _ = _inputs(B=1, H=4, T=64, N=8192, D=256, dtype=torch.bfloat16)
    runs = []
    for seed in (9, 9, 10):
        torch.manual_seed(seed)
        runs.append(gated_read_in_triton(z, x, E, p=p))
    assert torch.equal(runs[0], runs[1]) and not torch.equal(runs[0], runs[2])


def test_a_training_pass_with_dropout_equals_todays_path_with_the_kernels_masks(monkeypatch):
    """The model's training pass (chunked, as the paper-size step; masks ``torch``, CUDA's with ``dropout_rng``
    auto) draws its dropout inside the read-in and calls no ``F.dropout``; ``BDH_TRITON=0``'s path with ``F.dropout``
    replaced by the kernel's masks at the seed the kernel draws gives the same logits and parameter gradients in fp32
    (1e-5 of the largest: the same sums in another order)."""
    from model.test_read_in_triton import _philox_dropout

    from bdh.model.kernels import dispatch
    from bdh.model.kernels.triton.gate import gate_triton

    idx = torch.randint(0, 256, (2, 40), generator=torch.Generator().manual_seed(0)).to(GPU)
    results, kept = {}, []
    monkeypatch.setattr(dispatch.F, "dropout", _philox_dropout(gate_triton, kept))
    for triton in ("1", "0"):
        monkeypatch.setenv("BDH_TRITON", triton)
        model = tiny_model(seed=1, dropout=0.1, dropout_rng="torch").to(GPU).train()
        c = model.kernels(Pass("chunked", 0, 40)).choice
        assert (c.masks, c.read_in) == ("torch", "gated-triton" if triton == "1" else "per-head")
        torch.manual_seed(6)
        logits = model(idx, mode="chunked")
        logits.pow(2).mean().backward()
        results[triton] = [logits.detach()] + [p.grad for p in model.parameters()]
        assert len(kept) == (0 if triton == "1" else model.config.n_layer)
    for a, b in zip(results["1"], results["0"]):
        assert rel_err(a, b) < 1e-5
