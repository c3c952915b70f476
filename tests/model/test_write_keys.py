"""The delta rule's write keys (``write_keys: centred`` / ``signed``, ``write_topk``; ours): the kernels' shaping
(`shape_write_keys`, then unit keys) equals the definition (`naive_write_key`) in values and gradients; every
attention form equals the reference forward (the loop shaping each key as it writes it) and the carried state
equals the whole sequence; a top-m write corrects m rows only; bad values are refused in one line."""

import dataclasses

import pytest
import torch

from bdh import BDH, BDHConfig
from bdh.errors import UserError
from bdh.model.kernels.naive import naive_state_rule, naive_write_key
from bdh.model.kernels.pytorch.state_rules import unit_keys
from bdh.model.kernels.pytorch.write_keys import shape_write_keys

from .helpers import logits_and_grads, rel_err, tiny_config, values_and_grads

SHAPES = [dict(centred=True), dict(topk=1), dict(topk=3), dict(topk=8), dict(topk=2, heads=(0, 2))]
CASES = [
    dict(write_topk=1, positional="none", damping="local-global"),
    dict(write_topk=3, decay_gate=True, damping=0.9),
    dict(write_topk=1, write_topk_heads=(1,), write_gate="hard", positional="none", damping="local-global"),
    dict(write_keys="centred", write_gate="hard", positional="none", damping="local-global"),
    dict(write_keys="signed", positional="none", damping="local-global"),
    dict(write_keys="signed", separate_keys=True, decay_gate=True, damping=0.9),  # RoPE on the signed keys
]


def _id(case: dict) -> str:
    return "-".join(f"{k}={v}" for k, v in case.items())


@pytest.mark.parametrize("shape", SHAPES, ids=_id)
def test_the_shaped_keys_are_the_definition(shape):
    """float64, ReLU'd keys with some rows all 0 (no neuron active): the same few sums, so 1e-12 on values and on
    the gradients at the active neurons (through the kept entries only; a top-1 key is the constant one-hot, gradient
    0 both ways). At a neuron at 0 the two may keep different zeros among ties; ReLU passes no gradient there."""
    g = torch.Generator().manual_seed(0)
    k = torch.randn(2, 3, 7, 8, generator=g, dtype=torch.float64).relu()
    k[0, 0, :2] = 0.0
    weight = torch.randn(k.shape, generator=g, dtype=torch.float64)
    centred, topk, heads = shape.get("centred", False), shape.get("topk"), shape.get("heads")
    fast = values_and_grads(lambda x: unit_keys(shape_write_keys(x, **shape)), k, weight=weight)
    ref = values_and_grads(lambda x: naive_write_key(x, centred, topk, heads), k, weight=weight)
    assert rel_err(fast[0], ref[0]) <= 1e-12
    active = k > 0
    assert rel_err(fast[1][0] * active, ref[1][0] * active) <= 1e-12
    assert fast[0][0, 0, :2].abs().max() == 0  # a key with no active neuron writes nothing
    norms = fast[0][0, 1].norm(dim=-1)
    assert torch.allclose(norms, torch.ones_like(norms), atol=1e-12)


def test_centred_keys_sum_to_zero_and_top1_keys_are_one_hot():
    k = torch.randn(4, 16, dtype=torch.float64).relu() + 0.01  # every neuron active, none tied
    centred = naive_write_key(k, centred=True)
    assert centred.sum(-1).abs().max() <= 1e-12
    top1 = naive_write_key(k, topk=1)
    assert torch.equal(top1, torch.nn.functional.one_hot(k.argmax(-1), 16).double())


def test_top_k_heads_cut_those_heads_alone():
    """``heads``: the named heads' keys are cut, the others' are the plain unit keys, exactly (the same ops)."""
    k = torch.rand(2, 3, 5, 8, dtype=torch.float64)
    cut = unit_keys(shape_write_keys(k, topk=1, heads=(1,)))
    assert torch.equal(cut[:, [0, 2]], unit_keys(k)[:, [0, 2]])
    assert torch.equal(cut[:, 1], torch.nn.functional.one_hot(k[:, 1].argmax(-1), 8).double())


def test_a_top_m_write_corrects_m_rows_of_the_state():
    """One delta write of a dense key, cut to its top 2 neurons, into a full state: only those 2 rows change."""
    g = torch.Generator().manual_seed(1)
    q = torch.rand(1, 1, 1, 6, generator=g, dtype=torch.float64)
    k = torch.rand(1, 1, 1, 6, generator=g, dtype=torch.float64) + 0.1
    v = torch.randn(1, 1, 1, 4, generator=g, dtype=torch.float64)
    S0 = torch.randn(1, 1, 6, 4, generator=g, dtype=torch.float64)
    beta = torch.full((1, 1, 1), 0.7, dtype=torch.float64)
    _, S = naive_state_rule(q, k, v, beta=beta, state=S0, need_state=True, write_key=(False, 2, None))
    changed = (S - S0).abs().amax(-1).flatten() > 0
    assert changed.sum() == 2 and set(changed.nonzero().flatten().tolist()) == set(k.flatten().topk(2).indices.tolist())


@pytest.mark.parametrize("case", CASES, ids=_id)
def test_three_forms_equal_the_reference_forward(case):
    """Every form (keys shaped once, before the kernel) against `BDH.slow_forward` (shaped token by token in the
    loop), T = 13 over chunks of 5; fp32 with the tolerances of tests/model/test_state_rules.py (the same solve and
    cumulative sums): logits 1e-5, gradients 5e-5."""
    torch.manual_seed(0)
    model = BDH(tiny_config(state_write="delta", **case))
    idx = torch.randint(0, 256, (2, 13))
    ref_logits, ref_grads = logits_and_grads(model, idx, model.slow_forward)
    assert ref_grads["write_w"].abs().max() > 0 and ref_grads["Dx"].abs().max() > 0
    for form in ("parallel", "chunked", "recurrent"):
        logits, grads = logits_and_grads(model, idx, form)
        assert rel_err(logits, ref_logits) <= 1e-5, form
        for name in ref_grads:
            assert rel_err(grads[name], ref_grads[name]) <= 5e-5, (form, name)


def test_the_options_change_the_model():
    """The same weights with and without each option give other logits (the option reaches the kernels)."""
    torch.manual_seed(0)
    base = BDH(tiny_config(state_write="delta", positional="none")).eval()
    idx = torch.randint(0, 256, (1, 13))
    options = (dict(write_topk=1), dict(write_topk=1, write_topk_heads=(1,)), dict(write_keys="centred"))
    for fields in options + (dict(write_keys="signed"),):
        other = BDH(dataclasses.replace(base.config, **fields)).eval()
        other.load_state_dict(base.state_dict())
        assert rel_err(other(idx), base(idx)) > 1e-3, fields


@pytest.mark.parametrize("case", CASES[::2], ids=_id)
@pytest.mark.parametrize("form", ["parallel", "chunked", "recurrent"])
def test_a_sequence_read_in_pieces_through_the_state_equals_the_whole(case, form):
    """A prefill, single tokens, then a chunk, through the carried state: the whole sequence's logits (fp32, 1e-5)."""
    torch.manual_seed(0)
    model = BDH(tiny_config(state_write="delta", attention=form, **case)).eval()
    idx = torch.randint(0, 256, (2, 15))
    full = model(idx)
    state = model.init_state(2)
    logits, state = model.step(idx[:, :6], state)
    pieces = [logits]
    with torch.no_grad():
        for t in range(6, 9):
            logits, state = model.step(idx[:, t], state, inplace=True)
            pieces.append(logits.unsqueeze(1))
    logits, state = model.step(idx[:, 9:], state, mode="chunked")
    pieces.append(logits)
    assert rel_err(torch.cat(pieces, dim=1), full) <= 1e-5


def test_signed_keys_are_the_keys_before_their_relu():
    """The written keys of ``write_keys: signed`` are R (Dx v) / |R (Dx v)|, with negative entries, while the queries
    stay R ReLU(Dx v) (the hooked activations; fp32, one product each way: 1e-6)."""
    torch.manual_seed(0)
    model = BDH(tiny_config(state_write="delta", write_keys="signed", positional="none")).eval()
    seen = []
    model(torch.randint(0, 256, (1, 9)), hook=lambda m, layer, act: seen.append(act))
    act = seen[0]
    z = act.values @ model.Dx
    assert rel_err(act.keys, unit_keys(z)) <= 1e-6
    assert (act.keys < 0).any() and (act.xr >= 0).all()


def test_the_hard_read_keeps_the_write_keys():
    model = BDH(tiny_config(state_write="delta", write_topk=2))
    assert model.hard_gated().config.write_topk == 2
    with pytest.raises(UserError, match="needs unit write keys"):
        model.hard_gated(top1_heads=(1,))


def test_the_hard_read_with_top1_heads_is_that_model():
    """``hard_gated(top1_heads)``: the same weights in the model with ``write_gate: hard``, ``write_topk: 1`` in
    those heads, read by any form; against that model's reference loop (fp32, the tolerance of the forms: 1e-5)."""
    torch.manual_seed(0)
    model = BDH(tiny_config(state_write="delta", positional="none", damping="local-global")).eval()
    twin = model.hard_gated(top1_heads=(1,))
    assert (twin.config.write_gate, twin.config.write_topk, twin.config.write_topk_heads) == ("hard", 1, (1,))
    assert model.config.write_topk is None  # the model read is kept
    idx = torch.randint(0, 256, (2, 13))
    with torch.no_grad():
        assert rel_err(twin(idx), twin.slow_forward(idx)) <= 1e-5
        assert rel_err(twin(idx), model.hard_gated()(idx)) > 1e-3


@pytest.mark.parametrize(
    "fields, says",
    [
        (dict(write_topk=2), "state_write: delta"),
        (dict(write_keys="centred"), "state_write: delta"),
        (dict(state_write="delta", write_topk=0), "write_topk"),
        (dict(state_write="delta", write_topk=33), "at most the 32 neurons"),
        (dict(state_write="delta", write_keys="rectified"), "write_keys"),
        (dict(write_keys="signed"), "state_write: delta"),
        (dict(state_write="delta", write_keys="signed", write_topk=1), "needs write_keys: unit"),
        (dict(state_write="delta", write_keys="centred", write_topk=1), "needs write_keys: unit"),
        (dict(state_write="delta", write_topk_heads=(1,)), "set write_topk too"),
        (dict(state_write="delta", write_topk=1, write_topk_heads=(2,)), "distinct heads of 0..1"),
        (dict(state_write="delta", write_topk=1, write_topk_heads=(1, 1)), "distinct heads"),
        (dict(state_write="delta", write_topk=1, write_topk_heads=(-1,)), "write_topk_heads"),
    ],
)
def test_bad_values_are_refused_in_one_line(fields, says):
    with pytest.raises(UserError, match=says) as err:
        BDHConfig(n_embd=16, n_neurons=64, n_head=2, **fields)
    assert "\n" not in str(err.value)
