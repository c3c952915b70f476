"""The generation step's encoder as one Triton kernel (`bdh.model.kernels.triton.encode_step`: x = ReLU(v Dx) and its
interleaved RoPE for one token) against the PyTorch step (the per-head product, ``F.relu``, `rotate_complex`), run by
Triton's CPU interpreter; its refusals; the decoder with it chosen. (Its sm_90 compile: tests/model/test_triton_sm90.)
"""

import pytest
import torch
import torch.nn.functional as F

from bdh.errors import UserError
from bdh.model.kernels.pytorch.rope import rotate_complex

from .helpers import interpreted, rel_err

pytestmark = pytest.mark.extra  # the gpu extra
pytest.importorskip("triton", reason="Triton (the gpu extra) is not installed")


@pytest.fixture(scope="module")
def encode_step():
    return interpreted("bdh.model.kernels.triton.encode_step", "encode_step_triton")


def _inputs(B, H, N, D, dtype, seed=0):
    """v (B, 1, 1, D) with sequence 0 all zeros (pre-activations exactly 0: ReLU's kink), W (H, D, N), and one-row
    tables of interleaved pairs (each angle twice, as `rope_tables_at` gives them for ``rope``)."""
    g = torch.Generator().manual_seed(seed)
    v = torch.randn(B, 1, 1, D, generator=g, dtype=torch.float64)
    v[0] = 0.0
    W = torch.randn(H, D, N, generator=g, dtype=torch.float64) / D**0.5
    angles = (torch.rand(1, N // 2, generator=g, dtype=torch.float64) * 6.3).repeat_interleave(2, dim=1)
    return v.to(dtype), W.to(dtype), torch.cos(angles).float(), torch.sin(angles).float()


# (B, H, N, D): at fp64 (tiles 32 x 16 x 16) N = 70 is 35 pairs in three column tiles and D = 40 three inner steps,
# the last of each partly masked; B = 40 two row tiles
CASES = [(3, 2, 70, 40), (40, 1, 32, 16)]


@pytest.mark.parametrize("B, H, N, D", CASES)
@pytest.mark.parametrize("dtype, tol", [(torch.float64, 1e-12), (torch.float32, 1e-5), (torch.bfloat16, 2e-2)])
def test_x_and_its_rotation_equal_the_pytorch_step(encode_step, B, H, N, D, dtype, tol):
    """Both sum the same D products in ACC (fp32; fp64 for fp64) and round x once, in another order, then rotate the
    rounded x in ACC: fp64 / fp32 differ by rounding in a 40-term sum and a two-term rotation (~1e-15, ~1e-6 of the
    largest). bf16: an entry of x differs by at most an ulp (at most 2^-7 of it) where the sums round to neighbours;
    R x by |c| + |s| <= 1.42 such ulps and an ulp of its own rounding: under 2.5 2^-7 = 1.95e-2 of the largest (at
    paper width 1.3e-2 is reached: tests/cuda/test_cuda_step_fused.py). The zero token gives 0."""
    v, W, cos, sin = _inputs(B, H, N, D, dtype)
    with torch.no_grad():
        x, xr = encode_step(v, W, cos, sin)
        want = F.relu(v @ W)
        want_r = rotate_complex(want, cos, sin)
    for got, ref in ((x, want), (xr, want_r)):
        assert got.shape == (B, H, 1, N) and got.dtype == dtype
        assert rel_err(got.double(), ref.double()) < tol
    assert (x[0] == 0).all() and (xr[0] == 0).all()


def test_autocast_casts_the_inputs_as_the_matmul_would(encode_step):
    """Under autocast x and R x are in autocast's dtype, within the bf16 bound above of autocast's PyTorch step."""
    v, W, cos, sin = _inputs(3, 2, 70, 40, torch.float32)
    with torch.no_grad(), torch.autocast("cpu", dtype=torch.bfloat16):
        x, xr = encode_step(v, W, cos, sin)
        want = F.relu(v @ W)
        want_r = rotate_complex(want, cos, sin)
    assert x.dtype == xr.dtype == want.dtype == torch.bfloat16
    assert rel_err(x.double(), want.double()) < 2e-2 and rel_err(xr.double(), want_r.double()) < 2e-2


def test_what_it_does_not_take_is_refused_in_one_line(encode_step):
    v, W, cos, sin = _inputs(2, 2, 16, 8, torch.float32)
    with torch.no_grad():
        bad = [
            (v.expand(2, 1, 2, 8), W, cos, sin),  # two tokens
            (v, W[:, :, :15], cos[:, :15], sin[:, :15]),  # N odd: no pairs
            (v, W, cos.expand(2, 16), sin.expand(2, 16)),  # tables of two positions
            (v, W.double(), cos, sin),  # two dtypes
        ]
        for args in bad:
            with pytest.raises(UserError, match="encode_step_triton: needs one token"):
                encode_step(*args)
    with pytest.raises(UserError, match="without autograd"):
        encode_step(v, W, cos, sin)


def test_the_choice_is_the_step_kernel_on_cuda_for_an_in_place_recurrent_step_only(monkeypatch):
    from bdh.model.kernels import Pass, choose

    def chosen(device: str, mode: str = "recurrent", inplace: bool = True) -> str:
        options = dict(log_u=None, causal=True, chunk_size=8, dropout=0.0, dropout_rng="auto", training=False)
        p = Pass(mode, 0, 1, carried=True, need_state=True, inplace=inplace)
        with torch.no_grad():  # an in-place pass is chosen only without autograd
            return choose(p, positional="rope", autograd=False, device=torch.device(device), **options).encode

    assert chosen("cuda") == "step-triton" and chosen("cpu") == "heads-relu"
    assert chosen("cuda", inplace=False) == chosen("cuda", mode="chunked") == "heads-relu"
    monkeypatch.setenv("BDH_TRITON", "0")
    assert chosen("cuda") == "heads-relu"


@pytest.mark.parametrize("positional, kernel", [("rope", "encode_step_triton"), ("none", "encode_triton")])
def test_generation_with_the_kernel_chosen_equals_the_pytorch_step(encode_step, monkeypatch, positional, kernel):
    """The decoder's in-place recurrent pass on CUDA's kernels (forced here on the CPU, the interpreter running them)
    takes ``step-triton``: with RoPE the fused kernel, without it `triton.encode`'s (nothing to rotate). Its logits
    and state after a prompt and four greedy steps equal the PyTorch step's (fp32: other summation orders, within
    1e-5 of the largest), and so do its tokens."""
    import bdh.model.kernels.choice as choice
    import bdh.model.kernels.dispatch as dispatch
    from bdh.model.decoder import StateDecoder
    from bdh.model.kernels import Pass

    from .helpers import tiny_model

    monkeypatch.setenv("BDH_NATIVE", "0")  # the PyTorch step as the reference, not the compiled CPU loops
    module = dispatch._triton_encode_step if kernel == "encode_step_triton" else dispatch._triton_encode
    calls, launch = [], getattr(module, kernel)
    monkeypatch.setattr(module, kernel, lambda *a, **kw: calls.append(1) or launch(*a, **kw))
    prompt = torch.randint(0, 256, (2, 7), generator=torch.Generator().manual_seed(0))

    def run(triton: bool):
        monkeypatch.setattr(choice, "use_triton", lambda device: triton)
        model = tiny_model(seed=3, damping=(0.9, 0.8), positional=positional)
        with torch.no_grad():
            encoder = model.kernels(Pass("recurrent", 0, 1, carried=True, need_state=True, inplace=True))
        dec = StateDecoder(model, 2, temperature=0)
        tokens = [dec.prefill(prompt).clone()] + [dec.step().clone() for _ in range(4)]
        return encoder.choice.encode, torch.stack(tokens), dec.logits.clone(), dec.rho.clone()

    (fast, *got), (slow, *want) = run(True), run(False)
    assert (fast, slow) == ("step-triton", "heads-relu")
    assert len(calls) == 4 * 2  # four steps of two layers: the kernel ran, the PyTorch step did not stand in
    assert torch.equal(got[0], want[0])
    assert rel_err(got[1], want[1]) < 1e-5 and rel_err(got[2], want[2]) < 1e-5
