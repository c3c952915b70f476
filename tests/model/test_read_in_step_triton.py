"""The generation step's gate and read-in as one Triton kernel (`bdh.model.kernels.triton.read_in_step`: E y with
y = ReLU(z) * x formed inside, the n rows of E split over programs) against the PyTorch step (``relu_mul``, the
per-head product, the sum over the heads), run by Triton's CPU interpreter; its refusals; the decoder with it chosen.
(Its sm_90 compile: tests/model/test_triton_sm90.)"""

import pytest
import torch

from bdh.errors import UserError
from bdh.model.kernels.pytorch.fused import relu_mul

from .helpers import interpreted, rel_err

pytestmark = pytest.mark.extra  # the gpu extra
pytest.importorskip("triton", reason="Triton (the gpu extra) is not installed")


@pytest.fixture(scope="module")
def read_in_step():
    return interpreted("bdh.model.kernels.triton.read_in_step", "gated_read_in_step_triton")


def _inputs(B, H, N, D, dtype, seed=0):
    g = torch.Generator().manual_seed(seed)
    z = torch.randn(B, H, 1, N, generator=g, dtype=torch.float64)
    x = torch.randn(B, H, 1, N, generator=g, dtype=torch.float64).relu()
    E = torch.randn(H * N, D, generator=g, dtype=torch.float64) / N**0.5
    return z.to(dtype), x.to(dtype), E.to(dtype)


def _reference(z, x, E):
    H, N = z.shape[1], z.shape[3]
    return (relu_mul(z, x) @ E.view(H, N, -1)).sum(dim=1, keepdim=True)


# (B, H, N, D): H N = 400 rows in 7 programs of 64, the last partly past them, one column block partly past D;
# three sequences, three column blocks
CASES = [(1, 2, 200, 40), (3, 3, 70, 130)]


@pytest.mark.parametrize("B, H, N, D", CASES)
@pytest.mark.parametrize("dtype, tol", [(torch.float64, 1e-12), (torch.float32, 1e-5), (torch.bfloat16, 2e-2)])
def test_e_y_equals_the_pytorch_step(read_in_step, B, H, N, D, dtype, tol):
    """y is the same product rounded once in both; E y sums H N <= 400 products in another order: fp64 / fp32 by
    rounding (~1e-15, ~1e-6 of the largest with random signs). bf16: the reference rounds each head's product and
    their sum to bf16, H + 1 <= 4 roundings of 2^-8 of sums of the output's size (1.6e-2); here one."""
    z, x, E = _inputs(B, H, N, D, dtype)
    with torch.no_grad():
        got, want = read_in_step(z, x, E), _reference(z, x, E)
    assert got.shape == (B, 1, 1, D) and got.dtype == dtype
    assert rel_err(got.double(), want.double()) < tol


def test_under_autocast_e_is_rounded_as_the_matmul_casts_it(read_in_step):
    """bf16 z and x (autocast's products) with fp32 E: E's entries rounded to bf16 inside, as autocast's matmul casts
    them; within the bf16 bound above of autocast's PyTorch step."""
    z, x, E = _inputs(2, 2, 96, 24, torch.float32)
    z, x = z.bfloat16(), x.bfloat16()
    with torch.no_grad(), torch.autocast("cpu", dtype=torch.bfloat16):
        got, want = read_in_step(z, x, E), _reference(z, x, E)
    assert got.dtype == want.dtype == torch.bfloat16 and rel_err(got.double(), want.double()) < 2e-2


def test_what_it_does_not_take_is_refused_in_one_line(read_in_step):
    z, x, E = _inputs(1, 2, 16, 8, torch.float32)
    with torch.no_grad():
        for args in ((z.expand(1, 2, 2, 16), x.expand(1, 2, 2, 16), E), (z, x, E[:-1]), (z, x.double(), E)):
            with pytest.raises(UserError, match="gated_read_in_step_triton: needs one token"):
                read_in_step(*args)
    with pytest.raises(UserError, match="without autograd"):
        read_in_step(z, x, E)


def test_the_choice_is_the_step_kernel_on_cuda_for_an_in_place_recurrent_step_only(monkeypatch):
    from bdh.model.kernels import Pass, choose

    def chosen(device: str, hooked: bool = False, dropout: float = 0.0, training: bool = False) -> str:
        options = dict(log_u=None, causal=True, chunk_size=8, dropout=dropout, dropout_rng="auto", training=training)
        p = Pass("recurrent", 0, 1, carried=True, need_state=True, inplace=True, hooked=hooked)
        with torch.no_grad():  # an in-place pass is chosen only without autograd
            return choose(p, positional="rope", autograd=False, device=torch.device(device), **options).read_in

    assert chosen("cuda") == chosen("cuda", dropout=0.1) == "step-triton" and chosen("cpu") == "per-head"
    assert chosen("cuda", hooked=True) == chosen("cuda", dropout=0.1, training=True) == "per-head"
    monkeypatch.setenv("BDH_TRITON", "0")
    assert chosen("cuda") == "per-head"


@pytest.mark.parametrize("damped", [False, True])
def test_generation_with_the_kernel_chosen_equals_the_pytorch_step(read_in_step, monkeypatch, damped):
    """The decoder's in-place recurrent pass on CUDA's kernels (forced here on the CPU, the interpreter running them)
    takes ``step-triton``; its logits and state after a prompt and four greedy steps equal the PyTorch step's (fp32:
    other summation orders, within 1e-5 of the largest), and so do its tokens."""
    import bdh.model.kernels.choice as choice
    import bdh.model.kernels.dispatch as dispatch
    from bdh.model.decoder import StateDecoder
    from bdh.model.kernels import Pass

    from .helpers import tiny_model

    monkeypatch.setenv("BDH_NATIVE", "0")  # the PyTorch step as the reference, not the compiled CPU loops
    module, calls = dispatch._triton_read_in_step, []
    launch = module.gated_read_in_step_triton
    monkeypatch.setattr(module, "gated_read_in_step_triton", lambda *a: calls.append(1) or launch(*a))
    prompt = torch.randint(0, 256, (2, 7), generator=torch.Generator().manual_seed(0))

    def run(triton: bool):
        monkeypatch.setattr(choice, "use_triton", lambda device: triton)
        model = tiny_model(seed=3, **(dict(damping=(0.9, 0.8)) if damped else {}))
        with torch.no_grad():
            kernels = model.kernels(Pass("recurrent", 0, 1, carried=True, need_state=True, inplace=True))
        dec = StateDecoder(model, 2, temperature=0)
        tokens = [dec.prefill(prompt).clone()] + [dec.step().clone() for _ in range(4)]
        return kernels.choice.read_in, torch.stack(tokens), dec.logits.clone(), dec.rho.clone()

    (fast, *got), (slow, *want) = run(True), run(False)
    assert (fast, slow) == ("step-triton", "per-head")
    assert len(calls) == 4 * 2  # four steps of two layers: the kernel ran, the PyTorch step did not stand in
    assert torch.equal(got[0], want[0])
    assert rel_err(got[1], want[1]) < 1e-5 and rel_err(got[2], want[2]) < 1e-5
