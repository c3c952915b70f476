"""CONTRIBUTING.md's "Adding a model" end to end: one file (a model class and its config class with ``for_budget``),
one registration (`bdh.registry.register_model`), and ``bdh bench recall --models bdh,<name>`` compares it with BDH,
sized to BDH's parameter count, with nothing in the bench or its suites edited."""

from __future__ import annotations

import csv
import json
from dataclasses import dataclass
from typing import Any

import pytest
import torch
from torch import nn

from bdh import registry
from bdh.cli import main
from bdh.model.io import PretrainedMixin
from bdh.model.tokens import check_tokens
from bdh.model_api import ModelConfig
from bdh.sizing import closest_by_params
from bdh.typed_config import bounded


# ---------------------------------------------------------------------- the one file of the recipe
@dataclass
class PrefixMeanConfig(ModelConfig):
    """A stand-in model's config: ``vocab_size`` V, ``n_layer`` L, ``n_embd`` d; causal only."""

    vocab_size: int = bounded(64, ge=1)
    n_layer: int = bounded(2, ge=1)
    n_embd: int = bounded(16, ge=1)
    causal: bool = True

    def __post_init__(self) -> None:
        super().__post_init__()  # the declared ranges
        if self.causal is not True:
            self._fail("causal", "the prefix mean reads the past only; it has no bidirectional form")

    def num_params(self) -> int:
        """V d (the embedding, tied to the readout) + L (d^2 + d) (one linear map per layer)."""
        d = self.n_embd
        return self.vocab_size * d + self.n_layer * (d * d + d)

    @classmethod
    def for_budget(
        cls, params: int, *, vocab_size: int, seq_len: int, n_layer: int, n_head: int, causal: bool, **extra: Any
    ) -> PrefixMeanConfig:
        """The width closest to ``params`` (even widths); no length and no heads; ``causal=False`` is refused by the
        config. The protocol `bdh.sizing.BudgetSized`."""
        return closest_by_params(
            params, lambda d: cls(vocab_size=vocab_size, n_layer=n_layer, n_embd=d, causal=causal, **extra), step=2
        )


class PrefixMean(PretrainedMixin, nn.Module):
    """h <- h + W (mean of h over the prefix) per layer, logits = h E^T: a causal model whose state is one running
    sum of d numbers per layer."""

    model_type = "test-prefix-mean"
    config_class = PrefixMeanConfig

    def __init__(self, config: PrefixMeanConfig):
        super().__init__()
        self.config = config
        self.embed = nn.Embedding(config.vocab_size, config.n_embd)
        self.mix = nn.ModuleList(nn.Linear(config.n_embd, config.n_embd) for _ in range(config.n_layer))

    def num_params(self) -> int:
        return sum(p.numel() for p in self.parameters())

    @property
    def depth(self) -> int:
        """Layer passes of a forward (the bench's ``n_layer`` column)."""
        return self.config.n_layer

    def state_size(self) -> int:
        """The running sum of each layer: L d."""
        return self.config.n_layer * self.config.n_embd

    def forward(self, idx: torch.Tensor) -> torch.Tensor:
        check_tokens("PrefixMean", idx, self.config.vocab_size)
        h = self.embed(idx)
        count = torch.arange(1, idx.shape[1] + 1, device=idx.device, dtype=h.dtype)[:, None]
        for mix in self.mix:
            h = h + mix(torch.cumsum(h, dim=1) / count)
        return h @ self.embed.weight.T


# ---------------------------------------------------------------------- the registration and the bench
@pytest.fixture
def registered():
    """The one registration of the recipe, removed after the test."""
    registry.register_model(PrefixMean)
    try:
        yield PrefixMean.model_type
    finally:
        registry._ADDED["model"].pop(PrefixMean.model_type, None)


def _rows(path) -> list[dict[str, str]]:
    with open(path, newline="", encoding="utf-8") as f:
        return list(csv.DictReader(f))


def test_a_registered_model_with_for_budget_is_compared_by_bdh_bench_recall(registered, tmp_path, capsys):
    out = tmp_path / "bench"
    tiny = ["--quick", "--steps", "3", "--lrs", "1e-3", "--threads", "1", "--out", str(out)]
    assert main(["bench", "recall", *tiny, "--models", f"bdh,{registered}"]) == 0, capsys.readouterr().err
    runs, results = _rows(out / "runs.csv"), _rows(out / "results.csv")
    assert sorted(r["model"] for r in runs) == sorted(["bdh", registered])
    (bdh,) = [r for r in results if r["model"] == "bdh"]
    (mine,) = [r for r in results if r["model"] == registered]
    fields = {k: v for k, v in json.loads(mine["config"])["model"].items() if k != "name"}
    config = PrefixMeanConfig(**fields)
    # its parameter count is the config's closest to BDH's: within the gap between the even widths either side of it
    params, budget, d = int(mine["params"]), int(bdh["params"]), config.n_embd
    assert params == config.num_params() == PrefixMean(config).num_params()
    gap = config.replace(n_embd=d + 2).num_params() - config.replace(n_embd=max(d - 2, 2)).num_params()
    assert abs(params - budget) <= gap / 2, (params, budget, d)
    assert int(mine["state_size"]) == PrefixMean(config).state_size() and int(mine["n_layer"]) == config.n_layer
    assert 0.0 <= float(mine["accuracy"]) <= 1.0
    capsys.readouterr()
    # the suite's default list is its own choice, unchanged by the registration
    assert main(["bench", "recall", "--quick", "--dry-run", "--out", str(tmp_path / "dry")]) == 0
    assert registered not in capsys.readouterr().out


def test_a_suite_refuses_a_registered_model_without_its_form_and_forgets_it_once_removed(registered, tmp_path, capsys):
    argv = ["bench", "boardpath", "--quick", "--dry-run", "--models", f"bdh,{registered}", "--out", str(tmp_path)]
    assert main(argv) == 2  # the boards are read both ways; the stand-in's config refuses causal=False
    err = capsys.readouterr().err
    assert f"--models: '{registered}' cannot run in the boardpath suite: PrefixMeanConfig.causal: " in err
    assert err.count("\n") == 1
    registry._ADDED["model"].pop(registered)
    assert main(["bench", "recall", "--quick", "--dry-run", "--models", f"bdh,{registered}", "--out", str(tmp_path)])
    err = capsys.readouterr().err
    assert "--models: must be one of bdh, " in err and f"got ['bdh', '{registered}']" in err
