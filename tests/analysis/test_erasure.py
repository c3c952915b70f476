"""`bdh.analysis.erasure`: each later write's erase of a fact, against the delta rule token by token and against
the fact's read score `bdh.analysis.memory.trace_fact` finds."""

from __future__ import annotations

import math

import pytest
import torch

from bdh import BDH, BDHConfig
from bdh.analysis.erasure import carried_erasure, erasure, fact_rows, neurons_holding
from bdh.analysis.memory import trace_fact
from bdh.errors import UserError
from bdh.model.kernels.naive import naive_state_rule


def _rule(H: int = 2, T: int = 14, N: int = 6):
    g = torch.Generator().manual_seed(0)
    keys = torch.rand(H, T, N, generator=g, dtype=torch.float64).relu()
    keys = keys / keys.norm(dim=-1, keepdim=True)
    keys[0, 6] = 0  # a position that writes nothing in head 0
    beta = torch.rand(H, T, generator=g, dtype=torch.float64)
    log_g = -0.3 * torch.rand(H, T, generator=g, dtype=torch.float64)
    return keys, beta, log_g


@pytest.mark.parametrize("damped", [True, False])
def test_the_carried_columns_are_the_delta_rules_state_on_each_facts_value(damped):
    """The column of each fact at its question is the state the rule token by token leaves on a value one-hot at the
    fact (float64 both ways, one order of sums: 1e-12), and the erases add up to the fall of its log norm exactly
    (the identity of the module docstring, damping apart)."""
    keys, beta, log_g = _rule()
    log_g = log_g if damped else None
    writes, reads = torch.tensor([2, 5, 1]), torch.tensor([9, 13, 3])
    carried, erase = carried_erasure(keys, beta, log_g, writes, reads)
    for f, (w, r) in enumerate(zip(writes.tolist(), reads.tolist())):
        v = torch.zeros(1, 1, r, 1, dtype=torch.float64)
        v[0, 0, w] = 1
        q = torch.zeros(1, 2, r, 6, dtype=torch.float64)
        lg = None if log_g is None else log_g[None, :, :r]
        _, state = naive_state_rule(q, keys[None, :, :r], v, log_g=lg, beta=beta[None, :, :r], need_state=True)
        assert torch.allclose(carried[f], state[0, :, :, 0], rtol=1e-12, atol=1e-14)
        for h in range(2):
            born = math.log(float((beta[h, w] * keys[h, w]).norm() ** 2))
            if log_g is not None:
                born += 2 * float(log_g[h, w])
            decay = 0.0 if log_g is None else 2 * float(log_g[h, w + 1 : r].sum())
            fall = born + decay - math.log(float(carried[f, h].norm() ** 2))
            assert float(erase[f, h].sum()) == pytest.approx(fall, rel=1e-9, abs=1e-12)
            outside = torch.ones(14, dtype=torch.bool)
            outside[w + 1 : r] = False
            assert float(erase[f, h, outside].abs().max()) == 0.0
    assert float(erase[:, 0, 6].abs().max()) == 0.0  # a key of zeros erases nothing


def test_a_split_read_carries_the_columns_across_the_split():
    keys, beta, log_g = _rule()
    writes, reads = torch.tensor([2, 5]), torch.tensor([9, 13])
    whole, e = carried_erasure(keys, beta, log_g, writes, reads)
    first, e1 = carried_erasure(keys[:, :7], beta[:, :7], log_g[:, :7], writes, reads)
    second, e2 = carried_erasure(keys[:, 7:], beta[:, 7:], log_g[:, 7:], writes, reads, first, start=7)
    assert torch.allclose(second, whole, rtol=1e-12, atol=0) and torch.allclose(torch.cat([e1, e2], -1), e)


def _delta_model() -> BDH:
    torch.manual_seed(0)
    cfg = BDHConfig(
        n_layer=2, n_embd=16, n_head=2, n_neurons=64, vocab_size=32, dropout=0.0, positional="none",
        damping="local-global", state_write="delta",
    )  # fmt: skip
    model = BDH(cfg)
    with torch.no_grad():
        model.write_w.add_(torch.randn_like(model.write_w))  # write strengths that vary by token
    return model.eval()


def test_the_read_scores_are_the_ones_trace_fact_finds():
    """q . c per head is the fact's read score `trace_fact` finds through the chunked rule (its float32 sums:
    1e-4 relative), read in chunks of 7 and of 64 alike (the model's keys and gates are float32, computed in other
    blocks: 1e-4 relative)."""
    model = _delta_model()
    idx = torch.randint(0, 32, (40,))
    writes, reads = [11, 20], [39, 30]
    er = erasure(model, idx, writes, reads, chunk=7)
    again = erasure(model, idx, writes, reads, chunk=64)
    assert torch.allclose(er.erase, again.erase, rtol=1e-4, atol=1e-7)
    for f, (w, r) in enumerate(zip(writes, reads)):
        trace = trace_fact(model, idx[: r + 1], w, top=1)
        for head in trace.heads:
            mine = float(er.scores()[head.layer, f, head.head].sum())
            assert mine == pytest.approx(head.fact, rel=1e-4, abs=1e-6)
    rows = fact_rows(er, idx, writes, reads, vocab_size=32)
    for row in rows:
        assert 1 <= row["neurons"] <= 32 and sum(row["by_kind"].values()) == pytest.approx(1.0)
        assert sum(e["share"] for e in row["erasers"]) <= 1.0 + 1e-9


def test_neurons_holding_and_the_refusals():
    assert neurons_holding(torch.tensor([0.5, 0.3, 0.15, 0.05, -1.0])) == 3  # 0.95 of the positive 1.0
    assert neurons_holding(torch.tensor([1.0, 0.0])) == 1 and neurons_holding(torch.tensor([-1.0, 0.0])) == 0
    model = _delta_model()
    with pytest.raises(UserError, match="written before its question"):
        erasure(model, torch.zeros(8, dtype=torch.long), [5], [3])
    plain = BDH(BDHConfig(n_layer=1, n_embd=16, n_head=2, n_neurons=32, vocab_size=32)).eval()
    with pytest.raises(UserError, match="needs a BDH with the delta rule"):
        erasure(plain, torch.zeros(8, dtype=torch.long), [2], [6])


def test_inspect_recall_with_32_pairs_says_what_erased_each(tmp_path, capsys):
    """``bdh inspect --recall LENGTH --pairs 32``: every pair of sequence 0 in fact.json's erasure, its writes and
    questions where `recall_facts` finds them, the summary printed; --pairs without --recall and a sequence with
    no room for the pairs are one-line errors."""
    import json

    from bdh.analysis.memory import recall_facts
    from bdh.cli import main
    from bdh.registry import get_task
    from bdh.tasks.lengths import fixed_test_set

    model = _delta_model()
    model.save_pretrained(tmp_path / "m")
    out = tmp_path / "o"
    args = ["inspect", str(tmp_path / "m"), "--recall", "160", "--pairs", "12", "--no-figures"]
    assert main([*args, "--out", str(out)]) == 0
    rec = json.loads((out / "fact.json").read_text())["erasure"]
    cls = get_task("recall_gap")
    x, y = fixed_test_set(cls(cls.config_class(seq_len=160, vocab_size=32, num_kv_pairs=12)), 160, rows=[0])
    assert [(f["write"], f["read"]) for f in rec["facts"]] == recall_facts(x[0], y[0])
    assert rec["neurons_min"] <= rec["neurons_median"] <= rec["neurons_max"]
    assert sum(rec["by_kind"].values()) == pytest.approx(1.0) and 0 <= rec["untouched"] <= 12
    assert "erasure of the 12 pairs of sequence 0" in capsys.readouterr().out
    assert main(["inspect", str(tmp_path / "m"), "--pairs", "4", "--out", str(tmp_path / "p")]) == 2
    assert "--pairs goes with --recall" in capsys.readouterr().err
    assert main([*args, "--pairs", "40", "--out", str(tmp_path / "q")]) == 2  # no room: refused before loading
    err = capsys.readouterr().err.strip()
    assert err == "bdh: error: --recall 160: a sequence of --pairs 40 needs more than 160"
    assert main([*args, "--pairs", "20", "--out", str(tmp_path / "q")]) == 2  # 20 keys in V = 32: not in [1, 16)
    assert capsys.readouterr().err.strip().splitlines()[-1].startswith("bdh: error: --pairs 20 with --recall 160")
