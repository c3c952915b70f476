"""BDH taken apart in the recall bench: the rows ``bdh-qk``, ``bdh-nogate``, ``bdh-noexpand``, ``bdh-unshared``."""

from __future__ import annotations

import csv
import dataclasses

import pytest

from bdh.bench import recall
from bdh.bench.models import BDH_VARIANTS, REFERENCE, bdh_params
from bdh.cli import main
from bdh.errors import UserError
from bdh.model.config import ABLATIONS, BDHConfig
from bdh.viz.plots import MODEL_NAMES

VARIANTS = tuple(BDH_VARIANTS)


def _config(section: dict, vocab_size: int) -> BDHConfig:
    return BDHConfig(**{**{k: v for k, v in section.items() if k != "name"}, "vocab_size": vocab_size})


def test_each_variant_turns_on_one_ablation_and_all_are_named():
    assert sorted(BDH_VARIANTS.values()) == sorted(ABLATIONS)
    assert all(v in MODEL_NAMES for v in VARIANTS)  # a display name for the figures
    assert set(recall.RecallSweep().models) == set(recall.MODELS)  # not run by default


def test_the_variant_sections_are_bdh_with_one_ablation():
    sweep = dataclasses.replace(
        recall.RecallSweep.preset("quick"), models=("bdh", *VARIANTS), bdh_damping="alibi", widths=(16, 32)
    )
    specs = recall.plan(sweep)
    V = sweep.vocab_size
    for width in sweep.widths:
        sections = {s.model: s.model_section for s in specs if s.width == width}
        ref = _config(sections["bdh"], V)
        for name, ablation in BDH_VARIANTS.items():
            section = sections[name]
            cfg = _config(section, V)
            assert section["name"] == REFERENCE and cfg.ablations() == (ablation,), name
            assert cfg.damping == "alibi" and cfg.n_layer == ref.n_layer and cfg.n_head == ref.n_head
            if ablation != "unshared_layers":  # the same width
                assert cfg.n_embd == width
        qk, nogate = _config(sections["bdh-qk"], V), _config(sections["bdh-nogate"], V)
        noexp, unshared = _config(sections["bdh-noexpand"], V), _config(sections["bdh-unshared"], V)
        assert nogate.num_params() == ref.num_params() and nogate.state_size() == ref.state_size()
        assert qk.num_params() == ref.num_params() + ref.n * ref.n_embd and qk.state_size() == ref.state_size()
        assert noexp.n == ref.n_head * width and noexp.state_size() < ref.state_size()
        # unshared: narrower, the expansion n / D kept, the count within one width step's change of BDH's
        budget = bdh_params(sections["bdh"], V)
        assert unshared.n_embd < width and unshared.n // unshared.n_embd == ref.n // ref.n_embd
        wider = unshared.replace(n_embd=unshared.n_embd + 1)
        assert abs(unshared.num_params() - budget) <= wider.num_params() - unshared.num_params()


def test_an_unknown_variant_is_refused_in_one_line():
    with pytest.raises(UserError, match="recall.models") as err:
        dataclasses.replace(recall.RecallSweep.preset("quick"), models=("bdh", "bdh-nokeys"))
    assert "\n" not in str(err.value)


def test_the_variants_run_as_rows_of_the_recall_suite(tmp_path):
    out = tmp_path / "bench"
    argv = ["bench", "recall", "--quick", "--steps", "2", "--threads", "1", "--out", str(out)]
    assert main([*argv, "--models", ",".join(("bdh", *VARIANTS))]) == 0
    with open(out / "runs.csv", newline="", encoding="utf-8") as f:
        rows = {r["model"]: r for r in csv.DictReader(f)}
    assert set(rows) == {"bdh", *VARIANTS}
    params = {m: int(r["params"]) for m, r in rows.items()}
    state = {m: int(r["state_size"]) for m, r in rows.items()}
    assert params["bdh-qk"] > params["bdh"] == params["bdh-nogate"]
    assert state["bdh-noexpand"] < state["bdh"] == state["bdh-qk"] == state["bdh-nogate"]
    assert all(0.0 <= float(r["accuracy"]) <= 1.0 and float(r["cpu_s_per_step"]) > 0 for r in rows.values())
