"""The delta rule's annealed write gate (``write_gate: annealed``, ours): b_t = (1 - m) sigmoid(z) + m hardsigmoid(z)
with m = min(1, s / gate_anneal_steps) after s training passes. The gate against its definition, every attention form
against the reference forward in values and gradients at an m between, the carried state against the whole
sequence, the count of passes, the hard gate reached exactly, and bad values refused in one line."""

import dataclasses

import pytest
import torch
import torch.nn.functional as F

from bdh import BDH, BDHConfig
from bdh.errors import UserError

from .helpers import logits_and_grads, rel_err, tiny_config

ANNEALED = dict(state_write="delta", write_gate="annealed", gate_anneal_steps=8)
CASES = [
    dict(positional="none", damping="local-global"),
    dict(decay_gate=True, damping=0.9, write_keys="signed"),
]


def _at(model: BDH, passes: int) -> BDH:
    model.gate_passes.fill_(passes)
    return model


def test_the_gate_is_its_definition():
    """At 3 of 8 passes (m = 3/8) the gates are the mixture of the two gates' formulas: fp64 here, but the gates form
    their logits in fp32 (`state_rule_gates`' .float()), so 1e-6 (fp32's 6e-8 through a sigmoid of slope <= 1/4)."""
    torch.manual_seed(0)
    model = _at(BDH(tiny_config(**ANNEALED)).double(), 3)
    with torch.no_grad():
        model.write_w.normal_(std=1.0)
    v = torch.randn(2, 1, 7, 16, dtype=torch.float64)
    z = ((v.squeeze(1) @ model.write_w) + model.write_b).transpose(1, 2)
    want = (1 - 3 / 8) * torch.sigmoid(z) + 3 / 8 * F.hardsigmoid(z)
    assert model.gate_hardness() == 3 / 8
    assert rel_err(model.state_rule_gates(v)["beta"], want) <= 1e-6


@pytest.mark.parametrize("case", CASES, ids=["nopos-lg", "signed-gated"])
def test_three_forms_equal_the_reference_forward(case):
    """Every form against `BDH.slow_forward` at m = 3/8 (eval mode: no pass counted), T = 13 over chunks of 5, fp32
    with tests/model/test_state_rules.py's tolerances (the same solve and cumulative sums): logits 1e-5, grads 5e-5."""
    torch.manual_seed(0)
    model = _at(BDH(tiny_config(**ANNEALED, **case)), 3).eval()
    idx = torch.randint(0, 256, (2, 13))
    ref_logits, ref_grads = logits_and_grads(model, idx, model.slow_forward)
    assert ref_grads["write_w"].abs().max() > 0
    for form in ("parallel", "chunked", "recurrent"):
        logits, grads = logits_and_grads(model, idx, form)
        assert rel_err(logits, ref_logits) <= 1e-5, form
        for name in ref_grads:
            assert rel_err(grads[name], ref_grads[name]) <= 5e-5, (form, name)
    assert int(model.gate_passes) == 3


def test_a_sequence_read_in_pieces_through_the_state_equals_the_whole():
    """A prefill, single tokens, then a chunk through the carried state at m = 5/8: the whole sequence (fp32, 1e-5)."""
    torch.manual_seed(0)
    model = _at(BDH(tiny_config(**ANNEALED, **CASES[0])), 5).eval()
    idx = torch.randint(0, 256, (2, 15))
    full = model(idx)
    logits, state = model.step(idx[:, :6], model.init_state(2))
    pieces = [logits]
    with torch.no_grad():
        for t in range(6, 9):
            logits, state = model.step(idx[:, t], state, inplace=True)
            pieces.append(logits.unsqueeze(1))
    pieces.append(model.step(idx[:, 9:], state, mode="chunked")[0])
    assert rel_err(torch.cat(pieces, dim=1), full) <= 1e-5


def test_training_passes_move_the_gate_from_the_sigmoid_to_hard():
    """m counts training passes only; at 0 the model is the sigmoid one, past gate_anneal_steps the hard one (the same
    weights; the mixture is exactly each end, so equal logits)."""
    torch.manual_seed(0)
    model = BDH(tiny_config(**ANNEALED, **CASES[0]))
    idx = torch.randint(0, 256, (1, 9))
    ends = {}
    for gate in ("sigmoid", "hard"):
        other = BDH(dataclasses.replace(model.config, write_gate=gate, gate_anneal_steps=None)).eval()
        other.load_state_dict({k: t for k, t in model.state_dict().items() if k != "gate_passes"})
        ends[gate] = other(idx)
    model.eval()
    assert torch.equal(model(idx), ends["sigmoid"])
    model.train()
    with torch.no_grad():
        model(idx)  # no gradient: not a training pass
    for _ in range(3):
        model(idx)
    assert int(model.gate_passes) == 3
    model.gate_passes.fill_(8)
    model.eval()
    assert torch.equal(model(idx), ends["hard"])
    assert torch.equal(model.hard_gated()(idx), ends["hard"])


def test_the_count_is_saved_with_the_model(tmp_path):
    model = _at(BDH(tiny_config(**ANNEALED)), 4)
    model.save_pretrained(tmp_path)
    assert int(BDH.from_pretrained(tmp_path).gate_passes) == 4


@pytest.mark.parametrize(
    "fields, says",
    [
        (dict(state_write="delta", write_gate="annealed"), "gate_anneal_steps"),
        (dict(state_write="delta", gate_anneal_steps=10), "gate_anneal_steps"),
        (dict(state_write="delta", write_gate="annealed", gate_anneal_steps=0), "gate_anneal_steps"),
        (dict(write_gate="annealed", gate_anneal_steps=10), "state_write: delta"),
        (dict(**ANNEALED, deep_supervision=True), "deep_supervision"),
    ],
)
def test_bad_values_are_refused_in_one_line(fields, says):
    with pytest.raises(UserError, match=says) as err:
        BDHConfig(n_embd=16, n_neurons=64, n_head=2, **fields)
    assert "\n" not in str(err.value)
