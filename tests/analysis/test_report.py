"""The report's pieces: the untrained control, the recording budget, the repeated-word part."""

import torch

import bdh
from bdh.analysis import report


def cfg():
    return bdh.BDHConfig(n_layer=2, n_embd=16, n_head=2, n_neurons=256)


def test_control_is_reproducible_and_leaves_the_global_rng_alone():
    torch.manual_seed(123)
    before = torch.rand(3)
    torch.manual_seed(123)
    a = report.control_model(cfg(), seed=4)
    after = torch.rand(3)
    assert torch.equal(before, after)
    b = report.control_model(cfg(), seed=4)
    c = report.control_model(cfg(), seed=5)
    assert torch.equal(a.E, b.E) and not torch.equal(a.E, c.E)
    assert not a.training


def test_recording_budget_cuts_sequences_then_tokens(monkeypatch):
    c = cfg()
    toks = torch.zeros(4, 100, dtype=torch.long)
    assert report._fit_sequences(c, toks, 2).shape == (4, 100)
    per_token = c.n * 4 * 2 * 2 * 2
    monkeypatch.setattr(report, "RECORD_BUDGET", per_token * 250)
    assert report._fit_sequences(c, toks, 2).shape == (2, 100)
    monkeypatch.setattr(report, "RECORD_BUDGET", per_token * 60)
    assert report._fit_sequences(c, toks, 2).shape == (1, 60)


def test_repeat_part_under_a_small_budget_keeps_phases_aligned(monkeypatch):
    model = bdh.BDH(cfg()).eval()
    per_token = model.config.n * 4 * 2 * 2 * 2
    monkeypatch.setattr(report, "RECORD_BUDGET", per_token * 120)
    summary, trace, phase = report._repeat_part(model, report.InspectOptions())
    assert summary["sequences"] == 1
    assert trace.y_token.shape[1] == phase.numel() == 120
    assert summary["y"]["fact_over_repeat"] is not None


def test_summary_table_lists_model_and_control():
    rep = {
        "sparsity": {
            "data": {
                "trained": {"x_nonzero": [0.3], "y_nonzero": [0.1], "y_surprisal_spearman": [0.2]},
                "control": {"x_nonzero": [0.5], "y_nonzero": [0.25], "y_surprisal_spearman": [0.0]},
            }
        }
    }
    rows = report.summary_rows(rep)
    assert rows[0][1] == "[0.3]" and rows[0][2] == "[0.5]"
    text = report.format_table(rows)
    assert text.splitlines()[0].startswith("statistic") and "[0.25]" in text
