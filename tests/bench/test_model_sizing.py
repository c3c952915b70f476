"""The bench sizes every model through the registry (``config_class.for_budget``): the same configs as a direct
search over the width for the built-in models (`direct`, written out when the registry path was introduced), and the
sections of the default and ``--quick`` sweeps pinned."""

from __future__ import annotations

import dataclasses
import inspect
from pathlib import Path

import pytest
import torch

from bdh import registry
from bdh.baselines.baseconv import BaseConvConfig
from bdh.baselines.based import BasedConfig
from bdh.baselines.gla import GLAConfig
from bdh.baselines.gpt import gpt_config_for_params
from bdh.baselines.hyperset import HyperSETConfig
from bdh.bench import boardpath, boards, recall, sudoku
from bdh.bench.models import (
    BDH_STATES,
    BDH_VARIANTS,
    REFERENCE,
    ZOO_VARIANTS,
    bdh_params,
    bdh_section,
    bench_models,
    budget_config,
    section_of,
    sized_section,
    suite_models,
)
from bdh.bench.spec import BenchError
from bdh.errors import UserError
from bdh.sizing import closest_by_params

#: the models a suite compares by default
SUITES = [recall.MODELS, boards.MODELS]
#: the built-in models whose search `direct` writes out -> the forms they have (causal True, bidirectional False)
DIRECT = {"gpt": (True, False), "baseconv": (True,), "hyperset": (False,), "based": (True,), "gla": (True,)}


def direct(model: str, budget: int, *, vocab_size: int, seq_len: int, n_layer: int, n_head: int, causal: bool):
    """The config each built-in model of `DIRECT` got from the bench before the registry path: a search written out
    per model, pinning those searches (a model added later needs no entry: its ``for_budget`` is its search)."""
    if model == "gpt":
        return gpt_config_for_params(
            budget, n_layer=n_layer, n_head=n_head, vocab_size=vocab_size, seq_len=seq_len, causal=causal
        )
    if model == "baseconv":
        return closest_by_params(
            budget, lambda d: BaseConvConfig(vocab_size=vocab_size, seq_len=seq_len, n_layer=n_layer, n_embd=d), 2
        )
    if model == "hyperset":
        return closest_by_params(
            budget,
            lambda d: HyperSETConfig(
                vocab_size=vocab_size, seq_len=seq_len, n_embd=d, n_head=n_head, n_recur=n_layer, time_freq=64
            ),
            step=n_head,
        )
    if model == "based":  # one head (Zoology's Based), even widths
        return closest_by_params(
            budget, lambda d: BasedConfig(vocab_size=vocab_size, seq_len=seq_len, n_layer=n_layer, n_embd=d), 2
        )
    if model == "gla":  # the bench's heads; keys of d / 2 split over them: widths in steps of 2 n_head
        return closest_by_params(
            budget,
            lambda d: GLAConfig(vocab_size=vocab_size, seq_len=seq_len, n_layer=n_layer, n_embd=d, n_head=n_head),
            2 * n_head,
        )
    raise AssertionError(f"no direct search for {model!r}")


def test_every_model_the_bench_can_size_is_sized_by_one_classmethod():
    for models in SUITES:
        assert REFERENCE in models and set(models) <= set(bench_models())
    signatures = set()
    for m in bench_models():
        if m != REFERENCE and m not in BDH_VARIANTS and m not in BDH_STATES and m not in ZOO_VARIANTS:
            method = registry.get_model(m).config_class.for_budget
            signatures.add(tuple(map(str, inspect.signature(method).parameters.values())))
    assert len(signatures) == 1, signatures  # the same parameters on every config class (their own return type)
    assert set(DIRECT) < set(bench_models())


@pytest.mark.parametrize(
    "width,n_layer,n_head,neuron_mult", [(16, 2, 4, 8), (32, 2, 4, 16), (64, 4, 4, 16), (48, 3, 2, 8)]
)
def test_the_registry_path_gives_the_config_of_a_direct_search(width, n_layer, n_head, neuron_mult):
    for model, forms in DIRECT.items():
        for causal in forms:
            vocab, seq_len = (128, 64) if causal else (10, 81)
            sizes = dict(vocab_size=vocab, seq_len=seq_len, n_layer=n_layer, n_head=n_head)
            reference = bdh_section(width, n_layer=n_layer, n_head=n_head, neuron_mult=neuron_mult, causal=causal)
            budget = bdh_params(reference, vocab)
            want = direct(model, budget, **sizes, causal=causal)
            options = {"hyperset": {"time_freq": 64}}
            assert budget_config(model, budget, **sizes, causal=causal, **options.get(model, {})) == want
            got = sized_section(model, width, **sizes, neuron_mult=neuron_mult, causal=causal, options=options)
            assert got == section_of(want, model)


def _sections(specs) -> dict[str, tuple[int, int | None]]:
    """model -> (n_embd, parameter count of a baseline section; None for BDH)."""
    out = {}
    for s in specs:
        fields = {k: v for k, v in s.model_section.items() if k != "name"}
        n = None if s.model == REFERENCE else registry.get_model(s.model).config_class(**fields).num_params()
        out[s.model] = (fields["n_embd"], n)
    return out


# the sections of `bdh bench <suite> [--quick] --dry-run` when the registry path was introduced
@pytest.mark.parametrize(
    "suite,quick,want",
    [
        ("recall", False, {"bdh": (32, None), "gpt": (44, 56_144), "baseconv": (52, 57_680)}),
        ("recall", True, {"bdh": (16, None), "gpt": (16, 8_128), "baseconv": (18, 7_840)}),
        ("boardpath", False, {"bdh": (32, None), "gpt": (32, 52_192), "hyperset": (72, 50_058)}),
        ("boardpath", True, {"bdh": (16, None), "gpt": (16, 6_928), "hyperset": (26, 6_747)}),
        ("sudoku", False, {"bdh": (32, None), "gpt": (64, 52_480), "hyperset": (72, 50_130)}),  # the recipe too
        ("sudoku", True, {"bdh": (16, None), "gpt": (22, 6_952), "hyperset": (24, 6_348)}),  # the recurrent recipe
    ],
)
def test_the_default_sweeps_sections_are_pinned(suite, quick, want):
    module = {"recall": recall, "boardpath": boardpath, "sudoku": sudoku}[suite]
    sweep_class = {"recall": recall.RecallSweep, "boardpath": boardpath.BoardPathSweep, "sudoku": sudoku.SudokuSweep}
    sweep = sweep_class[suite].preset("quick") if quick else sweep_class[suite]()
    specs = module.plan(sweep, (Path("train.csv"), Path("val.csv"))) if suite == "sudoku" else module.plan(sweep)
    assert _sections(specs) == want


def test_a_suite_names_only_registered_models():
    with pytest.raises(BenchError, match="'nosuch' is not a registered model"):
        suite_models("recall", "bdh", "nosuch")


def test_a_model_without_for_budget_is_refused_in_one_line(monkeypatch):
    class Plain:
        """A config class that cannot be sized to a budget."""

    class NoBudget:
        model_type = "nobudget"
        config_class = Plain

    monkeypatch.setitem(registry._ADDED["model"], "nobudget", NoBudget)
    with pytest.raises(BenchError, match="Plain has no for_budget"):
        budget_config("nobudget", 1000, vocab_size=8, seq_len=8, n_layer=1, n_head=1, causal=True)
    # registered, but not a name a suite accepts: refused when the sweep is built, naming what is accepted
    assert "nobudget" in registry.names("model") and "nobudget" not in bench_models()
    with pytest.raises(UserError, match=r"^recall\.models: must be one of bdh, .*; got \['bdh', 'nobudget'\]$"):
        dataclasses.replace(recall.RecallSweep.preset("quick"), models=("bdh", "nobudget"))


def test_a_model_refuses_the_form_it_does_not_have():
    with pytest.raises(UserError, match="causal"):
        BaseConvConfig.for_budget(10_000, vocab_size=16, seq_len=16, n_layer=2, n_head=4, causal=False)
    with pytest.raises(UserError, match="causal"):
        HyperSETConfig.for_budget(10_000, vocab_size=16, seq_len=16, n_layer=2, n_head=4, causal=True)


@pytest.mark.parametrize("row", list(ZOO_VARIANTS))
def test_a_zoo_row_with_options_is_its_model_sized_with_them(row):
    """The row's section names the registered model and carries its fields; sized to BDH's count as that model with
    those fields (by parameters here; by state in tests/experiments/test_length.py)."""
    base, fields = ZOO_VARIANTS[row]
    sizes = dict(vocab_size=128, seq_len=64, n_layer=2, n_head=2)
    got = sized_section(row, 32, **sizes, neuron_mult=8, causal=True)
    budget = bdh_params(bdh_section(32, n_layer=2, n_head=2, neuron_mult=8, causal=True), 128)
    assert got == section_of(budget_config(base, budget, **sizes, causal=True, **fields), base)
    assert got["name"] == base and all(got[k] == v for k, v in fields.items())
    registry.get_model(base)(registry.get_model(base).config_class(**{k: v for k, v in got.items() if k != "name"}))


def test_the_slow_gated_deltanet_starts_with_half_lives_past_the_training_gaps():
    """gated-deltanet-slow's gate at initialisation: every head's half-life ln 2 / (A softplus(dt_bias)) within
    [433, 69,315] tokens (A in [1, 16], dt in [1e-5, 1e-4]); Mamba2's default reaches below one token."""
    import math

    base, fields = ZOO_VARIANTS["gated-deltanet-slow"]
    cls = registry.get_model(base)
    for options, low, high in ((fields, 433, 69_315), ({}, 0.4, 700)):
        torch.manual_seed(0)
        model = cls(cls.config_class(vocab_size=16, n_embd=32, n_head=8, **options))
        mixer = model.blocks[0].mixer
        rate = mixer.A_log.exp() * torch.nn.functional.softplus(mixer.dt_bias)
        half = math.log(2) / rate
        assert half.min() >= low * 0.99 and half.max() <= high * 1.01
