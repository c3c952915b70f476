"""The shared skeleton `MixerLM`: its parameter formula for every norm and second branch, its initialisation
(Zoology's, then the modules' own ``reset_special`` last) and its clear errors."""

from __future__ import annotations

import math
from types import SimpleNamespace

import pytest
import torch
from torch import nn

from bdh.baselines.common import count_params
from bdh.baselines.mixer_lm import MLP, MixerLM, norm_params, skeleton_params

V, D = 50, 12


def config(hidden: int = 0) -> SimpleNamespace:
    return SimpleNamespace(vocab_size=V, n_embd=D, hidden=hidden, embed_dropout=0.0, ln_eps=1e-5, norm_eps=1e-6)


class Special(nn.Module):
    """A mixer whose own init (weight 7, bias -1) the skeleton's N(0, 0.02) and zero biases would overwrite."""

    def __init__(self) -> None:
        super().__init__()
        self.proj = nn.Linear(D, D)

    def reset_special(self) -> None:
        with torch.no_grad():
            self.proj.weight.fill_(7.0)
            self.proj.bias.fill_(-1.0)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.proj(x)


def mixers(n: int) -> list[nn.Module]:
    return [nn.Linear(D, D, bias=False) for _ in range(n)]


@pytest.mark.parametrize("norm", ["layer", "rms"])
@pytest.mark.parametrize("hidden", [0, 20])
def test_the_skeleton_formula_counts_the_mlp_skeleton_with_either_norm(norm, hidden):
    model = MixerLM(config(hidden), mixers(3), norm=norm)
    assert count_params(model) == skeleton_params(V, D, hidden, 3, norm=norm) + 3 * D * D
    n = 2 * D if norm == "layer" else D
    assert skeleton_params(V, D, hidden, 3, norm=norm) == V * D + n + 3 * (
        n + (n + 2 * D * hidden + hidden + D if hidden else 0)
    )


@pytest.mark.parametrize("norm", ["layer", "rms"])
def test_the_skeleton_formula_counts_the_norms_of_branches_of_the_subclass(norm):
    branches: list[nn.Module | None] = [nn.Linear(D, D, bias=False), nn.Linear(D, D, bias=False)]
    model = MixerLM(config(hidden=99), mixers(2), norm=norm, branches=branches)  # given branches: no MLP
    assert count_params(model) == skeleton_params(V, D, 0, 2, norm=norm, own_branch=True) + 4 * D * D
    assert skeleton_params(V, D, 0, 2, norm=norm, own_branch=True) - skeleton_params(V, D, 0, 2, norm=norm) == (
        2 * norm_params(norm, D)
    )
    bare = MixerLM(config(hidden=99), mixers(2), norm=norm, branches=[None, None])
    assert count_params(bare) == skeleton_params(V, D, 0, 2, norm=norm) + 2 * D * D
    assert all(block.branch is None and block.ln2 is None for block in bare.blocks)


def test_the_norm_is_the_one_chosen_with_its_configured_epsilon():
    rms = MixerLM(config(), mixers(1), norm="rms")
    assert all(isinstance(m, nn.RMSNorm) and m.eps == 1e-6 for m in (rms.ln_f, rms.blocks[0].ln1))
    ln = MixerLM(config(), mixers(1))
    assert all(isinstance(m, nn.LayerNorm) and m.eps == 1e-5 for m in (ln.ln_f, ln.blocks[0].ln1))
    assert isinstance(MixerLM(config(hidden=8), mixers(1)).blocks[0].branch, MLP)


def test_zoology_init_then_the_modules_own_init_last():
    torch.manual_seed(0)
    L = 2
    model = MixerLM(config(hidden=64), [Special() for _ in range(L)])
    for block in model.blocks:
        assert (block.mixer.proj.weight == 7).all() and (block.mixer.proj.bias == -1).all()
        assert (block.branch.fc1.bias == 0).all()
        # 64 x 12 = 768 draws: the sample std is within 15% of its sigma (about 6 standard errors)
        assert block.branch.fc1.weight.std().item() == pytest.approx(0.02, rel=0.15)
        assert block.branch.fc2.weight.std().item() == pytest.approx(0.02 / math.sqrt(2 * L), rel=0.15)
    assert model.embed.weight.std().item() == pytest.approx(0.02, rel=0.15)  # 600 draws


def test_bad_choices_fail_with_one_line():
    with pytest.raises(ValueError, match="norm must be one of"):
        MixerLM(config(), mixers(1), norm="batch")
    with pytest.raises(ValueError, match="2 mixers but 1 branches"):
        MixerLM(config(), mixers(2), branches=[None])
    with pytest.raises(ValueError, match="either the MLP"):
        skeleton_params(V, D, 8, 2, own_branch=True)
