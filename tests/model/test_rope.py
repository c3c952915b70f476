"""RoPE: the fast complex-multiply path against the plain official rotation, values and gradients."""

import pytest
import torch

from bdh.model.kernels import apply_rope as rope_apply
from bdh.model.kernels.naive import naive_rope_interleaved
from bdh.model.kernels.pytorch.rope import official_frequencies, rope_tables, standard_frequencies


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_complex_path_equals_the_plain_rotation(dtype):
    N, T = 64, 40
    cos, sin = rope_tables("rope", official_frequencies(N, 2.0**16), 5, T)
    x = torch.randn(3, 2, T, N, dtype=dtype).requires_grad_()
    x2 = x.detach().clone().requires_grad_()
    fast = rope_apply("rope", x, cos, sin)
    ref = naive_rope_interleaved(x2, cos.to(dtype), sin.to(dtype))
    w = torch.randn_like(ref)
    (fast * w).sum().backward()
    (ref * w).sum().backward()
    tol = 1e-6 if dtype == torch.float32 else 1e-14
    assert torch.allclose(fast, ref, atol=tol) and torch.allclose(x.grad, x2.grad, atol=tol)


def test_non_contiguous_and_bf16_take_the_plain_path():
    N, T = 32, 8
    cos, sin = rope_tables("rope", official_frequencies(N, 2.0**16), 0, T)
    x = torch.randn(2, T, N)
    ref = naive_rope_interleaved(x, cos, sin)
    assert torch.allclose(rope_apply("rope", x.transpose(0, 1).contiguous().transpose(0, 1), cos, sin), ref, atol=1e-6)
    low = rope_apply("rope", x.bfloat16(), cos, sin)
    assert low.dtype == torch.bfloat16 and torch.allclose(low.float(), ref, atol=0.05)


def test_rotation_preserves_pair_norms_and_relative_positions():
    N = 16
    for kind, freqs in (("rope", official_frequencies(N, 2.0**16)), ("rope-standard", standard_frequencies(N, 1e4))):
        x, y = torch.randn(N), torch.randn(N)
        c3, s3 = rope_tables(kind, freqs, 3, 1)
        c7, s7 = rope_tables(kind, freqs, 7, 1)
        c10, s10 = rope_tables(kind, freqs, 10, 1)
        c14, s14 = rope_tables(kind, freqs, 14, 1)
        d1 = rope_apply(kind, x.view(1, N), c3, s3) @ rope_apply(kind, y.view(1, N), c7, s7).T
        d2 = rope_apply(kind, x.view(1, N), c10, s10) @ rope_apply(kind, y.view(1, N), c14, s14).T
        assert torch.allclose(d1, d2, atol=1e-5)  # only the offset 4 matters
        assert torch.isclose(rope_apply(kind, x.view(1, N), c3, s3).norm(), x.norm(), atol=1e-5)


def test_official_frequencies_are_in_turns_and_pair_shared():
    f = official_frequencies(8, 2.0**16)
    assert torch.equal(f[0::2], f[1::2])
    assert torch.isclose(f[0], torch.tensor(1 / (2 * torch.pi)))
    assert torch.isclose(f[6], torch.tensor(1 / (2**16) ** (6 / 8) / (2 * torch.pi)))


def test_phases_stay_accurate_far_past_any_training_window():
    """A state read over 2^20 tokens rotates keys at positions up to 2^20: one float32 product pos * f there keeps
    few bits of the fraction; `phase_turns` keeps it to the rounding of a product below SPLIT, and below SPLIT it is
    the plain expression itself."""
    from bdh.model.kernels.pytorch.rope import SPLIT, frequencies, phase_turns

    f = frequencies("rope", 256, 2.0**16).float().view(1, -1)
    near = torch.arange(-SPLIT + 1, SPLIT, dtype=torch.float32).view(-1, 1)  # negative: the graph model's rotations
    assert torch.equal(phase_turns(near, f), near * f % 1)  # the same float32 operations on the same values
    far = torch.tensor([2**16 + 3, 2**20 - 1, 2**20 + 12345, -(2**20) - 7], dtype=torch.float32).view(-1, 1)
    exact = far.double() * f.double() % 1

    def drift(turns: torch.Tensor) -> float:  # distance on the circle, in turns
        return float(((turns.double() - exact + 0.5) % 1 - 0.5).abs().max())

    # each float32 product is below 4096 (ulp <= 2^-12 turn, the worst case); measured far below: 1e-4 is 0.04 degrees
    assert drift(phase_turns(far, f)) < 1e-4
    assert drift(far * f % 1) > 1e-3  # what the single product gave: more than ten times worse
