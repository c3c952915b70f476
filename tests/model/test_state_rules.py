"""The state options beyond Eq. 8's fixed U: a learned U (``learn_damping``), a retention per token
(``decay_gate``) and the delta-rule write (``state_write: delta``, its ``write_gate`` sigmoid or hard). Their three
attention forms equal the loop of `naive_state_rule` and the model's `slow_forward` in values and
gradients, a sequence read in pieces through the state equals the whole, and bad values are refused in one line."""

import math

import pytest
import torch
import torch.nn.functional as F

from bdh import BDH, BDHConfig
from bdh.errors import UserError
from bdh.model import hard_read
from bdh.model.config import DECAY_GATE_HALF_LIFE, LEARNED_MAX_HALF_LIFE
from bdh.model.kernels import Pass, choose
from bdh.model.kernels.naive import naive_linear_attention, naive_state_rule
from bdh.model.kernels.pytorch import state_rules
from bdh.model.kernels.pytorch.state_rules import unit_keys

from .helpers import attention_inputs, logits_and_grads, rel_err, tiny_config, values_and_grads

#: the option sets the model tests run: each option alone and combined, with other positional schemes and ablations
CASES = [
    dict(damping="local-global", learn_damping=True),
    dict(decay_gate=True),
    dict(decay_gate=True, damping="alibi", learn_damping=True, positional="none"),
    dict(state_write="delta"),
    dict(state_write="delta", damping=0.9, positional="rope-standard"),
    dict(state_write="delta", decay_gate=True, damping="local-global", learn_damping=True),
    dict(state_write="delta", decay_gate=True, separate_keys=True, unshared_layers=True, positional="none"),
    dict(state_write="delta", write_gate="hard", damping="local-global", positional="none"),
]


def _id(case: dict) -> str:
    return "-".join(f"{k}={v}" for k, v in case.items())


def _rule_inputs(seed: int = 0, B: int = 2, H: int = 3, T: int = 11):
    """log u_t in [log sigmoid(-1), 0) and b_t in (0, 1), float64, per sequence, head and token."""
    g = torch.Generator().manual_seed(seed + 1)
    log_g = F.logsigmoid(torch.randn(B, H, T, generator=g, dtype=torch.float64) + 2)
    beta = torch.sigmoid(torch.randn(B, H, T, generator=g, dtype=torch.float64))
    return log_g, beta


@pytest.mark.parametrize("with_state", [False, True])
def test_the_loop_is_eq_4_and_the_product_of_the_retentions(with_state):
    """The reference loop against two sums written independently of it (float64, 1e-12: the same few products in
    another order): with U's constant u_h, Eq. 4 term by term (`naive_linear_attention`); with a retention per token
    from an empty state, a_t = sum_{tau<t} prod_{tau<=j<t} u_j (q_t . k_tau) v_tau."""
    q, k, v, S0 = attention_inputs(B=1, H=2, T=6, with_state=with_state)
    u = torch.tensor([0.9, 0.6], dtype=torch.float64)
    log_g = torch.log(u).view(1, -1, 1).expand(1, 2, 6)
    out, _ = naive_state_rule(q, k, v, log_g=log_g, state=S0)
    assert rel_err(out, naive_linear_attention(q, k, v, retention=u, state=S0)) <= 1e-12
    if with_state:
        return
    log_g, _ = _rule_inputs(B=1, H=2, T=6)
    t = torch.arange(6)
    between = (t.view(1, -1, 1) <= t.view(1, 1, -1)) & (t.view(1, 1, -1) < t.view(-1, 1, 1))  # [t, tau, j]
    decay = torch.exp(torch.einsum("bhj,stj->bhst", log_g, between.double()))  # prod_j u_j
    want = (decay * (t.view(-1, 1) > t.view(1, -1)) * (q @ k.mT)) @ v
    assert rel_err(naive_state_rule(q, k, v, log_g=log_g)[0], want) <= 1e-12


@pytest.mark.parametrize("delta", [False, True])
@pytest.mark.parametrize("gated", [False, True])
@pytest.mark.parametrize("with_state", [False, True])
@pytest.mark.parametrize("form", ["parallel", "chunked"])
def test_state_rule_forms_equal_the_loop(form, with_state, gated, delta):
    """float64 against the token-by-token loop, from a carried state or none, T = 11 over chunks of 4: the same sums
    in other orders (and a triangular solve for the delta rule), far under 1e-10."""
    q, k, v, S0 = attention_inputs(with_state=with_state)
    k = unit_keys(k)
    log_g, beta = _rule_inputs()
    log_g, beta = (log_g if gated else None), (beta if delta else None)
    options = {"chunk_size": 4} if form == "chunked" else {}
    out, after = state_rules.FORMS[form](q, k, v, log_g=log_g, beta=beta, state=S0, need_state=True, **options)
    ref, ref_after = naive_state_rule(q, k, v, log_g=log_g, beta=beta, state=S0, need_state=True)
    assert rel_err(out, ref) <= 1e-10
    assert rel_err(after, ref_after) <= 1e-10


@pytest.mark.parametrize("delta", [False, True])
def test_state_rule_forms_have_the_same_gradients(delta):
    """Gradients of q, k, v, log u_t, b_t and the state through each form equal the recurrent form's (float64, as
    above, 1e-9: the backward of the solve and of the cumulative sums adds a few more roundings)."""
    q, k, v, S0 = attention_inputs(with_state=True)
    log_g, beta = _rule_inputs()
    weight = torch.linspace(-1, 1, q.shape[0] * q.shape[1] * q.shape[2] * v.shape[-1]).view(*q.shape[:3], -1)

    def run(form):
        def fn(q, k, v, log_g, beta, S0):
            out, _ = state_rules.FORMS[form](
                q,
                unit_keys(k),
                v,
                log_g=log_g,
                beta=beta if delta else None,
                state=S0,
                **({"chunk_size": 3} if form == "chunked" else {}),
            )
            return out

        return values_and_grads(fn, q, k, v, log_g, beta, S0, weight=weight.double())

    ref_out, ref_grads = run("recurrent")
    for form in ("parallel", "chunked"):
        out, grads = run(form)
        assert rel_err(out, ref_out) <= 1e-10
        for name, g, r in zip(("q", "k", "v", "log_g", "beta", "S0"), grads, ref_grads):
            if r is not None:
                assert rel_err(g, r) <= 1e-9, (form, name)


def test_the_delta_rule_replaces_what_a_key_holds():
    """b = 1 and a unit key: the second write of the same key replaces the first value (the additive rule sums
    them); an orthogonal key's value stays."""
    k = torch.tensor([[1.0, 0.0, 0.0], [0.0, 1.0, 0.0], [1.0, 0.0, 0.0]]).view(1, 1, 3, 3)
    v = torch.tensor([[1.0, 2.0], [5.0, 5.0], [3.0, -1.0]]).view(1, 1, 3, 2)
    beta = torch.ones(1, 1, 3)
    for form in ("parallel", "chunked", "recurrent"):
        options = {"chunk_size": 2} if form == "chunked" else {}
        _, S = state_rules.FORMS[form](k, k, v, beta=beta, need_state=True, **options)
        assert torch.allclose(S[0, 0], torch.tensor([[3.0, -1.0], [5.0, 5.0], [0.0, 0.0]]), atol=1e-6), form
        _, S_add = state_rules.FORMS[form](k, k, v, need_state=True, **options)
        assert torch.allclose(S_add[0, 0, 0], torch.tensor([4.0, 1.0]), atol=1e-6), form


@pytest.mark.parametrize("form", ["parallel", "chunked", "recurrent"])
def test_a_shut_hard_gate_writes_nothing(form):
    """write_gate hard: a head whose gate logit is <= -3 on every token has b_t = 0 exactly, so its state stays the
    state it started from, whatever it reads (the sigmoid at the same logit, b = 0.018, writes); an open head
    writes."""
    torch.manual_seed(0)
    model = BDH(tiny_config(state_write="delta", write_gate="hard", positional="none", attention=form)).eval()
    soft = BDH(tiny_config(state_write="delta", positional="none", attention=form)).eval()
    soft.load_state_dict(model.state_dict())
    with torch.no_grad():
        for m in (model, soft):
            m.write_w.zero_()
            m.write_b.copy_(torch.tensor([-4.0, 0.5]))
        idx = torch.randint(0, 256, (2, 12))
        start = model.init_state(2)
        start.rho.normal_()
        _, after = model.step(idx, start.clone())
        _, after_soft = soft.step(idx, start)
    assert torch.equal(after.rho[:, :, 0], start.rho[:, :, 0])
    assert (after.rho[:, :, 1] - start.rho[:, :, 1]).abs().max() > 1e-3
    assert (after_soft.rho[:, :, 0] - start.rho[:, :, 0]).abs().max() > 1e-4


def test_the_hard_read_is_a_copy_with_the_same_weights():
    """`BDH.hard_gated`: the same weights, dtype and mode in a model whose config says ``write_gate: hard``; the
    model it came from is unchanged; it reads what a model built with the hard gate reads (same logits to the
    digit: the same computation), and differs from the sigmoid where the gate's logit is below -3."""
    torch.manual_seed(0)
    soft = BDH(tiny_config(state_write="delta", positional="none")).double().eval()
    with torch.no_grad():
        soft.write_b.copy_(torch.tensor([-4.0, 0.5]))
    twin = soft.hard_gated()
    assert soft.soft_gated and not twin.soft_gated
    assert (soft.config.write_gate, twin.config.write_gate) == ("sigmoid", "hard")
    assert all(torch.equal(a, b) for a, b in zip(soft.state_dict().values(), twin.state_dict().values()))
    assert next(twin.parameters()).dtype == torch.float64 and not twin.training
    built = BDH(tiny_config(state_write="delta", positional="none", write_gate="hard")).double().eval()
    built.load_state_dict(soft.state_dict())
    idx = torch.randint(0, 256, (2, 16))
    with torch.no_grad():
        assert torch.equal(twin(idx), built(idx))
        assert (twin(idx) - soft(idx)).abs().max() > 1e-6
    assert soft.train().hard_gated().training


@pytest.mark.parametrize(
    ("options", "says"),
    [(dict(), "state_write: add"), (dict(state_write="delta", write_gate="hard"), "write_gate: hard")],
)
def test_only_a_sigmoid_gated_delta_rule_has_a_hard_read(options, says):
    model = BDH(tiny_config(**options))
    assert not model.soft_gated
    with pytest.raises(UserError, match=f"sigmoid gate .*{says}"):
        model.hard_gated()


def test_hard_read_is_the_twin_in_eval_mode_and_refuses_other_models():
    """`bdh.model.hard_read`, the one door the CLI, the length experiment and the benchmarks take: the twin of
    `BDH.hard_gated` in eval mode whatever the model's mode; a model that is not a BDH, or a BDH without the sigmoid
    gate, gets the one-line `UserError`."""
    torch.manual_seed(0)
    soft = BDH(tiny_config(state_write="delta", positional="none")).train()
    hard = hard_read(soft)
    assert hard.config.write_gate == "hard" and not hard.training and soft.training
    assert all(torch.equal(a, b) for a, b in zip(soft.state_dict().values(), hard.state_dict().values()))
    with pytest.raises(UserError, match=r"^a hard read needs a BDH; this model is a Linear$"):
        hard_read(torch.nn.Linear(2, 2))
    with pytest.raises(UserError, match="sigmoid gate .*state_write: add"):
        hard_read(BDH(tiny_config()))


def test_a_long_parallel_decay_neither_overflows_nor_loses_its_digits():
    """Strong decay over T = 1024 in one block: the masked exp never sees the positive exponents above the
    diagonal (no inf, no NaN in values or gradients), and it equals the chunked form (fp32, 1e-5)."""
    q, k, v, _ = attention_inputs(B=1, H=2, T=1024, N=4, D=3)
    q, k, v = q.float(), unit_keys(k).float(), v.float()
    log_g = torch.full((1, 2, 1024), -0.5, requires_grad=True)
    out, _ = state_rules.parallel(q, k, v, log_g=log_g)
    out.sum().backward()
    assert torch.isfinite(out).all() and torch.isfinite(log_g.grad).all()
    chunked, _ = state_rules.chunked(q, k, v, chunk_size=64, log_g=log_g.detach())
    assert rel_err(out.detach(), chunked) <= 1e-5


@pytest.mark.parametrize("case", CASES, ids=_id)
def test_three_forms_equal_the_reference_forward(case):
    """Every form against `BDH.slow_forward` (its own loop for the delta rule, the T x T matrix of products of u_t
    otherwise), T = 13 over chunks of 5. fp32: logits well under 1e-5 as for Eq. 8; the gradients of the state
    parameters (the solve, exp of cumulative sums) measured a few 1e-6, so 5e-5."""
    torch.manual_seed(0)
    model = BDH(tiny_config(**case))
    idx = torch.randint(0, 256, (2, 13))
    ref_logits, ref_grads = logits_and_grads(model, idx, model.slow_forward)
    rules = {"decay_logit", "decay_w", "decay_b", "write_w", "write_b"} & set(ref_grads)
    assert rules and all(ref_grads[name].abs().max() > 0 for name in rules)  # the new parameters learn
    for form in ("parallel", "chunked", "recurrent"):
        logits, grads = logits_and_grads(model, idx, form)
        assert rel_err(logits, ref_logits) <= 1e-5, form
        for name in ref_grads:
            assert rel_err(grads[name], ref_grads[name]) <= 5e-5, (form, name)


@pytest.mark.parametrize("case", CASES[:1] + CASES[3:4] + CASES[5:6], ids=_id)
@pytest.mark.parametrize("form", ["parallel", "chunked", "recurrent"])
def test_a_sequence_read_in_pieces_through_the_state_equals_the_whole(case, form):
    """A prefill, single tokens in place, then a chunk: the logits of the whole sequence (fp32, 1e-5)."""
    torch.manual_seed(0)
    model = BDH(tiny_config(attention=form, **case)).eval()
    idx = torch.randint(0, 256, (2, 17))
    full = model(idx)
    state = model.init_state(2)
    logits, state = model.step(idx[:, :6], state)
    pieces = [logits]
    with torch.no_grad():
        for t in range(6, 10):
            logits, state = model.step(idx[:, t], state, inplace=True)
            pieces.append(logits.unsqueeze(1))
    logits, state = model.step(idx[:, 10:], state, mode="chunked")
    pieces.append(logits)
    assert state.pos == 17
    assert rel_err(torch.cat(pieces, dim=1), full) <= 1e-5


def test_the_parameters_start_where_the_config_says_and_are_counted():
    cfg = tiny_config(damping="local-global", learn_damping=True, decay_gate=True, state_write="delta")
    model = BDH(cfg)
    u = torch.sigmoid(model.decay_logit.double())
    cap = 2.0 ** (-1.0 / LEARNED_MAX_HALF_LIFE)
    assert torch.allclose(u, torch.tensor([min(r, cap) for r in cfg.retention()], dtype=torch.float64), atol=1e-7)
    gate = torch.tensor(2.0 ** (-1 / DECAY_GATE_HALF_LIFE), dtype=torch.float64)
    assert torch.allclose(torch.sigmoid(model.decay_b.double()), gate)
    assert torch.allclose(model.write_b, torch.zeros(2))
    H, D = cfg.n_head, cfg.n_embd
    assert model.num_params() == cfg.num_params() == tiny_config().num_params() + H + 2 * H * (D + 1)
    assert BDH(tiny_config()).decay_logit is None and math.isclose(cap, 1 - 6.6e-7, rel_tol=1e-7)


def test_the_kernels_are_chosen_for_the_rule():
    """Gated and delta rules run their PyTorch forms on any device (the delta rule's parallel mode the chunked UT
    form, `delta_ut`); a learned U trains through the kernels that differentiate it (not the shared-keys, lean or
    Triton kernels); 'sparse' refuses the token rules."""
    kw = dict(positional="none", log_u=torch.zeros(2), causal=True, chunk_size=4, dropout=0.0, dropout_rng="auto")
    kw.update(training=True, device=torch.device("cpu"))
    for mode in ("parallel", "chunked", "recurrent"):
        for rule in ("gated", "delta"):
            want = "delta-parallel-ut" if (rule, mode) == ("delta", "parallel") else f"{rule}-{mode}"
            assert choose(Pass(mode, 0, 8), autograd=True, state_rule=rule, **kw).attention == want
    assert choose(Pass("parallel", 0, 8), autograd=True, state_rule="learned", **kw).attention == "parallel"
    assert choose(Pass("chunked", 0, 8), autograd=True, state_rule="learned", **kw).attention == "chunked"
    assert choose(Pass("parallel", 0, 8), autograd=True, **kw).attention == "shared-keys"
    assert choose(Pass("chunked", 0, 8), autograd=False, state_rule="learned", **kw).attention == "chunked"
    with torch.no_grad(), pytest.raises(UserError, match="sparse"):
        choose(
            Pass("sparse", 0, 1, carried=True, inplace=True),
            autograd=False,
            state_rule="delta",
            **{**kw, "log_u": None},
        )


@pytest.mark.parametrize(
    "fields, field",
    [
        (dict(learn_damping=True), "learn_damping"),
        (dict(damping=0.9, learn_damping="yes"), "learn_damping"),
        (dict(decay_gate=1), "decay_gate"),
        (dict(decay_gate=True, causal=False), "decay_gate"),
        (dict(state_write="delta", causal=False), "state_write"),
        (dict(state_write="replace"), "state_write"),
        (dict(write_gate="hard"), "write_gate"),
        (dict(state_write="delta", write_gate="soft"), "write_gate"),
    ],
)
def test_bad_values_are_refused_in_one_line(fields, field):
    with pytest.raises(UserError, match=field) as err:
        BDHConfig(n_embd=16, n_neurons=64, n_head=2, **fields)
    assert "\n" not in str(err.value)


def test_tools_that_read_the_papers_state_refuse_the_rules():
    cfg = tiny_config(state_write="delta")
    assert cfg.state_rules() == ("state_write",) and tiny_config().state_rules() == ()
    with pytest.raises(UserError, match="state_write"):
        cfg.require_paper_layer("the graph form")


@pytest.mark.parametrize("case", CASES[1:2] + CASES[5:7] + [dict(separate_keys=True)], ids=_id)
def test_captured_scores_give_the_attention_outputs(case):
    """With a retention per token, the delta rule or separate keys, the captured (T, T) scores times the values are
    a (fp32, 1e-5)."""
    model = BDH(tiny_config(**case)).eval()
    idx = torch.randint(0, 256, (2, 9))
    values = []
    with torch.no_grad():
        _, cap = model(idx, capture=True, hook=lambda m, layer, act: values.append(act.values))
    for scores, a, v in zip(cap.attention, cap.a, values):
        assert rel_err(scores @ v, a) <= 1e-5
