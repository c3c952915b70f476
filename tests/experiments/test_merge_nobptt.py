"""The shared experiment pieces, and the merge and no-BPTT experiments end to end at smoke-test size."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from bdh import BDH, BDHConfig
from bdh.experiments import common, merge, nobptt


def test_encode_segment_spans_cover_exactly_the_two_texts():
    data, (s0, s1), (t0, t1) = common.encode_segment("en", "The euro.", "fr", "L'euro é.")
    assert data.decode() == "<F:en>The euro.<T:fr>L'euro é."
    assert data[s0:s1].decode() == "The euro." and data[t0:t1].decode() == "L'euro é."  # multi-byte é counted in bytes


def test_unconditional_losses_score_only_the_target_text():
    torch.manual_seed(1)
    model = BDH(BDHConfig(n_layer=1, n_embd=16, n_head=2, n_neurons=64, dropout=0.0)).eval()
    segs = [("en", "ignored", "es", "Uno corto."), ("fr", "ignored too", "en", "A rather long sentence here.")]
    got = merge.unconditional_losses(model, segs)
    total, count = 0.0, 0
    for _, _, tgt, text in segs:  # one at a time: the delimiter <T:tgt> is read, not scored
        data = f"<T:{tgt}>{text}".encode()
        idx = torch.tensor(list(data))[None]
        with torch.no_grad():
            nll = F.cross_entropy(model(idx[:, :-1])[0], idx[0, 1:], reduction="none")
        start = len(f"<T:{tgt}>") - 1
        total += float(nll[start:].sum())
        count += len(data) - 1 - start
    assert math.isnan(got.source) and got.target_bytes == count == sum(len(t.encode()) for *_, t in segs)
    assert got.target == pytest.approx(total / count, rel=1e-5)


def test_segment_losses_match_a_hand_computed_sum_and_ignore_padding():
    torch.manual_seed(0)
    model = BDH(BDHConfig(n_layer=1, n_embd=16, n_head=2, n_neurons=64, dropout=0.0)).eval()
    segs = [
        ("en", "A short one.", "es", "Uno corto."),
        ("es", "Una frase bastante larga aqui.", "en", "A rather long sentence here."),
    ]
    got = common.segment_losses(model, segs, batch_size=2)
    sums, counts = {1: 0.0, 2: 0.0}, {1: 0, 2: 0}
    for seg in segs:  # one at a time, no padding
        data, (s0, s1), (t0, t1) = common.encode_segment(*seg)
        idx = torch.tensor(list(data))[None]
        with torch.no_grad():
            nll = F.cross_entropy(model(idx[:, :-1])[0], idx[0, 1:], reduction="none")
        for side, (a, b) in ((1, (s0, s1)), (2, (t0, t1))):
            sums[side] += float(nll[a - 1 : b - 1].sum())
            counts[side] += b - a
    assert got.source_bytes == counts[1] and got.target_bytes == counts[2]
    assert got.source == pytest.approx(sums[1] / counts[1], rel=1e-5)
    assert got.target == pytest.approx(sums[2] / counts[2], rel=1e-5)


def test_bigram_model_is_the_smoothed_conditional_frequency():
    data = b"abababac" * 50
    bigram = common.BigramModel(data, alpha=0.0 + 1e-9)
    # after 'a': 'b' 3 times in 4, 'c' once
    assert math.exp(bigram.logp[ord("a"), ord("b")]) == pytest.approx(0.75, rel=1e-6)
    losses = bigram.losses([("en", "ab", "es", "ac")])
    # source side scores '<F:en>' -> 'a' and 'a' -> 'b'; target side 'a' after '>' and 'c' after 'a'
    assert losses.source_bytes == 2 and losses.target_bytes == 2
    assert np.isfinite(losses.source) and losses.target > 0


def test_direction_segments_are_deterministic_and_apart_from_the_training_stream():
    a = common.direction_segments("en", "fr", 5, seed=0)
    assert a == common.direction_segments("en", "fr", 5, seed=0)
    assert a != common.direction_segments("en", "fr", 5, seed=1)
    assert all(s == "en" and t == "fr" for s, _, t, _ in a)


def test_report_writes_markdown_and_json(tmp_path):
    rep = common.Report("Title")
    rep.heading("Part")
    rep.table(["a", "b"], [[1, 0.5], ["x", float("nan")]])
    rep.results = {"value": np.float32(1.5), "array": np.arange(3)}
    path = rep.write(tmp_path)
    text = path.read_text()
    assert text.startswith("# Title") and "| 1 | 0.500 |" in text and "| x | n/a |" in text
    assert json.loads((tmp_path / "results.json").read_text()) == {"value": 1.5, "array": [0, 1, 2]}


def test_configs_refuse_bad_values_in_one_line():
    with pytest.raises(ValueError, match="merge: need a base language and two other"):
        merge.Config(tune_languages=("es", "fr"))
    with pytest.raises(ValueError, match="merge.base_steps"):
        merge.Config(base_steps=0)
    with pytest.raises(ValueError, match="languages must be among"):
        merge.Config(base_language="en")
    with pytest.raises(ValueError, match="not of the form"):
        nobptt.Config(pairs="en")
    with pytest.raises(ValueError, match="no-bptt.lr"):
        nobptt.Config(lr=2.0)


def _findings(path):
    return {f["claim"]: f["held"] for f in json.loads(path.read_text())["findings"]}


def test_merge_experiment_quick_end_to_end(tmp_path, readable_figures):
    out = tmp_path / "merge"
    out.mkdir()
    report = merge.run(merge.Config.preset("quick"), out, log=lambda m: None)
    text = report.read_text()
    results = json.loads((out / "results.json").read_text())
    losses = results["losses"]
    assert set(losses) >= {
        "base",
        "tuned-fr",
        "tuned-pt",
        "merged",
        "averaged",
        "merged, no shared base",
        "unconditional English (no source)",
        "bigram (all pairs' bytes)",
    }
    assert set(losses["merged"]) == {"es>en", "fr>en", "pt>en", "en>es", "en>fr", "en>pt"}
    assert all(math.isfinite(v) for v in losses["merged"].values())
    assert results["params"]["merged"] > results["params"]["tuned-fr"]  # twice the neurons
    assert (out / "figures" / "merge-losses.png").is_file() and "What matched the paper" in text
    assert (out / "runs" / "merged" / "model.safetensors").is_file()
    assert len(results["findings"]) >= 6
    assert "merging" in readable_figures()["merge-losses.png"]
    assert "bits per byte" in (out / "figures" / "merge-losses.svg").read_text()


def test_merge_findings_follow_the_numbers():
    cfg = merge.Config.preset("quick")
    good = {"es>en": 0.4, "fr>en": 0.4, "pt>en": 0.4, "en>es": 1.0, "en>fr": 0.5, "en>pt": 0.5}
    table = {
        "base": {**good, "es>en": 0.3},
        "tuned-fr": {**good, "fr>en": 0.35, "en>fr": 0.3, "en>pt": 2.0, "pt>en": 0.7},
        "tuned-pt": {**good, "pt>en": 0.35, "en>pt": 0.3, "en>fr": 2.0, "fr>en": 0.7},
        "merged": {**good, "fr>en": 0.38, "pt>en": 0.38, "en>fr": 0.8, "en>pt": 0.9},
        "averaged": {k: 2.0 for k in good},
        "merged, no shared base": {k: 1.5 for k in good},
        "unconditional English (no source)": {**{k: 0.65 for k in good}},
    }
    found = {c: h for c, h, _ in merge.findings(cfg, table)}
    assert all(found.values()), found
    table["merged"] = {k: 3.0 for k in good}  # a broken merge fails every claim about it
    found = {c: h for c, h, _ in merge.findings(cfg, table) if not c.startswith("precondition")}
    assert not any(found.values()), found
    table["base"] = good  # a base that reads no source: the precondition says so
    assert merge.findings(cfg, table)[0][1] is False


def test_nobptt_experiment_quick_end_to_end(tmp_path, readable_figures):
    out = tmp_path / "nobptt"
    out.mkdir()
    report = nobptt.run(nobptt.Config.preset("quick"), out, log=lambda m: None)
    results = json.loads((out / "results.json").read_text())
    assert set(results["translation"]) == {"bptt", "no-bptt", "bigram"}
    assert set(results["translation"]["bptt"]) == {"en>es", "es>en", "en>fr", "fr>en"}
    # the two arms share data, seed and schedule, so they only differ by the cut gradient
    assert results["translation"]["bptt"] != results["translation"]["no-bptt"]
    assert set(results["repeat"]["bptt"]) >= {"repeat_accuracy", "fact_accuracy", "warmup_accuracy", "loss"}
    assert (out / "figures" / "nobptt-curves.png").is_file() and "What matched the paper" in report.read_text()
    assert "backpropagation through time" in readable_figures()["nobptt-curves.png"]
    assert "bits per byte" in (out / "figures" / "nobptt-curves.svg").read_text()


def test_nobptt_findings_follow_the_numbers():
    keys = ["en>es", "es>en"]

    def arm(src, tgt):
        return {k: {"source": src, "target": tgt} for k in keys}

    lang = {"bptt": arm(0.5, 0.3), "no-bptt": arm(0.6, 0.9), "bigram": arm(2.4, 2.4)}
    rep = {
        "bptt": {"repeat_accuracy": 0.95, "warmup_accuracy": 0.99},
        "no-bptt": {"repeat_accuracy": 0.05, "warmup_accuracy": 0.98},
    }
    found = nobptt.findings(lang, rep, {"bptt": 0.5, "no-bptt": 0.8}, 2.4)
    assert all(h for _, h, _ in found)
    rep["no-bptt"]["repeat_accuracy"] = 0.9
    found = {c: h for c, h, _ in nobptt.findings(lang, rep, {"bptt": 0.5, "no-bptt": 0.8}, 2.4)}
    assert found["copying the repeated word fails without BPTT (repeat accuracy far below the BPTT arm)"] is False


def test_experiment_command_errors_are_one_line(tmp_path, bdh):
    r = bdh("experiment", "merge", "--set", "nope=1", "--out", str(tmp_path / "a"))
    assert (
        r.returncode == 2
        and r.stderr.startswith("bdh: error: --set: unknown field 'nope'")
        and r.stderr.count("\n") == 1
    )
    r = bdh("experiment", "merge", "--set", "base_steps=0", "--out", str(tmp_path / "b"))
    assert r.returncode == 2 and "merge.base_steps" in r.stderr and r.stderr.count("\n") == 1
    (tmp_path / "full").mkdir()
    (tmp_path / "full" / "x").write_text("x")
    r = bdh("experiment", "no-bptt", "--quick", "--out", str(tmp_path / "full"))
    assert r.returncode == 2 and "--overwrite" in r.stderr and (tmp_path / "full" / "x").read_text() == "x"
    r = bdh("experiment", "no-bptt", "--quick", "--show-config", "--set", "steps=7")
    assert r.returncode == 0 and json.loads(r.stdout)["steps"] == 7
    r = bdh("experiment", "nonsense")
    assert r.returncode == 2 and r.stderr.startswith("bdh: error:")


def test_results_json_takes_numpy_scalars(tmp_path):
    """results.json of an experiment may hold NumPy booleans, integers and floats (the scaling run's fits did)."""
    import json

    import numpy as np

    from bdh.experiments.common import Report

    rep = Report("t")
    rep.results = {"ok": np.bool_(True), "n": np.int64(3), "x": np.float32(0.5), "v": np.arange(2)}
    rep.write(tmp_path / "out")
    assert json.loads((tmp_path / "out" / "results.json").read_text()) == {"ok": True, "n": 3, "x": 0.5, "v": [0, 1]}
