"""Recorded dynamics and sigma recovered by Eq. 16, against the graph model and the model's own state."""

import pytest
import torch

from bdh import BDH, BDHConfig
from bdh.analysis.record import attention_state, head_neurons, record, recover_sigma, top_sigma
from bdh.model import graph


def _model(**over):
    torch.manual_seed(0)
    fields = dict(n_layer=3, n_embd=16, n_head=2, n_neurons=64, dropout=0.0)
    fields.update(over)
    model = BDH(BDHConfig(**fields)).eval()
    with torch.no_grad():
        for p in model.parameters():
            p.mul_(10)
    return model


def test_recording_matches_the_forward_pass_and_chunking_changes_nothing():
    model = _model()
    idx = torch.randint(0, 256, (2, 23))
    one = record(model, idx, chunk_size=64)
    chunked = record(model, idx, chunk_size=5)
    logits, cap = model(idx, capture=True)
    assert torch.allclose(one.logits, logits, atol=1e-5)
    for layer in range(3):
        assert torch.allclose(one.x[layer], cap.x[layer]) and torch.allclose(one.y[layer], cap.y[layer])
        for name in ("x", "y", "a", "values"):
            a, b = getattr(one, name)[layer], getattr(chunked, name)[layer]
            # chunks of 5 vs one pass: fp32 sums in another order, errors ~3e-7 of the tensor's largest
            # entry (measured; 'a' reaches 1e2, so near-zero entries of 'a' differ by ~3e-5, more than
            # a fixed atol of 1e-5 allows); 1e-5 of the scale leaves 20x, a state lost between chunks
            # changes entries by the scale itself
            assert torch.allclose(a, b, rtol=1e-4, atol=1e-5 * b.abs().max().item()), name
    p = torch.softmax(logits[0, 3], -1)[idx[0, 4]]
    assert torch.isclose(one.surprisal[0, 3], -torch.log2(p), atol=1e-4)
    assert torch.isnan(one.surprisal[:, -1]).all()


@pytest.mark.parametrize("damping", [None, "alibi"])
@pytest.mark.parametrize("positional", ["none", "rope"])
def test_attention_state_equals_the_models_recurrent_state(positional, damping):
    model = _model(positional=positional, damping=damping)
    idx = torch.randint(0, 256, (1, 17))
    rec = record(model, idx)
    _, state = model.step(idx[:, :11], model.init_state(1))
    for layer in range(3):
        for head in range(2):
            S = attention_state(rec, layer, head, t=11)
            ref = state.rho[layer, 0, head]
            assert torch.allclose(S, ref, rtol=1e-4, atol=1e-5 * ref.abs().max().item())


def test_sigma_by_eq16_equals_the_graph_models_sigma():
    """Eq. 16 applied to the graph model's own x and y reproduces its sigma, rotation and damping included."""
    model = _model(positional="rope", damping=0.9).double()
    g = graph.from_gpu(model)
    y0 = torch.rand(1, 9, 64, dtype=torch.float64) * (torch.rand(1, 9, 64) < 0.3)
    trace = g.run(y0)

    from bdh.analysis.record import Recording  # a recording made of the graph run's x and y

    H, N = 2, 32
    split = lambda a: a.view(1, 9, H, N).transpose(1, 2).float()  # noqa: E731
    rec = Recording(
        tokens=torch.zeros(1, 9, dtype=torch.long),
        x=[split(trace.x[layer]) for layer in range(3)],
        y=[split(trace.y[layer]) for layer in range(3)],
        a=[None] * 3,
        values=[None] * 3,
        logits=torch.zeros(1, 9, 1),
        surprisal=torch.zeros(1, 9),
        config=model.config,
        freqs=model.freqs.float(),
        log_u=model.log_u.float(),
    )
    for layer in (1, 2):
        sig = recover_sigma(rec, layer, rotate=True)
        ref = trace.sigma[layer, 0].float()  # the graph's sigma after the last token = sigma_{t-1} at t = 9
        assert torch.allclose(sig, ref, rtol=1e-4, atol=1e-4 * ref.abs().max().item())


def test_blocks_and_top_entries_without_the_full_matrix():
    model = _model(positional="rope")
    rec = record(model, torch.randint(0, 256, (1, 30)))
    full = recover_sigma(rec, 2)
    rows, cols = torch.tensor([3, 40, 7]), head_neurons(model.config, 1)
    assert torch.allclose(recover_sigma(rec, 2, rows=rows, cols=cols), full[rows][:, cols])
    assert torch.allclose(recover_sigma(rec, 2, t=12), recover_sigma(rec, 2, t=12, rows=torch.arange(64)))
    v, r, c = top_sigma(rec, 2, k=10, block=7)
    ref = torch.topk(full.reshape(-1), 10).values
    assert torch.allclose(v, ref) and torch.allclose(full[r, c], v)
    rot = recover_sigma(rec, 2, rotate=True)
    assert (rot < 0).any() and (full >= 0).all()  # rotation brings in negative entries, plain sigma is not
    vr, rr, cr = top_sigma(rec, 2, k=5, rotate=True, block=9)
    assert torch.allclose(vr, torch.topk(rot.reshape(-1), 5).values, atol=1e-6)


def test_errors():
    model = _model()
    rec = record(model, torch.randint(0, 256, (1, 8)), layers=[1, 2])
    with pytest.raises(ValueError, match="layer 0"):
        recover_sigma(rec, 1)  # needs y of layer 0, not recorded
    with pytest.raises(ValueError, match="outside the recording"):
        recover_sigma(rec, 2, t=20)
    with pytest.raises(ValueError, match="head 5 does not exist"):
        head_neurons(model.config, 5)
    with pytest.raises(ValueError, match="layer 7 does not exist"):
        record(model, torch.zeros(1, 3, dtype=torch.long), layers=[7])
    full = record(model, torch.randint(0, 256, (1, 8)))
    with pytest.raises(ValueError, match="no synapse state"):
        recover_sigma(full, 0)
