"""The delta rule's chunkwise UT form (`bdh.model.kernels.pytorch.delta_ut`) against the reference loop
`naive_state_rule`, in values and gradients, and the model's parallel and chunked passes against `slow_forward`."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from bdh.model.kernels import Pass
from bdh.model.kernels.naive import naive_state_rule
from bdh.model.kernels.pytorch import delta_ut as delta_ut_module
from bdh.model.kernels.pytorch.delta_ut import delta_ut, one_block, ut_chunk
from bdh.model.kernels.pytorch.state_rules import unit_keys

from .helpers import logits_and_grads, rel_err, tiny_model

B, H, T, N, D = 2, 3, 13, 6, 5


def _inputs(seed: int, with_state: bool, n: int = N, d: int = D):
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(B, H, T, n, generator=g, dtype=torch.float64).relu()  # BDH's keys: positive, some all zero
    x[:, :, 3] = 0  # a token with no active neuron writes nothing (its unit key is zero)
    v = torch.randn(B, 1, T, d, generator=g, dtype=torch.float64)
    z = torch.randn(B, H, T, generator=g, dtype=torch.float64) * 3  # some b_t exactly 0 or 1 under the hard gate
    gate = torch.randn(B, H, T, generator=g, dtype=torch.float64)
    log_u = torch.log(torch.tensor([0.5, 0.9, 1.0], dtype=torch.float64))
    state = torch.randn(B, H, n, d, generator=g, dtype=torch.float64) if with_state else torch.zeros(0)
    return [x, v, z, gate, log_u, state]


def _rule(form, write_gate: str, retention: str, with_state: bool, need_state: bool = True, **options):
    """The rule as BDH calls it, from its raw inputs (so that the gradients reach every one of them)."""

    def run(x, v, z, gate, log_u, state):
        beta = F.hardsigmoid(z) if write_gate == "hard" else torch.sigmoid(z)
        log_g = {
            "none": None,
            "per-head": log_u.view(1, -1, 1).expand(B, -1, T),  # U's damping: broadcast over the batch (stride 0)
            "per-token": log_u.view(1, -1, 1) + F.logsigmoid(gate),  # a decay gate
        }[retention]
        S0 = state if with_state else None
        keys = None if options.get("query_keys") else unit_keys(x)  # query_keys: the form makes them from x
        a, after = form(x, keys, v, log_g=log_g, beta=beta, state=S0, need_state=need_state, **options)
        return torch.cat([a.flatten(), after.flatten()]) if need_state else a.flatten()

    return run


@pytest.mark.parametrize("chunk_size", [1, 5, 13, 64])  # one token, not dividing T, one chunk, past T
@pytest.mark.parametrize("write_gate", ["sigmoid", "hard"])
@pytest.mark.parametrize("retention", ["none", "per-head", "per-token"])
@pytest.mark.parametrize("with_state", [False, True])
def test_the_ut_form_equals_the_loop(chunk_size, write_gate, retention, with_state):
    """Values, the state after and every input's gradient, fp64. The two sum the same terms in another order (and
    the UT form inverts the chunk's unit triangular I + A, whose entries are at most 1 with unit keys and b <= 1):
    differences ~1e-15 of the scale; the bound 1e-11 leaves room for the T-long products of retentions."""
    inputs = _inputs(chunk_size, with_state)
    weight = torch.linspace(-1, 1, B * H * T * D + B * H * N * D, dtype=torch.float64)
    results = []
    for form, options in [(delta_ut, {"chunk_size": chunk_size}), (naive_state_rule, {})]:
        leaves = [t.clone().requires_grad_() for t in inputs]
        out = _rule(form, write_gate, retention, with_state, **options)(*leaves)
        (out * weight).sum().backward()
        results.append([out.detach()] + [t.grad for t in leaves])
    for name, a, b in zip(["values", "x", "v", "z", "gate", "log_u", "state"], *results):
        assert (a is None) == (b is None), name
        if a is not None:
            assert rel_err(a, b) < 1e-11, (name, rel_err(a, b))


@pytest.mark.parametrize("chunk_size", [1, 5, 64])
@pytest.mark.parametrize("retention", ["none", "per-token"])
@pytest.mark.parametrize("with_state", [False, True])
def test_query_keys_equal_the_loop_with_unit_keys(chunk_size, retention, with_state):
    """``query_keys``: the keys are the unit queries, formed inside from one Gram Q Q^T (`_gram`; the N-wide keys
    never built), against the loop given k = x / |x| (with a silent token, whose key is 0): values, the state after
    and every input's gradient, fp64, bound 1e-11 as above."""
    inputs = _inputs(chunk_size + 7, with_state)
    weight = torch.linspace(-1, 1, B * H * T * D + B * H * N * D, dtype=torch.float64)
    results = []
    for form, options in [(delta_ut, {"chunk_size": chunk_size, "query_keys": True}), (naive_state_rule, {})]:
        leaves = [t.clone().requires_grad_() for t in inputs]
        out = _rule(form, "sigmoid", retention, with_state, **options)(*leaves)
        (out * weight).sum().backward()
        results.append([out.detach()] + [t.grad for t in leaves])
    for name, a, b in zip(["values", "x", "v", "z", "gate", "log_u", "state"], *results):
        assert (a is None) == (b is None), name
        if a is not None:
            assert rel_err(a, b) < 1e-11, (name, rel_err(a, b))


def _values_and_grads(runs, inputs, weight):
    """[values, then every input's gradient] of each rule in ``runs`` (fp64), at the loss (out * weight).sum()."""
    results = []
    for run in runs:
        leaves = [t.clone().requires_grad_() for t in inputs]
        out = run(*leaves)
        (out * weight).sum().backward()
        results.append([out.detach()] + [t.grad for t in leaves])
    return results


@pytest.mark.parametrize("write_gate", ["sigmoid", "hard"])
@pytest.mark.parametrize("retention", ["none", "per-head", "per-token"])
def test_the_one_block_of_the_parallel_mode_equals_the_loop(write_gate, retention, monkeypatch):
    """``parallel`` with query keys and no state in or out: the sequence as one block with the backward by hand
    (`_QueryKeyBlock`, where `one_block` holds: N = 64 wide against D = 3) against the loop given k = x / |x|, with a
    silent token (its r clamped) and b exactly 0 and 1 (hard gate): values and every input's gradient (x, v, the
    gate's z, the decay gate, U), fp64, bound 1e-11 as above."""
    n, d = 64, 3
    assert one_block(T, n, d, min(ut_chunk(128, n, d), T))
    calls = []
    block = delta_ut_module._QueryKeyBlock.apply
    monkeypatch.setattr(delta_ut_module._QueryKeyBlock, "apply", lambda *a: calls.append(1) or block(*a))
    inputs = _inputs(11, False, n, d)
    ours = _rule(delta_ut, write_gate, retention, False, False, chunk_size=128, query_keys=True, parallel=True)
    ref = _rule(naive_state_rule, write_gate, retention, False, False)
    weight = torch.linspace(-1, 1, B * H * T * d, dtype=torch.float64)
    results = _values_and_grads([ours, ref], inputs, weight)
    assert calls, "the one block did not run"
    for name, a, b in zip(["values", "x", "v", "z", "gate", "log_u"], *results):
        assert (a is None) == (b is None), name
        if a is not None:
            assert rel_err(a, b) < 1e-11, (name, rel_err(a, b))


def test_the_one_block_is_taken_only_without_a_state_and_where_it_is_cheaper(monkeypatch):
    """A carried state, a state wanted after, keys of their own, the chunked mode, or a state as wide as the
    recipe's (N = 128, D = 64 at T = 256) run the chunks: the same values either way (fp64, bound 1e-11)."""
    assert one_block(256, 1024, 128, ut_chunk(128, 1024, 128)) and not one_block(256, 128, 64, ut_chunk(128, 128, 64))
    x, v, z, _, _, state = _inputs(12, True, 64, 3)
    calls = []
    block = delta_ut_module._QueryKeyBlock.apply
    monkeypatch.setattr(delta_ut_module._QueryKeyBlock, "apply", lambda *a: calls.append(1) or block(*a))
    common = dict(chunk_size=128, beta=torch.sigmoid(z), query_keys=True)
    for options in [dict(state=state), dict(need_state=True), dict(query_keys=False), dict(parallel=False)]:
        a = delta_ut(x, unit_keys(x), v, **{**common, "parallel": True, **options})[0]
        assert not calls, options
        ref = naive_state_rule(x, unit_keys(x), v, beta=torch.sigmoid(z), state=options.get("state"))[0]
        assert rel_err(a, ref) < 1e-11, options


def test_the_one_block_in_fp32_and_bf16_stays_near_fp64():
    """In fp32 within 1e-5 of fp64, in bf16 within 5e-2 (products in bf16, the solve in fp32), values and x's
    gradient, as the chunks' bounds below."""
    x, v, z, *_ = _inputs(13, False, 64, 3)
    weight = torch.linspace(-1, 1, B * H * T * 3, dtype=torch.float64)

    def run(dtype):
        q = x.to(dtype, copy=True).requires_grad_()
        a = delta_ut(
            q, None, v.to(dtype), chunk_size=128, beta=torch.sigmoid(z).float(), query_keys=True, parallel=True
        )[0]
        (a.double().flatten() * weight).sum().backward()
        return a.double(), q.grad.double()

    ref = run(torch.float64)
    for dtype, bound in [(torch.float32, 1e-5), (torch.bfloat16, 5e-2)]:
        a, g = run(dtype)
        assert rel_err(a, ref[0]) < bound and rel_err(g, ref[1]) < bound, dtype


def test_the_ut_form_in_fp32_and_bf16_stays_near_fp64():
    """In fp32 the products and the solve round at ~1e-7 of the scale (bound 1e-5); in bf16 the products round at
    ~4e-3 and the solve runs in fp32 (bound 5e-2, as the Triton kernels' bf16 bound)."""
    x, v, z, _, log_u, state = _inputs(0, True)
    log_g = log_u.view(1, -1, 1).expand(B, -1, T)

    def run(dtype):
        q = x.to(dtype)
        a, S = delta_ut(q, unit_keys(q), v.to(dtype), chunk_size=4, log_g=log_g.float(), beta=torch.sigmoid(z).float(),
                        state=state.float(), need_state=True)  # fmt: skip
        return a.double(), S.double()

    ref = naive_state_rule(x, unit_keys(x), v, log_g=log_g, beta=torch.sigmoid(z), state=state, need_state=True)
    for dtype, bound in [(torch.float32, 1e-5), (torch.bfloat16, 5e-2)]:
        a, S = run(dtype)
        assert rel_err(a, ref[0]) < bound and rel_err(S, ref[1]) < bound, dtype


@pytest.mark.parametrize("mode", ["parallel", "chunked"])
@pytest.mark.parametrize("write_gate", ["sigmoid", "hard"])
def test_the_model_runs_the_ut_form_and_equals_slow_forward(mode, write_gate, monkeypatch):
    """BDH's delta rule in its parallel and chunked passes takes the UT form (`choose`: ``delta-parallel-ut``,
    ``delta-chunked``; the parallel pass in one block, `_QueryKeyBlock`, N = 32 against D = 16); its
    logits and every parameter's gradient equal `slow_forward`'s (the reference loop). fp64: ~1e-15 apart, except
    that both take the gates in fp32 as the model does (bound 1e-9)."""
    model = tiny_model(seed=2, n_layer=2, state_write="delta", write_gate=write_gate, chunk_size=4).double()
    assert model.kernels(Pass(mode, 0, 11)).choice.attention == (
        "delta-parallel-ut" if mode == "parallel" else "delta-chunked"
    )
    calls = []
    block = delta_ut_module._QueryKeyBlock.apply
    monkeypatch.setattr(delta_ut_module._QueryKeyBlock, "apply", lambda *a: calls.append(1) or block(*a))
    idx = torch.randint(0, 256, (2, 11), generator=torch.Generator().manual_seed(1))
    ours, ours_grads = logits_and_grads(model, idx, mode)
    assert len(calls) == (2 if mode == "parallel" else 0)  # a block per layer
    ref, ref_grads = logits_and_grads(model, idx, model.slow_forward)
    assert rel_err(ours, ref) < 1e-9
    for name, grad in ours_grads.items():
        assert rel_err(grad, ref_grads[name]) < 1e-9, name


def test_a_carried_state_reads_as_one_pass():
    """Reading a sequence in steps of 5 tokens through the state (the long read's path) gives the logits of one
    pass over it (fp64; bound 1e-9 as above)."""
    model = tiny_model(seed=4, n_layer=2, state_write="delta", write_gate="hard", chunk_size=4).double()
    idx = torch.randint(0, 256, (1, 17), generator=torch.Generator().manual_seed(2))
    with torch.no_grad():
        whole = model(idx)
        state, parts = model.init_state(1), []
        for s in range(0, 17, 5):
            logits, state = model.step(idx[:, s : s + 5], state)
            parts.append(logits)
    assert rel_err(torch.cat(parts, dim=1), whole) < 1e-9


@pytest.mark.parametrize(
    "options, query_keys",
    [({}, True), ({"separate_keys": True}, False), ({"write_keys": "centred"}, False), ({"write_topk": 3}, False)],
)
def test_the_model_makes_its_keys_from_the_queries_only_where_they_are_the_unit_queries(options, query_keys):
    """``query_keys`` (the UT form builds the keys from one Gram Q Q^T) only for unit keys of the queries; keys of
    their own or shaped write keys are read as given. Either way the logits and gradients equal `slow_forward`'s
    (fp64, bound 1e-9 as above)."""
    model = tiny_model(seed=5, n_layer=2, state_write="delta", chunk_size=4, **options).double()
    assert model.kernels(Pass("chunked", 0, 9)).choice.query_keys is query_keys
    idx = torch.randint(0, 256, (2, 9), generator=torch.Generator().manual_seed(3))
    ours, ours_grads = logits_and_grads(model, idx, "chunked")
    ref, ref_grads = logits_and_grads(model, idx, model.slow_forward)
    assert rel_err(ours, ref) < 1e-9
    for name, grad in ours_grads.items():
        assert rel_err(grad, ref_grads[name]) < 1e-9, name
