"""`bdh.analysis.memory.trace_fact`: the fact's and the other positions' read scores, split over neurons."""

from __future__ import annotations

import pytest
import torch

from bdh import BDH, BDHConfig
from bdh.analysis.memory import check_write, induction_write, key_map, recall_facts, trace_fact
from bdh.errors import UserError


@pytest.mark.parametrize(
    "options",
    [
        {},
        {"positional": "none", "damping": "local-global"},
        {"damping": [0.5, 0.9, 1.0, 0.99]},
        {"damping": "local-global", "learn_damping": True},
        {"positional": "none", "decay_gate": True},
        {"positional": "none", "damping": "local-global", "state_write": "delta"},
        {"state_write": "delta", "decay_gate": True, "separate_keys": True},
        {"separate_keys": True, "damping": "alibi"},
    ],
    ids=str,
)
def test_scores_equal_the_attention_matrix_of_a_whole_pass(options, monkeypatch):
    """Read in chunks of 7 through the state, the fact's score and the rest's are the entries and the row sum of
    the attention scores a whole forward captures, for every state rule (the weight of each v_tau in the question's
    a; float32 sums in another order: 1e-4 relative)."""
    monkeypatch.setattr("bdh.analysis.memory.RULE_CHUNK", 5)  # the rule's blocks of 5 inside the read's chunks of 7
    torch.manual_seed(0)
    model = BDH(BDHConfig(n_layer=2, n_embd=16, n_head=4, n_neurons=64, vocab_size=16, dropout=0.0, **options)).eval()
    with torch.no_grad():  # a learned U away from the config's, gates and write strengths that vary by token
        for name, std in (("decay_logit", 1.0), ("decay_w", 1.0), ("write_w", 1.0)):
            if getattr(model, name, None) is not None:
                getattr(model, name).add_(torch.randn_like(getattr(model, name)) * std)
    idx = torch.randint(0, 16, (40,))
    trace = trace_fact(model, idx, write=11, top=1000, chunk=7)
    _, cap = model(idx.view(1, -1), capture=True)
    for head in trace.heads:
        row = cap.attention[head.layer][0, head.head, -1]
        assert head.fact == pytest.approx(float(row[11]), rel=1e-4, abs=1e-6)
        assert head.other == pytest.approx(float(row.sum() - row[11]), rel=1e-4, abs=1e-5)
    for layer in range(2):  # the neurons' parts add up to the heads' fact scores
        total = sum(n.fact for n in trace.neurons if n.layer == layer)
        assert total == pytest.approx(sum(h.fact for h in trace.heads if h.layer == layer), rel=1e-4, abs=1e-6)
    assert trace.predicted == int(model(idx.view(1, -1))[0, -1].argmax())


def test_recall_facts_pairs_every_question_with_its_value_first_stated_first():
    """Pairs (3, 9), (4, 8) then a filler and the questions 4? 3?: key 3 was stated first, so its question (position
    7) comes first with its value (position 1); then key 4's; a question whose key never occurred is refused."""
    x = torch.tensor([3, 9, 4, 8, 6, 4, 8, 3, 9])
    y = torch.tensor([-100, -100, -100, -100, -100, 8, -100, 9, -100])
    assert recall_facts(x, y) == [(1, 7), (3, 5)]
    with pytest.raises(UserError, match="no question's key occurs earlier"):
        recall_facts(torch.tensor([5, 6, 7]), torch.tensor([-100, -100, 1]))
    with pytest.raises(UserError, match="1-D tensors of the same length"):
        recall_facts(x, y[:-1])


def test_key_map_counts_each_keys_neurons_and_the_neurons_keys_share():
    def pair(key, neuron, head=1):
        return {"key": key, "layer": 1, "head": head, "neuron": neuron}

    pairs = [pair(5, 10), pair(5, 10), pair(6, 11), pair(6, 12), pair(6, 11), pair(7, 10), pair(8, None), pair(8, 3)]
    got = key_map(pairs)
    assert got["pairs"] == 8
    assert got["keys"] == {
        5: {"L1H1#10": 2},
        6: {"L1H1#11": 2, "L1H1#12": 1},
        7: {"L1H1#10": 1},
        8: {"none": 1, "L1H1#3": 1},
    }
    assert got["repeated"] == 3 and got["consistent"] == 1  # 5 always #10; 6 twice #11 once #12; 8 once by none
    assert got["neurons"] == 3  # usual neurons: #10 (keys 5 and 7), #11 (6), #3 (8: none is no neuron)
    assert got["shared"] == {"L1H1#10": [5, 7]}
    assert key_map([pair(5, 10, head=0), pair(5, 10, head=1)])["consistent"] == 0  # another head: another neuron


def test_induction_write_finds_the_answer_and_bad_input_is_refused():
    idx = torch.tensor([3, 5, 15, 7, 2, 15])
    assert induction_write(idx) == 3
    with pytest.raises(UserError, match="does not occur earlier"):
        induction_write(torch.tensor([1, 2, 3, 15]))
    model = BDH(BDHConfig(n_layer=1, n_embd=16, n_head=2, n_neurons=32, vocab_size=16))
    with pytest.raises(
        UserError,
        match=r"trace_fact: the fact's position must lie before the input's last token \(5\)",
    ):
        trace_fact(model, idx, write=5)
    with pytest.raises(UserError, match="1-D tensor"):
        trace_fact(model, idx.view(1, -1), write=1)


@pytest.mark.parametrize("write", [-1, 4, 5, True, 1.0, "2", None])
def test_check_write_refuses_positions_not_before_the_last_token(write):
    # the one rule bdh inspect --fact, bdh viz --fact and trace_fact share: 0 <= write < length - 1, an int
    with pytest.raises(UserError, match=r"^who: the fact's position must lie before the input's last token \(4\)"):
        check_write(write, 5, "who")


def test_check_write_accepts_every_position_before_the_last_token():
    for write in range(4):
        check_write(write, 5, "who")
