"""What the science plan (benchmarks/gpu_science.py) added to two experiments: the scaling experiment's comparison at
the same wall-clock, and the long-context experiment's device and precision."""

from __future__ import annotations

import math

import pytest

from bdh.errors import UserError
from bdh.experiments.longcontext.config import Config as LongContext
from bdh.experiments.scaling.summary import equal_time, loss_at_seconds


def _run(model: str, seed: int, train_s: float, tokens_per_s: float, curve: list[tuple[int, float]]) -> dict:
    """A made-up run record at size 0, lr 1e-3: its val curve as (tokens, loss) points."""
    val = [[i + 1, tokens, loss] for i, (tokens, loss) in enumerate(curve)]
    record = {"model": model, "size": 0, "lr": 1e-3, "seed": seed, "train_s": train_s, "tok_per_s": tokens_per_s}
    return record | {"curve": {"val": val}, "diverged": False}


def test_a_run_is_read_at_the_tokens_its_throughput_reaches_in_the_time():
    run = _run("bdh", 0, 10.0, 100.0, [(200, 3.0), (400, 2.0), (1000, 1.5)])
    assert loss_at_seconds(run, 3.0) == pytest.approx(2.5)  # 300 tokens: halfway between 200 and 400
    assert loss_at_seconds(run, 10.0) == 1.5 and loss_at_seconds(run, 50.0) == 1.5  # ended: its last point
    assert loss_at_seconds(run, 1.0) is None  # 100 tokens: before its first point, not measured
    assert math.isnan(loss_at_seconds({**run, "diverged": True}, 3.0))


def test_equal_time_reads_both_models_at_the_faster_ones_training_time():
    """GPT trains its 1000 tokens in 1 s, BDH in 10 s: at 1 s BDH has seen 100 tokens of each seed's curve."""
    chosen = {"bdh": (1e-3, {}), "gpt": (1e-3, {})}
    records = []
    for seed, shift in ((0, 0.0), (1, 0.05)):
        records.append(_run("bdh", seed, 10.0, 100.0, [(50, 4.0 + shift), (150, 3.0 + shift), (1000, 1.0)]))
        records.append(_run("gpt", seed, 1.0, 1000.0, [(500, 2.5 + shift), (1000, 2.0 + shift)]))
    c = equal_time(records, chosen, 0)
    # BDH at 100 tokens: 3.5 and 3.55; GPT at its end: 2.0 and 2.05; the ranges do not overlap
    assert c.bdh_mean == pytest.approx(3.525) and c.gpt_mean == pytest.approx(2.025)
    assert c.verdict == "GPT better" and c.seeds == 2
    late = [{**r, "curve": {"val": r["curve"]["val"][1:]}} if r["model"] == "bdh" else r for r in records]
    c = equal_time(late, chosen, 0)  # BDH's first point at 150 tokens: not measured at 100
    assert c.verdict == "undecided" and "curve point" in c.note


def test_long_context_trains_on_the_device_and_precision_it_is_given():
    config = LongContext(device="cuda", precision="bf16")
    assert config.sections("nopos-lg-delta-sp")["train"] == {
        "bptt": "state-passing",
        "device": "cuda",
        "precision": "bf16",
    }
    assert LongContext().sections("alibi") == {"train": {"device": "cpu", "precision": "fp32"}}
    with pytest.raises(UserError, match="precision"):
        LongContext(precision="fp8")
    with pytest.raises(UserError, match="device"):
        LongContext(device="")
