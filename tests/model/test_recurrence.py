"""Recurrent depth in training (`bdh.model.recurrence`): ``pass_logits`` of every weight-shared model against its
``forward(n_layer=k)`` (values and gradients), the random pass count, deep supervision in the objective, the
one-line refusals."""

from __future__ import annotations

import pytest
import torch

from bdh import BDH, BDHConfig
from bdh.baselines.gpt import GPT, GPTConfig
from bdh.baselines.hyperset import HyperSET, HyperSETConfig
from bdh.errors import UserError
from bdh.train.build import Objective, summed_cross_entropy

# values: pass_logits runs the same kernels and operations as forward, in the same order; the tolerance only
# allows for a different summation order of a fused kernel (fp32, logits of order 1)
ATOL = 1e-5


def models(**extra):
    torch.manual_seed(0)
    return {
        "bdh": BDH(
            BDHConfig(vocab_size=10, n_layer=3, n_embd=16, n_head=2, n_neurons=64, causal=False, dropout=0.0, **extra)
        ),
        "gpt-shared": GPT(
            GPTConfig(
                vocab_size=10,
                seq_len=81,
                n_layer=3,
                n_embd=16,
                n_head=2,
                causal=False,
                share_layers=True,
                positional="sudoku",
                **extra,
            )
        ),
        "hyperset": HyperSET(
            HyperSETConfig(n_embd=16, n_head=2, n_recur=3, time_freq=8, embed_dropout=0.0, positional="sudoku", **extra)
        ),
    }


@pytest.mark.parametrize("name", ["bdh", "gpt-shared", "hyperset"])
def test_pass_logits_are_forward_at_every_depth_values_and_gradients(name):
    model = models()[name].eval()
    x = torch.randint(0, 10, (2, 81), generator=torch.Generator().manual_seed(1))
    y = torch.randint(1, 10, (2, 81), generator=torch.Generator().manual_seed(2))
    fast = list(model.pass_logits(x, 5))
    assert len(fast) == 5
    for k, z in enumerate(fast, start=1):
        torch.testing.assert_close(z, model(x, n_layer=k), atol=ATOL, rtol=0)
    # the gradient of the deep-supervision loss against the slow reference: one forward per depth
    torch.stack([summed_cross_entropy(z, y) for z in fast]).mean().backward()
    got = [p.grad.clone() for p in model.parameters()]
    model.zero_grad()
    torch.stack([summed_cross_entropy(model(x, n_layer=k), y) for k in range(1, 6)]).mean().backward()
    for g, p in zip(got, model.parameters()):
        torch.testing.assert_close(g, p.grad, atol=1e-4, rtol=1e-4)  # sums of five backward passes, fp32


def test_unshared_gpt_gives_its_blocks_logits():
    torch.manual_seed(0)
    model = GPT(GPTConfig(vocab_size=10, seq_len=81, n_layer=3, n_embd=16, n_head=2, causal=False)).eval()
    x = torch.randint(0, 10, (2, 81))
    z = list(model.pass_logits(x))
    assert len(z) == 3
    torch.testing.assert_close(z[-1], model(x), atol=ATOL, rtol=0)
    with pytest.raises(UserError, match="needs share_layers"):
        model.pass_logits(x, 4)  # refused at the call, not at the first pass


@pytest.mark.parametrize("name", ["bdh", "gpt-shared", "hyperset"])
def test_random_depth_draws_the_passes_in_training_only(name):
    model = models(random_depth=(2, 4))[name]
    x = torch.randint(0, 10, (2, 81))
    seen = set()
    for seed in range(12):
        torch.manual_seed(seed)
        k = int(torch.randint(2, 5, ()).item())  # the draw the forward makes from the same stream
        seen.add(k)
        model.train()
        torch.manual_seed(seed)
        drawn = model(x)
        torch.manual_seed(seed)
        assert len(list(model.pass_logits(x))) == k
        model.eval()
        torch.testing.assert_close(drawn, model(x, n_layer=k), atol=ATOL, rtol=0)
    assert seen == {2, 3, 4}
    model.eval()
    torch.testing.assert_close(model(x), model(x, n_layer=3), atol=0, rtol=0)  # eval: the configured depth
    model.train()
    torch.testing.assert_close(model(x, n_layer=6), model.eval()(x, n_layer=6), atol=ATOL, rtol=0)  # asked wins


@pytest.mark.parametrize("name", ["bdh", "gpt-shared", "hyperset"])
def test_the_objective_supervises_every_pass(name):
    model = models(deep_supervision=True)[name].eval()
    x = torch.randint(0, 10, (2, 81))
    y = torch.where(x == 0, torch.randint(1, 10, (2, 81)), torch.full_like(x, -100))
    y[:, 0] = 3  # at least one scored cell
    loss, _ = Objective(model, "window")(x, y)
    want = sum(summed_cross_entropy(model(x, n_layer=k), y) for k in (1, 2, 3)) / 3
    torch.testing.assert_close(loss, want, atol=1e-4, rtol=1e-5)  # fp32 sums over 162 cells


@pytest.mark.parametrize(
    ("build", "match"),
    [
        (lambda: BDHConfig(random_depth=(4, 2)), r"BDHConfig.random_depth: \[lo, hi\] needs 1 <= lo <= hi"),
        (lambda: BDHConfig(random_depth=(1, 2), unshared_layers=True), "BDHConfig.random_depth: .*weight-shared"),
        (lambda: BDHConfig(deep_supervision=True, unshared_layers=True), "BDHConfig.deep_supervision: .*weight"),
        (lambda: BDHConfig(deep_supervision=1), "BDHConfig.deep_supervision: must be true or false"),
        (lambda: GPTConfig(deep_supervision=True), "GPTConfig.deep_supervision: .*weight-shared"),
        (lambda: GPTConfig(random_depth=(0, 2), share_layers=True), "GPTConfig.random_depth: .*1 <= lo"),
        (lambda: GPTConfig(random_depth=(1, 2, 3), share_layers=True), "GPTConfig.random_depth: must be .lo, hi."),
        (lambda: HyperSETConfig(random_depth=(3, 1)), "HyperSETConfig.random_depth: .*lo <= hi"),
        (lambda: HyperSETConfig.from_dict({"random_depth": [1, 2**40]}), "HyperSETConfig.random_depth: .*2\\*\\*31"),
    ],
)
def test_bad_depth_options_are_one_line_errors(build, match):
    with pytest.raises(UserError, match=match) as info:
        build()
    assert "\n" not in str(info.value)


def reference_iterate(model, x, passes, stop):
    """`iterate` by one forward per depth: each row's answer at k is its prediction at the first pass j <= k whose
    prediction equals pass j - 1's (with ``stop``), else at k; and that j at the largest k."""
    preds = [model(x, n_layer=k).argmax(-1) for k in range(1, max(passes) + 1)]

    def settled(b, k):
        return next((j for j in range(2, k + 1) if stop and torch.equal(preds[j - 1][b], preds[j - 2][b])), k)

    out = {k: torch.stack([preds[settled(b, k) - 1][b] for b in range(len(x))]) for k in passes}
    return out, torch.tensor([settled(b, max(passes)) for b in range(len(x))])


@pytest.mark.parametrize("stop", [False, True])
def test_iterate_is_the_forward_at_each_count_and_stops_settled_boards(stop):
    from bdh.tasks.depth import iterate

    model = models()["gpt-shared"].eval()  # at this seed some boards settle before pass 9 and some do not
    x = torch.randint(0, 10, (6, 81), generator=torch.Generator().manual_seed(3))
    passes = [1, 2, 5, 9]
    got, used = iterate(model, x, passes, stop=stop)
    want, settled_at = reference_iterate(model, x, passes, stop)
    for k in passes:
        assert torch.equal(got[k], want[k])  # argmaxes of logits that agree within ATOL (no near-ties at this seed)
    assert torch.equal(used, settled_at)
