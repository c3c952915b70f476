"""Sparsity traces (paper section 6.4, Fig. 14)."""

import numpy as np
import torch

import bdh
from bdh.analysis import sparsity as sp
from bdh.analysis.record import record
from bdh.tasks.repeat import PERIOD, phases


def tiny(**kw):
    cfg = dict(n_layer=2, n_embd=32, n_head=2, n_neurons=512)
    cfg.update(kw)
    return bdh.BDH(bdh.BDHConfig(**cfg)).eval()


def test_frequency_buckets_are_equal_and_ordered_fast_to_slow():
    m = tiny()
    b = sp.frequency_buckets(m.config, m.freqs, 8)
    assert torch.bincount(b).tolist() == [m.config.N // 8] * 8
    f = m.freqs
    for k in range(7):
        assert f[b == k].min() >= f[b == k + 1].max()
    periods = sp.bucket_periods(m.config, m.freqs, b, 8)
    assert all(periods[k][1] <= periods[k + 1][0] + 1e-3 for k in range(7))
    ms = tiny(positional="rope-standard")
    bs = sp.frequency_buckets(ms.config, ms.freqs, 4)
    N = ms.config.N
    assert torch.equal(bs[: N // 2], bs[N // 2 :])  # paired neurons share a frequency
    assert sp.frequency_buckets(tiny(positional="none").config, torch.zeros(0), 8) is None


def test_sparsity_matches_direct_counts_and_the_untrained_x_is_half_active():
    m = tiny()
    idx = torch.randint(0, 256, (2, 40))
    rec = record(m, idx)
    tr = sp.sparsity(rec)
    _, cap = m(idx, capture=True)
    for layer in range(2):
        assert np.allclose(tr.x_token[layer], (cap.x[layer] > 0).float().mean(dim=(0, 1, 3)).numpy(), atol=1e-6)
        assert np.allclose(tr.y_token[layer], (cap.y[layer] > 0).float().mean(dim=(0, 1, 3)).numpy(), atol=1e-6)
        assert np.allclose(tr.y_bucket[layer].mean(axis=0), tr.y_token[layer], atol=1e-5)
    # x = ReLU of a symmetric random projection: about half of it is non-zero at initialisation
    means = tr.layer_means()
    assert all(0.4 < v < 0.6 for v in means["x"])
    assert all(v < x for v, x in zip(means["y"], means["x"]))  # y is x gated by another ReLU
    # surprisal of the token read at t is the next-token surprisal of t - 1
    assert np.isnan(tr.surprisal[0])
    assert np.allclose(tr.surprisal[1:], rec.surprisal[:, :-1].mean(0).numpy(), atol=1e-5)


def test_phase_summary_detects_higher_activity_during_the_fact():
    T = 3 * PERIOD
    phase, _ = phases(T)
    y = np.full((2, T), 0.02)
    y[1, phase.numpy() == 1] = 0.06  # layer 1 is 3x more active on the first presentation
    K = 4
    yb = np.repeat(y[:, None, :], K, axis=1)
    tr = sp.SparsityTrace(y.copy(), y, yb.copy(), yb, np.zeros(T), [(1.0, 2.0)] * K)
    s = sp.phase_summary(tr, phase)
    assert s["skipped_first_period"]
    r = s["y"]["fact_over_repeat"]
    assert abs(r[0] - 1.0) < 1e-9 and abs(r[1] - 3.0) < 1e-9
    assert np.allclose(np.array(s["y"]["bucket_fact_over_repeat"])[1], 3.0)


def test_activity_surprisal_correlation_sign():
    T = 50
    s = np.linspace(0, 5, T)
    y = np.stack([s / 100, -s / 100 + 1])
    tr = sp.SparsityTrace(y, y, None, None, s, [])
    c = sp.activity_surprisal_correlation(tr)
    assert c[0] > 0.99 and c[1] < -0.99
