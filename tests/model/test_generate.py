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
    from bdh.model.kernels.pytorch import attention

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
    from bdh.model.kernels.pytorch import sparse as sparse_kernels

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


# ---- top-p, repetition penalty and stop sequences


def _nucleus_by_hand(probs: list[float], p: float) -> set[int]:
    """The smallest set of tokens whose probability reaches p: the most likely first, until the sum is >= p."""
    kept, total = set(), 0.0
    for token in sorted(range(len(probs)), key=lambda t: -probs[t]):
        kept.add(token)
        total += probs[token]
        if total >= p:
            break
    return kept


@pytest.mark.parametrize("p", [1e-6, 0.1, 0.5, 0.9, 0.99, 1.0])
def test_top_p_keeps_the_smallest_set_that_reaches_p(p):
    from bdh.model.sampling import _nucleus

    gen = torch.Generator().manual_seed(0)
    logits = torch.randn(16, 50, generator=gen) * 2
    masked = _nucleus(logits, p) if p < 1 else logits
    for row in range(16):
        # float64 sums by hand; with random logits no partial sum lies within fp32 rounding of p
        kept = _nucleus_by_hand(torch.softmax(logits[row].double(), -1).tolist(), p)
        assert set(torch.nonzero(torch.isfinite(masked[row])).view(-1).tolist()) == kept
        assert torch.equal(masked[row, sorted(kept)], logits[row, sorted(kept)])  # the kept logits unchanged


def test_top_p_samples_the_renormalised_nucleus():
    from bdh.model.sampling import sample

    logits = torch.tensor([2.0, 1.5, 1.0, 0.0, -1.0, -3.0])
    probs = torch.softmax(logits, -1)  # 0.48, 0.29, 0.18, 0.06, 0.02, 0.003
    kept = sorted(_nucleus_by_hand(probs.tolist(), 0.8))
    assert kept == [0, 1, 2]
    draws = sample(logits.expand(20_000, -1), 1.0, None, torch.Generator().manual_seed(1), top_p=0.8)
    freq = torch.bincount(draws, minlength=6).double() / draws.numel()
    expected = torch.zeros(6, dtype=torch.float64)
    expected[kept] = probs[kept].double() / probs[kept].sum()
    # 20,000 draws: the standard error of a frequency near 0.5 is 0.0035; 0.02 is over 5 of them
    assert freq[3:].sum() == 0 and torch.allclose(freq, expected, atol=0.02)


def test_top_p_tiny_is_greedy_and_one_is_off():
    model = tiny_model()
    prompt = torch.randint(0, 256, (2, 4))
    greedy = model.generate(prompt, 10, temperature=0)
    assert torch.equal(model.generate(prompt, 10, top_p=1e-6, seed=0), greedy)
    assert torch.equal(model.generate(prompt, 10, top_p=1.0, seed=3), model.generate(prompt, 10, seed=3))


def test_top_p_applies_after_top_k():
    from bdh.model.sampling import sample

    # top-k 2 leaves 0.5 / 0.5 of two tokens: top-p 0.4 then keeps one of them, never the third
    logits = torch.tensor([1.0, 1.0, 0.99, -5.0])
    draws = sample(logits.expand(2_000, -1), 1.0, 2, torch.Generator().manual_seed(0), top_p=0.4)
    assert set(draws.tolist()) <= {0, 1} and len(set(draws.tolist())) == 1


def test_repetition_penalty_by_hand():
    from bdh.model.sampling import penalize

    logits = torch.tensor([[2.0, -1.0, 0.5, -3.0, 0.0], [2.0, -1.0, 0.5, -3.0, 0.0]])
    seen = torch.tensor([[True, True, False, False, True], [False, False, True, True, False]])
    out = penalize(logits, seen, 2.0)
    assert torch.equal(out[0], torch.tensor([1.0, -2.0, 0.5, -3.0, 0.0]))  # 2 / 2, -1 * 2; unseen unchanged
    assert torch.equal(out[1], torch.tensor([2.0, -1.0, 0.25, -6.0, 0.0]))
    assert torch.equal(penalize(logits, seen, 1.0), logits)


def _greedy_with_penalty_by_hand(model, prompt: torch.Tensor, n: int, penalty: float) -> torch.Tensor:
    """Greedy decoding penalising every token of the context so far, the context kept as a list of tokens."""
    out = prompt.clone()
    with torch.no_grad():
        logits, state = model.step(prompt, model.init_state(prompt.shape[0]), mode="chunked", inplace=True)
        logits = logits[:, -1]
        for _ in range(n):
            pen = logits.float().clone()
            for b in range(out.shape[0]):
                for t in set(out[b].tolist()):
                    pen[b, t] = pen[b, t] / penalty if pen[b, t] > 0 else pen[b, t] * penalty
            nxt = pen.argmax(-1)
            out = torch.cat([out, nxt.view(-1, 1)], dim=1)
            logits, state = model.step(nxt, state, mode="recurrent", inplace=True)
    return out


def test_greedy_with_repetition_penalty_equals_the_context_by_hand():
    # the same steps and logits as `stream` (the same kernels in place): only the penalty's bookkeeping differs
    model = tiny_model(seed=5, n_neurons=128)
    prompt = torch.randint(0, 256, (3, 6))
    ours = model.generate(prompt, 30, temperature=0, repetition_penalty=1.7)
    assert torch.equal(ours, _greedy_with_penalty_by_hand(model, prompt, 30, 1.7))


def test_repetition_penalty_changes_greedy_text_that_repeats():
    model = tiny_model(seed=1)
    prompt = torch.tensor([1, 2, 3])
    plain = model.generate(prompt, 60, temperature=0)
    assert len(set(plain[3:].tolist())) < 60  # a tiny random model repeats itself
    penalised = model.generate(prompt, 60, temperature=0, repetition_penalty=3.0)
    assert not torch.equal(plain, penalised)
    assert len(set(penalised[3:].tolist())) > len(set(plain[3:].tolist()))


def _first_at(seq: list[int], stop: list[int]) -> int:
    """The index just past the first occurrence of ``stop`` in ``seq`` (-1: none)."""
    for end in range(len(stop), len(seq) + 1):
        if seq[end - len(stop) : end] == stop:
            return end
    return -1


def test_stop_sequences_end_generation_exactly():
    model = tiny_model(seed=2)
    prompt = torch.tensor([7, 8, 9])
    full = model.generate(prompt, 40, temperature=0)[3:].tolist()
    stop = full[20:22]
    end = _first_at(full, stop)
    assert 0 < end <= 22
    got = model.generate(prompt, 40, temperature=0, stop=[stop])
    assert got[3:].tolist() == full[:end]  # the stop sequence is included, nothing after it
    other = full[end - 1 : end + 2] if end + 2 <= 40 else [255, 255, 255]
    assert model.generate(prompt, 40, temperature=0, stop=[other, bytes(stop)])[3:].tolist() == full[:end]
    never = [t for t in range(256) if t not in full][:1] * 2
    assert model.generate(prompt, 40, temperature=0, stop=[never])[3:].tolist() == full  # no stop: all 40
    streamed = list(model.stream(prompt, 40, temperature=0, stop=[stop]))
    assert len(streamed) == end


def test_a_stop_sequence_does_not_straddle_the_prompt():
    model = tiny_model(seed=2)
    prompt = torch.tensor([7, 8, 9])
    full = model.generate(prompt, 40, temperature=0)[3:].tolist()
    stop = [9, full[0]]  # the prompt's last token and the first generated one
    end = _first_at(full, stop)
    got = model.generate(prompt, 40, temperature=0, stop=[stop])[3:].tolist()
    assert got == (full if end < 0 else full[:end]) and len(got) > 1


@pytest.mark.parametrize(
    "kwargs, match",
    [
        (dict(top_p=0.0), "top_p"),
        (dict(top_p=1.5), "top_p"),
        (dict(top_p=float("nan")), "top_p"),
        (dict(top_p=True), "top_p"),
        (dict(repetition_penalty=0.5), "repetition_penalty"),
        (dict(repetition_penalty=float("inf")), "repetition_penalty"),
        (dict(repetition_penalty=float("nan")), "repetition_penalty"),
        (dict(temperature=float("nan")), "temperature"),
        (dict(stop=b"\n\n"), "list of token sequences"),
        (dict(stop=["\n"]), "non-empty sequence"),
        (dict(stop=[[]]), "non-empty sequence"),
        (dict(stop=[[1, 256]]), r"outside \[0, 256\)"),
    ],
)
def test_bad_sampling_options_are_refused_when_stream_is_called(kwargs, match):
    from bdh.errors import UserError

    with pytest.raises(UserError, match=match):
        tiny_model().stream(torch.tensor([1]), 3, **kwargs)  # not iterated: refused at the call


def test_stop_needs_a_batch_of_one():
    from bdh.errors import UserError

    with pytest.raises(UserError, match="batch of one"):
        tiny_model().generate(torch.tensor([[1], [2]]), 3, stop=[b"a"])
