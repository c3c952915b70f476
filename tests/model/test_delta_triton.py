"""The delta rule's Triton kernels (`bdh.model.kernels.triton.delta`) against the token rule's recurrent and chunked
forms (`bdh.model.kernels.pytorch.state_rules`), in values and every gradient (q, k, v, log g, b, the state carried
in), run by Triton's CPU interpreter (``TRITON_INTERPRET=1``); tests/model/test_triton_sm90.py compiles them for sm_90.

The interpreter runs each program in Python and the chunks one after another, so the cases in CI are small and have
few chunks; each covers a chunk shorter than the others and masked rows and columns of the tiles. The case with
several tiles of D and chunks of 64 is marked slow."""

from functools import partial

import pytest
import torch
import torch.nn.functional as F

from bdh.model.kernels.pytorch import state_rules as rules

from .helpers import interpreted, rel_err

pytestmark = pytest.mark.extra  # the gpu extra
triton = pytest.importorskip("triton", reason="Triton (the gpu extra) is not installed")


@pytest.fixture(scope="module")
def delta_triton():
    """`delta_chunked_triton`, its kernels run by Triton's CPU interpreter (tests/conftest.py turns it on)."""
    return interpreted("bdh.model.kernels.triton.delta", "delta_chunked_triton")


def _inputs(B, H, T, N, D, *, gate, damped, with_state, shared_v, dtype=torch.float64, seed=0):
    """BDH's delta-rule inputs: ReLU queries, unit non-negative keys, the write strength through either gate (the
    hard gate's b is exactly 0 or 1 on some tokens), log-retentions of U times a decay gate."""
    g = torch.Generator().manual_seed(seed)
    q = torch.randn(B, H, T, N, generator=g, dtype=dtype).relu()
    k = rules.unit_keys(torch.randn(B, H, T, N, generator=g, dtype=dtype).relu())
    v = torch.randn(B, 1 if shared_v else H, T, D, generator=g, dtype=dtype)
    z = 4 * torch.randn(B, H, T, generator=g, dtype=dtype)
    beta = F.hardsigmoid(z) if gate == "hard" else torch.sigmoid(z)
    log_g = -0.3 * torch.rand(B, H, T, generator=g, dtype=dtype) if damped else None
    s0 = torch.randn(B, H, N, D, generator=g, dtype=dtype) if with_state else None
    return q, k, v, log_g, beta, s0


def _run(fn, inputs, w_out, w_state):
    """Output, state after and the gradient of every input (None where it is None) of a weighted sum of both."""
    leaves = [None if x is None else x.clone().requires_grad_() for x in inputs]
    q, k, v, log_g, beta, s0 = leaves
    out, state = fn(q, k, v, log_g=log_g, beta=beta, state=s0)
    ((out * w_out).sum() + (state * w_state).sum()).backward()
    return [out.detach(), state.detach()] + [None if x is None else x.grad for x in leaves]


# (B, H, T, N, D, chunk, gate, damped, with_state, shared_v): T never a multiple of the chunk, N and D never a power
# of two (masked tiles, two tiles of N), the chunk smaller and larger than the 16-row tile
CASES = [
    (1, 2, 11, 20, 6, 4, "sigmoid", True, True, True),  # BDH: values shared by the heads, damped, a carried state
    (2, 1, 9, 18, 5, 16, "hard", False, False, False),  # one chunk shorter than it; b exactly 0 and 1 on some tokens
    (1, 2, 10, 24, 7, 3, "hard", True, False, True),
]
SLOW = [(1, 2, 150, 40, 40, 64, "sigmoid", True, True, True)]  # 3 chunks of 64, 2 tiles of N and of D at fp64


def _compare(delta_triton, case, tol: float) -> None:
    B, H, T, N, D, chunk, gate, damped, with_state, shared_v = case
    inputs = _inputs(B, H, T, N, D, gate=gate, damped=damped, with_state=with_state, shared_v=shared_v)
    g = torch.Generator().manual_seed(1)
    w_out = torch.randn(B, H, T, D, generator=g, dtype=torch.float64)
    w_state = torch.randn(B, H, N, D, generator=g, dtype=torch.float64)

    got = _run(partial(delta_triton, chunk_size=chunk, need_state=True), inputs, w_out, w_state)
    for form, options in [("recurrent", {}), ("chunked", {"chunk_size": chunk})]:
        want = _run(partial(rules.FORMS[form], need_state=True, **options), inputs, w_out, w_state)
        for name, a, b in zip(["out", "state", "dq", "dk", "dv", "dlog_g", "dbeta", "dS0"], got, want):
            assert (a is None) == (b is None), name
            assert a is None or rel_err(a, b) < tol, (form, name, rel_err(a, b))


@pytest.mark.parametrize("case", CASES)
def test_values_and_every_gradient_equal_the_recurrent_and_chunked_forms(delta_triton, case):
    # fp64 throughout: the forms differ in summation order and in the triangular solve's (a C x C system of unit
    # keys and b <= 1, well conditioned); measured <= 2.2e-15 of the largest value, the bound leaves 400x
    _compare(delta_triton, case, 1e-12)


@pytest.mark.slow
@pytest.mark.parametrize("case", SLOW)
def test_several_tiles_of_every_dimension(delta_triton, case):
    _compare(delta_triton, case, 1e-12)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_low_precision_stays_close_to_fp64_like_the_chunked_form(delta_triton, dtype):
    """fp32 and bf16 inputs (bf16 through autocast, as training runs), every sum and the state in fp32: the error
    against fp64 is that of rounding the inputs and the product operands (S, W, the chunk matrices) to the inputs'
    dtype. Measured at this size (4 seeds): fp32 <= 2.1e-7 of the largest value for both forms; bf16 <= 8.9e-3 for
    these kernels and <= 6.5e-3 for the chunked form, the mean error 1.5x the chunked form's (Triton's interpreter
    rounds fp32 to bf16 by truncation, see test_chunked_triton). Bounds: 1e-6 (fp32), 3e-2 (bf16) of the largest
    value, the mean at most 3x the chunked form's."""
    B, H, T, N, D = 2, 2, 37, 24, 8
    q, k, v, log_g, beta, _ = _inputs(B, H, T, N, D, gate="sigmoid", damped=True, with_state=False, shared_v=True)
    ref = rules.FORMS["recurrent"](q, k, v, log_g=log_g, beta=beta, need_state=True)
    errors = {}
    for name, fn in [("triton", delta_triton), ("chunked", rules.chunked)]:
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=dtype == torch.bfloat16):
            out, state = fn(
                q.float(), k.float(), v.float(), chunk_size=8, log_g=log_g.float(), beta=beta.float(), need_state=True
            )
        assert name != "triton" or state.dtype == torch.float32  # the state is kept in fp32
        mean = ((out.double() - ref[0]).abs().mean() / ref[0].abs().mean()).item()
        errors[name] = (rel_err(out.double(), ref[0]), rel_err(state.double(), ref[1]), mean)
    bound = 1e-6 if dtype == torch.float32 else 3e-2
    assert max(errors["triton"][:2]) < bound, errors
    assert errors["triton"][2] <= 3 * errors["chunked"][2] + 1e-7, errors


@pytest.mark.parametrize("gate, extra", [("sigmoid", {"decay_gate": True}), ("hard", {"damping": 0.9})])
def test_the_model_with_the_kernels_computes_the_pytorch_forms(delta_triton, monkeypatch, gate, extra):
    """The choice table takes the kernels for BDH's chunked delta rule (forced on the CPU here): the logits and every
    parameter's gradient equal those of the PyTorch chunked form and of the recurrent form. fp64 with the gates in
    fp32 (as the model computes them): against the chunked form, which sums the log-retentions in fp64 as the
    kernels do, only the order of the sums differs, ~1e-15 of the scale (bound 1e-10); the recurrent form takes
    e^{l_t} in fp32 at every token, ~1e-8 apart with damping (bound 1e-6, as test_chunked_triton's)."""
    from bdh.model.kernels import Pass, choice

    from .helpers import tiny_model

    results = {}
    for name, mode, triton_on in [
        ("recurrent", "recurrent", False),
        ("chunked", "chunked", False),
        ("ours", "chunked", True),
    ]:
        monkeypatch.setattr(choice, "use_triton", lambda device, on=triton_on: on)
        model = tiny_model(seed=3, n_layer=1, state_write="delta", write_gate=gate, **extra).double()
        idx = torch.randint(0, 256, (2, 11), generator=torch.Generator().manual_seed(0))
        chosen = model.kernels(Pass(mode, 0, 11)).choice.attention
        assert chosen == ("delta-chunked-triton" if triton_on else f"delta-{mode}")
        logits = model(idx, mode=mode)
        logits.pow(2).mean().backward()
        results[name] = [logits.detach()] + [p.grad for p in model.parameters()]
    for name, tol in [("chunked", 1e-10), ("recurrent", 1e-6)]:
        for a, b in zip(results["ours"], results[name]):
            assert (a is None) == (b is None) and (a is None or rel_err(a, b) < tol), (name, rel_err(a, b))


def test_the_table_takes_the_kernels_for_the_chunked_delta_rule_on_cuda_only(monkeypatch):
    from bdh.model.kernels import Pass, choose

    def chosen(device: str, mode: str = "chunked", rule: str = "delta") -> str:
        options = dict(log_u=None, causal=True, chunk_size=8, dropout=0.0, dropout_rng="auto", training=True)
        p = Pass(mode, 0, 16, carried=True, need_state=True)  # the state passed on, as the main job's recipe trains
        return choose(p, positional="none", autograd=True, device=torch.device(device), state_rule=rule, **options)

    assert chosen("cuda").attention == "delta-chunked-triton" and chosen("cpu").attention == "delta-chunked"
    assert chosen("cuda", "recurrent").attention == "delta-recurrent"
    assert chosen("cuda", rule="gated").attention == "gated-chunked"
    monkeypatch.setenv("BDH_TRITON", "0")
    assert chosen("cuda").attention == "delta-chunked"


def test_bad_input_is_refused_with_one_line(delta_triton, monkeypatch):
    from bdh.model.kernels.triton.delta import delta_chunked_triton

    q, k, v, log_g, beta, s0 = _inputs(1, 2, 5, 8, 3, gate="sigmoid", damped=True, with_state=True, shared_v=True)
    with pytest.raises(ValueError, match=r"beta must be \(B, H, T\)"):
        delta_chunked_triton(q, k, v, chunk_size=4, beta=beta[:, :1])
    with pytest.raises(ValueError, match=r"beta must be \(B, H, T\)"):
        delta_chunked_triton(q, k, v, chunk_size=4, beta=None)
    with pytest.raises(ValueError, match=r"log_g must be \(B, H, T\)"):
        delta_chunked_triton(q, k, v, chunk_size=4, beta=beta, log_g=log_g[..., :3])
    with pytest.raises(ValueError, match="chunk_size must be a positive integer"):
        delta_chunked_triton(q, k, v, chunk_size=0, beta=beta)
    with pytest.raises(ValueError, match="must share a dtype"):
        delta_chunked_triton(q, k, v.float(), chunk_size=4, beta=beta)
    with pytest.raises(ValueError, match="state must be"):
        delta_chunked_triton(q, k, v, chunk_size=4, beta=beta, state=s0[:, :, :4])
    monkeypatch.setenv("TRITON_INTERPRET", "0")
    with pytest.raises(ValueError, match="need CUDA tensors"):
        delta_chunked_triton(q, k, v, chunk_size=4, beta=beta)
