"""The neuron-level BDH graph model (Eq. 6) against BDH-Normfree (Eq. 7) and the Table 1 local rules."""

import itertools

import pytest
import torch

import bdh
from bdh import BDH, BDHConfig
from bdh.model import graph

CASES = list(itertools.product(["none", "rope"], [None, "alibi", 0.8], [1, 2]))


def _model(positional, damping, heads, seed=0):
    torch.manual_seed(seed)
    cfg = BDHConfig(
        n_layer=3, n_embd=8, n_head=heads, n_neurons=32, dropout=0.0, positional=positional, damping=damping
    )
    model = BDH(cfg).double()
    with torch.no_grad():  # weights large enough that the ReLUs cut and the dynamics is not trivial
        for p in model.parameters():
            p.normal_(std=0.5)
    return model


def _input(seed=1, B=2, T=7, n=32):
    g = torch.Generator().manual_seed(seed)
    return torch.rand(B, T, n, generator=g, dtype=torch.float64) * (torch.rand(B, T, n, generator=g) < 0.3)


def _rel(a, b):
    return ((a - b).abs().max() / b.abs().max()).item()


@pytest.mark.parametrize("positional, damping, heads", CASES)
def test_graph_model_equals_bdh_normfree(positional, damping, heads):
    model = _model(positional, damping, heads)
    y0 = _input()
    g = graph.from_gpu(model).run(y0)
    t = graph.normfree_gpu(model, y0)
    assert _rel(g.x, t.x) < 1e-5 and _rel(g.y, t.y) < 1e-5
    frac = (g.y > 0).double().mean().item()
    assert 0.02 < frac < 0.9  # a non-trivial, sparse-ish regime
    # Observation 4 / Eq. 9: E sigma = rho
    assert _rel(graph.sigma_to_rho(model, g.sigma), t.rho) < 1e-5


@pytest.mark.parametrize("positional, damping, heads", CASES)
def test_table1_local_rules_reproduce_eq6(positional, damping, heads):
    G = graph.from_gpu(_model(positional, damping, heads, seed=3))
    y0 = _input(seed=4)
    a, b = G.run(y0), G.run_rounds(y0)
    assert _rel(b.x, a.x) < 1e-12 and _rel(b.y, a.y) < 1e-12 and _rel(b.sigma, a.sigma) < 1e-12


def test_graphs_are_non_negative_splits_of_DE():
    model = _model("rope", None, 2)
    G = graph.from_gpu(model)
    Dx, Dy, E = graph.flat_decoders(model)
    for e, i in ((G.Gx_e, G.Gx_i), (G.Gy_e, G.Gy_i)):
        assert (e >= 0).all() and (i >= 0).all() and not ((e > 0) & (i > 0)).any()
    assert torch.allclose(G.Gx, Dx @ E) and torch.allclose(G.Gy, Dy @ E)


def test_activations_are_positive_and_y_within_x():
    model = _model("none", None, 2)
    tr = graph.from_gpu(model).run(_input())
    assert (tr.x >= 0).all() and (tr.y >= 0).all()
    assert ((tr.y > 0) <= (tr.x > 0)).all()
    assert (tr.x[1:] >= tr.x[:-1] - 1e-12).all()  # x only grows with depth (Eq. 6: thresholded increments)


def test_hebbian_orientation_y_before_x_is_recalled():
    """A synapse sigma[j, i] grows when y-neuron j fires (layer l-1) and x-neuron i then fires (layer l)."""
    n = 4
    eye = torch.eye(n, dtype=torch.float64)
    zero = torch.zeros(n, n, dtype=torch.float64)
    G = graph.BDHGraph(eye, zero, zero, zero, n_layer=1)
    y0 = torch.zeros(1, 1, n, dtype=torch.float64)
    y0[0, 0, 2] = 1.0  # y-neuron 2 fires; G_x = I makes x-neuron 2 fire too
    s = G.run(y0).sigma[0, 0]
    assert s[2, 2] == 1.0 and s.sum() == 1.0
    G2 = graph.BDHGraph(torch.roll(eye, 1, 0), zero, zero, zero, n_layer=1)  # edge i -> i+1
    s2 = G2.run(y0).sigma[0, 0]
    assert s2[2, 3] == 1.0 and s2.sum() == 1.0  # row = the y-neuron that fired, column = the x-neuron


def test_synapse_mask_gs_restricts_the_write():
    model = _model("none", None, 1)
    G = graph.from_gpu(model)
    G.Gs = torch.zeros(32, 32, dtype=torch.float64)
    G.Gs[:16, :16] = 1
    sigma = G.run(_input()).sigma
    assert sigma[..., 16:, :].abs().sum() == 0 and sigma[..., :, 16:].abs().sum() == 0
    assert sigma[..., :16, :16].abs().sum() > 0


def test_refusals():
    with pytest.raises(ValueError, match="n x n"):
        graph.from_gpu(BDH(BDHConfig(n_layer=1, n_embd=8, n_head=1, n_neurons=64)), max_neurons=32)
    with pytest.raises(ValueError, match="bidirectional"):
        graph.from_gpu(BDH(BDHConfig(n_layer=1, n_embd=8, n_head=1, n_neurons=16, causal=False)))
    G = graph.from_gpu(_model("none", None, 1))
    with pytest.raises(ValueError, match="non-negative"):
        G.run(-torch.ones(1, 2, 32, dtype=torch.float64))
    with pytest.raises(ValueError, match="must be \\(batch, time, 32\\)"):
        G.run(torch.ones(1, 2, 31, dtype=torch.float64))
    z = torch.zeros(4, 4)
    with pytest.raises(ValueError, match="non-negative"):
        graph.BDHGraph(-torch.ones(4, 4), z, z, z, n_layer=1)


def test_exposed_as_bdh_graph():
    assert bdh.graph.from_gpu is graph.from_gpu
