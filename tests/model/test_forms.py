"""The model's three attention forms give the same logits and gradients (fp32), and the recurrent
interface (init_state / step) continues a sequence exactly."""

import pytest
import torch

from bdh import BDH

from .helpers import config_id, logits_and_grads, random_configs, rel_err, tiny_config


@pytest.mark.parametrize("case", random_configs(), ids=config_id)
def test_three_forms_equal_the_reference_forward_in_logits_and_gradients(case):
    """Every form against `BDH.slow_forward` (Eq. 8 in plain PyTorch) over random configs: each positional scheme,
    damping on and off, T not a multiple of the chunk. fp32: the same sums in other orders (blocks, chunks, token
    by token, the kernels' fused passes), a few ulps carried through up to three layers, stay well under 1e-5."""
    case = dict(case)
    B, T = case.pop("batch"), case.pop("T")
    torch.manual_seed(0)
    model = BDH(tiny_config(**case))
    idx = torch.randint(0, model.config.vocab_size, (B, T))
    ref_logits, ref_grads = logits_and_grads(model, idx, model.slow_forward)
    for form in ("parallel", "chunked", "recurrent"):
        logits, grads = logits_and_grads(model, idx, form)
        assert rel_err(logits, ref_logits) <= 1e-5, form
        for name in ref_grads:
            assert rel_err(grads[name], ref_grads[name]) <= 1e-5, (form, name)


@pytest.mark.parametrize("damping", [None, "alibi"])
def test_the_bidirectional_form_equals_the_reference_forward(damping):
    """causal=False (parallel only): every tau, damped by u^|t - tau|; fp32 as above."""
    torch.manual_seed(0)
    model = BDH(tiny_config(causal=False, damping=damping))
    idx = torch.randint(0, 256, (2, 9))
    ref_logits, ref_grads = logits_and_grads(model, idx, model.slow_forward)
    logits, grads = logits_and_grads(model, idx, "parallel")
    assert rel_err(logits, ref_logits) <= 1e-5
    assert all(rel_err(grads[name], g) <= 1e-5 for name, g in ref_grads.items())


def test_random_configs_cover_the_hard_cases():
    cases = random_configs()
    assert any(c["T"] % c["chunk_size"] for c in cases)  # T not a multiple of the chunk
    assert {c["positional"] for c in cases} == {"rope", "rope-standard", "none"}
    assert {c["damping"] for c in cases} == {None, 0.9, "alibi"}
    assert all(c["batch"] > 1 for c in cases)


@pytest.mark.parametrize("form", ["parallel", "chunked", "recurrent"])
@pytest.mark.parametrize("damping", [None, "alibi"])
def test_step_by_pieces_continues_exactly(form, damping):
    model = BDH(tiny_config(attention=form, damping=damping))
    idx = torch.randint(0, 256, (2, 17))
    full = model(idx)
    state = model.init_state(2)
    pieces = []
    logits, state = model.step(idx[:, :6], state)  # a prefill chunk
    pieces.append(logits)
    for t in range(6, 10):  # single tokens
        logits, state = model.step(idx[:, t], state)
        pieces.append(logits.unsqueeze(1))
    logits, state = model.step(idx[:, 10:], state, mode="chunked")
    pieces.append(logits)
    assert state.pos == 17
    assert rel_err(torch.cat(pieces, dim=1), full) <= 1e-5


def test_step_does_not_modify_the_input_state():
    model = BDH(tiny_config())
    state = model.init_state(1)
    _, s1 = model.step(torch.tensor([3]), state)
    assert torch.all(state.rho == 0) and state.pos == 0
    assert s1.pos == 1 and s1.rho.abs().sum() > 0


def test_truncated_bptt_windows_carry_the_state():
    """Two windows through step() with the state carried equal one long window (the TBPTT building block)."""
    model = BDH(tiny_config(attention="chunked"))
    idx = torch.randint(0, 256, (2, 20))
    l1, s = model.step(idx[:, :10], model.init_state(2))
    l2, _ = model.step(idx[:, 10:], s.detach())
    assert rel_err(torch.cat([l1, l2], 1), model(idx)) <= 1e-5


def test_detach_kv_keeps_values_and_changes_gradients():
    model = BDH(tiny_config())
    idx = torch.randint(0, 256, (2, 9))
    a = model(idx)
    a.sum().backward()
    g_full = model.Dx.grad.clone()
    model.zero_grad()
    b = model(idx, detach_kv=True)
    b.sum().backward()
    assert torch.equal(a, b)  # exact: detach() changes no value and no kernel of the forward pass
    assert not torch.allclose(g_full, model.Dx.grad)


def test_bidirectional_model_refuses_state():
    model = BDH(tiny_config(causal=False))
    with pytest.raises(ValueError, match="bidirectional"):
        model.step(torch.tensor([1]), model.init_state(1))


def test_state_shape_mismatch_is_reported():
    model = BDH(tiny_config())
    with pytest.raises(ValueError, match="state rho has shape"):
        model.step(torch.tensor([[1, 2]]), model.init_state(3))
