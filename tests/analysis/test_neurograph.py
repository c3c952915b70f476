"""Neuron graphs G = D E (paper section 5.5) and the sigma graph (section 6.2)."""

import numpy as np
import pytest
import torch

import bdh
from bdh.analysis import neurograph as ng
from bdh.analysis.record import head_neurons, record, recover_sigma
from bdh.model.graph import flat_decoders


def tiny(n_neurons=512, heads=2, d=32, layers=2, seed=0):
    torch.manual_seed(seed)
    return bdh.BDH(bdh.BDHConfig(n_layer=layers, n_embd=d, n_head=heads, n_neurons=n_neurons)).eval()


def planted(model, communities=8, strength=1.0, sign=(1.0, 1.0)):
    """Give G_x = D_x E a planted block structure: neuron j of every head belongs to community j % c;
    D_x and E both point the neurons of a community along the same direction (times ``sign[head]``)."""
    cfg = model.config
    g = torch.Generator().manual_seed(1)
    with torch.no_grad():
        for h in range(cfg.n_head):
            comm = torch.arange(cfg.N) % communities
            onehot = torch.zeros(cfg.N, cfg.n_embd)
            onehot[torch.arange(cfg.N), comm] = strength
            model.Dx[h] = (sign[h] * onehot + 0.02 * torch.randn(cfg.N, cfg.n_embd, generator=g)).T
            model.E[h * cfg.N : (h + 1) * cfg.N] = onehot + 0.02 * torch.randn(cfg.N, cfg.n_embd, generator=g)
    return model


def test_head_block_is_the_block_of_Dx_E():
    m = tiny(heads=2)
    Dx, Dy, E = flat_decoders(m)
    N = m.config.N
    full = Dx @ E
    for a in range(2):
        for b in range(2):
            assert torch.allclose(
                ng.head_block(m, "x", a, b), full[a * N : (a + 1) * N, b * N : (b + 1) * N], atol=1e-6
            )
    assert torch.allclose(ng.head_block(m, "y", 1), (Dy @ E)[N:, N:], atol=1e-6)
    with pytest.raises(ValueError):
        ng.head_block(m, "x", 2)


def test_planted_modules_beat_both_baselines_and_random_does_not():
    d = 32
    G_planted = ng.head_block(planted(tiny(heads=2, d=d)), "x", 0)
    G_random = ng.head_block(tiny(heads=2, d=d, seed=3), "x", 0)
    sw_p = ng.modularity_sweep(G_planted, d, avg_degrees=(8.0,), seeds=2)[0]
    sw_r = ng.modularity_sweep(G_random, d, avg_degrees=(8.0,), seeds=2)[0]
    assert 8 * 256 / 2 <= sw_p["edges"] <= 8 * 256  # symmetrised: each pair counted once
    assert sw_p["gap_er"] > 0.2 and sw_p["gap_lowrank"] > 0.2
    assert abs(sw_r["gap_er"]) < 0.1 and abs(sw_r["gap_lowrank"]) < 0.1


def test_er_edges_are_distinct_and_simple():
    e = ng._er_edges(50, 300, seed=0)
    assert e.shape == (300, 2)
    assert (e[:, 0] < e[:, 1]).all()
    assert len({tuple(x) for x in e.tolist()}) == 300


def test_entry_stats_and_polarity_find_the_planted_tail_and_the_inhibitory_head():
    m = planted(tiny(heads=2), communities=16, strength=0.5, sign=(1.0, -1.0))
    blocks = {h: ng.entry_stats(ng.head_block(m, "x", h)) for h in range(2)}
    t0, t1 = blocks[0].tails["6"], blocks[1].tails["6"]
    assert t0["above"] > 100 * (t0["below"] + 1)
    assert t1["below"] > 100 * (t1["above"] + 1)
    assert blocks[0].beta1 is not None and blocks[1].beta1 is None
    pol = ng.head_polarity(blocks)
    assert pol["inhibitory_looking"] == [1] and pol["excitatory_looking"] == [0]
    control = ng.head_polarity({h: ng.entry_stats(ng.head_block(tiny(heads=2, seed=7), "x", h)) for h in range(2)})
    assert control["inhibitory_looking"] == [] and control["excitatory_looking"] == []


def test_degrees_find_planted_hubs():
    g = torch.Generator().manual_seed(0)
    G = torch.randn(400, 400, generator=g)
    G[:, [7, 123]] += 2.5  # two sources with strong outgoing edges
    res = ng.degree_analysis(G, m=4000, d=16)
    assert {h["neuron"] for h in res["hubs_out"][:2]} == {7, 123}
    assert res["edges"] == 4000 or abs(res["edges"] - 4000) < 5
    k_in, k_out = res["_degrees"]["in"], res["_degrees"]["out"]
    assert k_in.sum() == k_out.sum() == res["edges"]
    assert res["out"]["summary"]["cv"] > res["in"]["summary"]["cv"]


def test_sigma_graph_matches_recover_sigma_and_reports_firing_rates():
    m = tiny(n_neurons=256, heads=2, layers=3)
    rec = record(m, torch.randint(0, 256, (1, 48)))
    res = ng.sigma_graph(rec, 2, 1, max_rows=100, quantiles=(0.5, 0.9))
    assert res["rows"] == 100 and res["cols"] == 128
    rows = ng.subsample_nodes(256, 100, 0)
    S = recover_sigma(rec, 2, rows=rows, cols=head_neurons(m.config, 1), rotate=True)
    assert abs(res["positive_share"] - float((S > 0).float().mean())) < 1e-6
    lo, hi = res["thresholds"]
    assert lo["edges"] > hi["edges"] > 0
    assert abs(hi["edges"] - 0.1 * (S > 0).sum().item()) <= 0.02 * (S > 0).sum().item() + 2
    fr = res["_firing"]["y"]
    want = (rec.flat("y", 1)[:, rows] > 0).float().mean(0).numpy()
    assert np.allclose(fr, want)
    # a y-neuron that never fires has no synapse
    k_out = hi["_degrees"]["out"]
    assert (k_out[fr == 0] == 0).all()
