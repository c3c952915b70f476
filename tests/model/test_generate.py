"""Generation on the recurrent state: the same tokens as re-running the parallel form."""

import pytest
import torch

from bdh import BDH

from .helpers import rerun_greedy, tiny_config, tiny_model


@pytest.mark.parametrize("damping", [None, "alibi"])
@pytest.mark.parametrize("positional", ["rope", "rope-standard", "none"])
def test_greedy_generation_equals_rerunning_the_prefix(positional, damping):
    # larger weights make the output distribution peaked, so argmax ties are not an issue: the top two
    # logits differ by >= 8e-4 of the largest (measured), the two paths' fp32 logits by ~1e-6 of it
    model = tiny_model(seed=1, positional=positional, damping=damping, n_neurons=128)
    with torch.no_grad():
        for p in model.parameters():
            p.mul_(20)
    prompt = torch.randint(0, 256, (3, 5))
    ours = model.generate(prompt, 30, temperature=0)
    assert torch.equal(ours, rerun_greedy(model, prompt, 30))


def test_sampling_is_reproducible_with_a_seed():
    model = tiny_model()
    prompt = torch.tensor([1, 2, 3])
    a = model.generate(prompt, 20, temperature=1.0, seed=7)
    b = model.generate(prompt, 20, temperature=1.0, seed=7)
    c = model.generate(prompt, 20, temperature=1.0, seed=8)
    assert a.shape == (23,) and torch.equal(a, b) and not torch.equal(a, c)
    assert torch.equal(a[:3], prompt)


def test_top_k_one_is_greedy():
    model = tiny_model()
    prompt = torch.randint(0, 256, (2, 4))
    assert torch.equal(model.generate(prompt, 10, top_k=1, seed=0), model.generate(prompt, 10, temperature=0))


def test_top_k_restricts_the_choices():
    model = tiny_model()
    logits = model(torch.tensor([[5, 6]]))[:, -1]
    allowed = set(torch.topk(logits, 3).indices.view(-1).tolist())
    for seed in range(20):
        tok = model.generate(torch.tensor([5, 6]), 1, top_k=3, seed=seed)[-1].item()
        assert tok in allowed


def test_generation_leaves_training_mode_as_it_was():
    model = tiny_model(dropout=0.3)
    model.train()
    model.generate(torch.tensor([1, 2]), 3, seed=0)
    assert model.training


def test_stream_yields_one_token_per_step_and_state_size_is_constant():
    model = tiny_model()
    state = model.init_state(1)
    size = state.rho.shape
    tokens = list(model.stream(torch.tensor([[1, 2, 3]]), 6, seed=0))
    assert len(tokens) == 6 and all(t.shape == (1,) for t in tokens)
    _, later = model.step(torch.randint(0, 256, (1, 50)), state)
    assert later.rho.shape == size  # the state does not grow with the context


@pytest.mark.parametrize(
    "kwargs, match",
    [
        (dict(max_new_tokens=-1), "max_new_tokens"),
        (dict(max_new_tokens=3, temperature=-1.0), "temperature"),
        (dict(max_new_tokens=3, top_k=0), "top_k"),
    ],
)
def test_bad_generation_arguments(kwargs, match):
    with pytest.raises(ValueError, match=match):
        tiny_model().generate(torch.tensor([1]), **kwargs)


def test_empty_prompt_and_bidirectional_model_are_refused():
    with pytest.raises(ValueError, match="prompt is empty"):
        tiny_model().generate(torch.zeros(0, dtype=torch.long), 3)
    with pytest.raises(ValueError, match="bidirectional"):
        BDH(tiny_config(causal=False)).generate(torch.tensor([1]), 3)


def test_stream_continues_a_given_state_without_modifying_it():
    model = tiny_model()
    idx = torch.randint(0, 256, (1, 8))
    _, state = model.step(idx[:, :5], model.init_state(1))
    before = state.rho.clone()
    continued = list(model.stream(idx[:, 5:], 6, temperature=0, state=state))
    assert torch.equal(state.rho, before) and state.pos == 5
    fresh = list(model.stream(idx, 6, temperature=0))
    assert torch.equal(torch.cat(continued), torch.cat(fresh))


def test_in_place_update_needs_no_grad():
    from bdh.model.kernels import attention

    q = torch.rand(1, 1, 2, 4)
    v = torch.rand(1, 1, 2, 3)
    s = torch.zeros(1, 1, 4, 3)
    with pytest.raises(ValueError, match="in-place"):
        attention.recurrent(q, q, v, state=s, inplace=True)
    with torch.no_grad():
        out, s2 = attention.recurrent(q, q, v, state=s, inplace=True, need_state=True)
    assert s2 is s and torch.allclose(s, q[0, 0].T @ v[0, 0])


@pytest.mark.parametrize("threshold", [0.0, 1.0, 0.4])
@pytest.mark.parametrize("positional", ["rope", "none"])
def test_sparse_step_equals_the_dense_step(threshold, positional, monkeypatch):
    from bdh.model.kernels import sparse as sparse_kernels

    monkeypatch.setattr(sparse_kernels, "DENSITY", threshold)  # 0: the dense read and write; 1: row by row
    model = tiny_model(seed=2, positional=positional, n_neurons=128)
    with torch.no_grad():  # make x sparse: most pre-activations negative
        model.Dx.sub_(model.Dx.abs().mean() * 0.8)
    idx = torch.randint(0, 256, (1, 9))
    _, dense = model.step(idx[:, :5], model.init_state(1))
    sparse = dense.clone()
    for t in range(5, 9):
        ref, dense = model.step(idx[:, t], dense)
        with torch.no_grad():
            got, sparse = model.step(idx[:, t], sparse, mode="sparse", inplace=True)
        assert torch.allclose(got, ref, rtol=1e-5, atol=1e-6)
        # the state sums signed rank-one updates in another order: near-zero entries carry the fp32
        # rounding of the large ones (measured 1.2e-7 = 1 ulp at the scale 0.95, already 0.56 of what a
        # fixed atol of 1e-7 allowed there); 1e-6 of the scale is ~8 ulps, a missed neuron's update is
        # ~1e-2 or more
        scale = dense.rho.abs().max().item()
        assert torch.allclose(sparse.rho, dense.rho, rtol=1e-5, atol=1e-6 * scale) and sparse.pos == dense.pos


def test_sparse_generation_gives_the_same_tokens():
    model = tiny_model(seed=4, n_neurons=128)
    with torch.no_grad():
        for p in model.parameters():
            p.mul_(20)
    prompt = torch.randint(0, 256, (1, 6))
    assert torch.equal(
        model.generate(prompt, 25, temperature=0, sparse=True), model.generate(prompt, 25, temperature=0, sparse=False)
    )
    with pytest.raises(ValueError, match="one token of one sequence"), torch.no_grad():
        model.step(torch.tensor([1, 2]), model.init_state(2), mode="sparse", inplace=True)


def test_batched_generation_equals_generating_each_sequence_alone():
    """A batch of prompts gives each row the tokens it gets alone (batch of one: the sparse step; batch: dense)."""
    model = tiny_model(seed=3, n_neurons=128)
    with torch.no_grad():
        for p in model.parameters():
            p.mul_(20)
    prompts = torch.randint(0, 256, (4, 7))
    batched = model.generate(prompts, 20, temperature=0)
    assert batched.shape == (4, 27)
    for row in range(4):
        alone = model.generate(prompts[row], 20, temperature=0)
        assert torch.equal(batched[row], alone)
