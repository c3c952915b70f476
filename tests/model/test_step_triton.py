"""One token of the recurrent form as one Triton kernel (`bdh.model.kernels.triton.step`: the read q^T S and the write
S <- u (S + k v^T) in one pass over the fp32 state) against the PyTorch step (`pytorch.attention.recurrent` with
``inplace``) in fp64, run by Triton's CPU interpreter; its refusals. (Its sm_90 compile: tests/model/test_triton_sm90.)
"""

import pytest
import torch

from bdh.errors import UserError
from bdh.model.kernels.pytorch.attention import recurrent

from .helpers import interpreted, rel_err

pytestmark = pytest.mark.extra  # the gpu extra
pytest.importorskip("triton", reason="Triton (the gpu extra) is not installed")


@pytest.fixture(scope="module")
def step():
    return interpreted("bdh.model.kernels.triton.step", "recurrent_step_triton")


def _inputs(B, H, N, D, value_heads, seed=0):
    g = torch.Generator().manual_seed(seed)
    q = torch.randn(B, H, 1, N, generator=g, dtype=torch.float64).relu()
    k = torch.randn(B, H, 1, N, generator=g, dtype=torch.float64).relu()
    v = torch.randn(B, value_heads, 1, D, generator=g, dtype=torch.float64)
    S = torch.randn(B, H, N, D, generator=g, dtype=torch.float64)
    return q, k, v, S


# (B, H, N, D, value heads, keys = queries, damping): several programs along N with the last one partly past N,
# several column blocks with the last one partly past D, values shared by the heads or one per head
CASES = [(1, 2, 200, 40, 1, True, True), (2, 3, 70, 8, 3, False, False), (3, 1, 16, 130, 1, True, True)]


@pytest.mark.parametrize("B, H, N, D, vh, shared, damped", CASES)
def test_the_read_and_the_write_equal_the_pytorch_step(step, B, H, N, D, vh, shared, damped):
    """fp32 kernel against the fp64 step on the same numbers: the read sums N fp32 products (in programs of 64 rows,
    then over the programs), within 1e-6 of the largest (N 2^-24 bounds it by 1.2e-5; random signs give ~sqrt(N)
    of that); each state entry is one multiply-add and one multiply in fp32 from fp32-rounded inputs, within 1e-6."""
    q, k, v, S = _inputs(B, H, N, D, vh)
    k = q if shared else k
    log_u = torch.linspace(-0.2, -0.01, H, dtype=torch.float64) if damped else None
    with torch.no_grad():
        want, S_want = recurrent(q, k, v, log_u=log_u, state=S.clone(), need_state=True, inplace=True)
        q32 = q.float()
        k32 = q32 if shared else k.float()
        S32 = S.float()
        got = step(q32, k32, v.float(), state=S32, log_u=log_u)
    assert got.shape == (B, H, 1, D) and got.dtype == torch.float32
    assert rel_err(got.double(), want) < 1e-6
    assert rel_err(S32.double(), S_want) < 1e-6


def test_bf16_queries_read_the_fp32_state_and_round_once(step):
    """q, k, v in bf16 (autocast's products), the state fp32: the read is summed in fp32 and rounded once to bf16,
    within 2^-8 (an ulp) of the largest from the fp64 step on the same bf16 inputs."""
    q, _, v, S = _inputs(2, 2, 96, 24, 1)
    q, v = q.bfloat16(), v.bfloat16()
    with torch.no_grad():
        want, S_want = recurrent(q.double(), q.double(), v.double(), state=S.clone(), need_state=True, inplace=True)
        S32 = S.float()
        got = step(q, q, v, state=S32)
    assert got.dtype == torch.bfloat16 and rel_err(got.double(), want) < 2**-8
    assert rel_err(S32.double(), S_want) < 1e-6


def test_what_it_does_not_take_is_refused_in_one_line(step):
    q, _, v, S = _inputs(1, 2, 32, 8, 1)
    q, v, S = q.float(), v.float(), S.float()
    with torch.no_grad():
        for bad in (dict(state=S.double()), dict(state=S.transpose(2, 3).contiguous().transpose(2, 3))):
            with pytest.raises(UserError, match="contiguous fp32 state"):
                step(q, q, v, **bad)
        two = q.expand(1, 2, 2, 32)
        with pytest.raises(UserError, match="one token"):
            step(two, two, v.expand(1, 1, 2, 8), state=S)
    with pytest.raises(UserError, match="without autograd"):
        step(q, q, v, state=S)


def test_generation_with_the_kernel_chosen_equals_the_pytorch_step(step, monkeypatch):
    """The decoder's in-place recurrent pass on CUDA's kernels (forced here on the CPU, the interpreter running them)
    takes ``recurrent-triton``; its logits and state after a prompt and four greedy steps equal the PyTorch step's
    (fp32: other summation orders, within 1e-5 of the largest), and so do its tokens."""
    import bdh.model.kernels.choice as choice
    import bdh.model.kernels.triton.step as module
    from bdh.model.decoder import StateDecoder
    from bdh.model.kernels import Pass

    from .helpers import tiny_model

    monkeypatch.setenv("BDH_NATIVE", "0")  # the PyTorch step as the reference, not the compiled CPU loop
    calls = []
    monkeypatch.setattr(module, "recurrent_step_triton", lambda *a, **kw: calls.append(1) or step(*a, **kw))
    prompt = torch.randint(0, 256, (2, 7), generator=torch.Generator().manual_seed(0))

    def run(triton: bool):
        monkeypatch.setattr(choice, "use_triton", lambda device: triton)
        model = tiny_model(seed=3, damping=(0.9, 0.8))
        with torch.no_grad():
            attention = model.kernels(Pass("recurrent", 0, 1, carried=True, need_state=True, inplace=True))
        dec = StateDecoder(model, 2, temperature=0)
        tokens = [dec.prefill(prompt).clone()] + [dec.step().clone() for _ in range(4)]
        return attention.choice.attention, torch.stack(tokens), dec.logits.clone(), dec.rho.clone()

    (fast, *got), (slow, *want) = run(True), run(False)
    assert (fast, slow) == ("recurrent-triton", "recurrent")
    assert len(calls) == 4 * 2  # four steps of two layers: the kernel ran, the PyTorch step did not stand in
    assert torch.equal(got[0], want[0])
    assert rel_err(got[1], want[1]) < 1e-5 and rel_err(got[2], want[2]) < 1e-5
