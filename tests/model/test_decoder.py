"""The static decoding step (`bdh.model.decoder.StateDecoder`) against the eager recurrent step, `BDH.step`."""

import pytest
import torch

from bdh.model.decoder import StateDecoder
from bdh.model.sampling import sample

from .helpers import rel_err, tiny_model


def _peaked(seed: int, **overrides):
    """A tiny model with large weights: peaked distributions, so argmax ties between two paths do not occur (the
    top two logits differ by far more than the ~1e-6 relative difference of fp32 logits between code paths)."""
    model = tiny_model(seed=seed, n_neurons=128, **overrides)
    with torch.no_grad():
        for p in model.parameters():
            p.mul_(20)
    return model


@pytest.mark.parametrize("batch", [1, 3, 8])
@pytest.mark.parametrize("positional, damping", [("rope", None), ("rope-standard", "alibi"), ("none", 0.9)])
def test_each_step_equals_the_eager_step_in_logits_state_and_position(batch, positional, damping):
    model = _peaked(seed=2, positional=positional, damping=damping)
    prompt = torch.randint(0, 256, (batch, 7), generator=torch.Generator().manual_seed(batch))
    dec = StateDecoder(model, batch, temperature=0)
    token = dec.prefill(prompt, prompt_chunk=3).clone()
    with torch.no_grad():
        logits, state = model.step(prompt, model.init_state(batch))
        assert torch.equal(token, logits[:, -1].argmax(-1))
        for _ in range(6):
            logits, state = model.step(token, state)
            token = dec.step().clone()
            # the same kernels on the same numbers; the tolerance only allows for a different summation order
            assert rel_err(dec.logits, logits) < 1e-5
            assert rel_err(dec.state.rho, state.rho) < 1e-5
            assert int(dec.position) == state.pos
            assert torch.equal(token, logits.argmax(-1))


@pytest.mark.parametrize("options", [dict(temperature=0), dict(temperature=0.8, top_k=20, top_p=0.9, seed=5)])
def test_generate_gives_the_tokens_of_the_eager_generate(options):
    """Greedy and seeded sampling: the same sampler on the same logits with the same generator gives the same tokens."""
    model = _peaked(seed=4)
    prompts = torch.randint(0, 256, (4, 9), generator=torch.Generator().manual_seed(0))
    ours = StateDecoder(model, 4, **options).generate(prompts, 25)
    assert ours.shape == (4, 34) and torch.equal(ours, model.generate(prompts, 25, **options))


def test_repetition_penalty_gives_the_tokens_of_the_eager_generate():
    model = _peaked(seed=6)
    prompts = torch.randint(0, 256, (2, 5), generator=torch.Generator().manual_seed(1))
    options = dict(temperature=0, repetition_penalty=1.8)
    assert torch.equal(StateDecoder(model, 2, **options).generate(prompts, 30), model.generate(prompts, 30, **options))


def test_start_copies_a_batch_of_one_to_every_sequence():
    """The state after one prompt, continued in a batch of 3: every row generates what the one sequence does."""
    model = _peaked(seed=7)
    prompt = torch.randint(0, 256, (1, 6), generator=torch.Generator().manual_seed(2))
    with torch.no_grad():
        _, state = model.step(prompt, model.init_state(1))
    one = StateDecoder(model, 1, temperature=0)
    one.prefill(prompt)
    # read by the chunked form here, by the parallel form in model.step: the order of the sums differs (1e-5)
    assert one.state.pos == 6 and rel_err(one.state.rho, state.rho) < 1e-5
    dec = model.decoder(3, temperature=0)
    first = dec.start(one.state, one.logits).clone()
    rows = torch.stack([first] + [dec.step().clone() for _ in range(10)], dim=1)
    alone = model.generate(prompt, 11, temperature=0)[:, 6:]
    assert torch.equal(rows, alone.expand(3, 11))
    assert one.state.rho.shape[1] == 1 and int(one.position) == 6  # the given state is copied, not changed


def test_sample_draws_like_torch_multinomial_without_its_checks():
    """The exponential race draws the numbers torch.multinomial draws for one sample from the same generator."""
    logits = torch.randn(16, 50, generator=torch.Generator().manual_seed(0))
    for seed in range(5):
        ours = sample(logits, 0.7, None, torch.Generator().manual_seed(seed))
        probs = torch.softmax(logits / 0.7, dim=-1)
        theirs = torch.multinomial(probs, 1, generator=torch.Generator().manual_seed(seed)).view(-1)
        assert torch.equal(ours, theirs)


def test_bad_arguments_are_refused_with_one_line():
    model = tiny_model()
    with pytest.raises(ValueError, match="batch_size must be a positive integer"):
        StateDecoder(model, 0)
    with pytest.raises(ValueError, match="top_p must be"):
        StateDecoder(model, 1, top_p=2.0)
    with pytest.raises(ValueError, match="cuda_graph=True needs a model on a CUDA device"):
        StateDecoder(model, 1, cuda_graph=True)
    dec = StateDecoder(model, 2)
    with pytest.raises(ValueError, match=r"the prompt must be \(2, T\)"):
        dec.prefill(torch.zeros(3, 4, dtype=torch.long))
    with pytest.raises(ValueError, match="the state must be"):
        dec.start(model.init_state(3), torch.zeros(3, 256))
    with pytest.raises(ValueError, match="bidirectional"):
        StateDecoder(tiny_model(causal=False, positional="none"), 1)
