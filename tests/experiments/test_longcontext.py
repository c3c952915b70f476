"""``bdh experiment long-context``: the probes against brute force, the config's one-line refusals, and the
quick experiment end to end, resumed."""

from __future__ import annotations

import json
import math
from collections import Counter

import pytest
import torch

from bdh.cli import main
from bdh.errors import UserError
from bdh.experiments.longcontext import RECIPES, Config
from bdh.experiments.longcontext.probes import NGramModel, compression_ratio
from bdh.model import BDH, BDHConfig


def brute_witten_bell(data: bytes, n: int, text: bytes) -> float:
    """The Witten-Bell interpolation written out with dictionaries, one byte at a time."""
    unigram = Counter(data)
    counts = [Counter(data[i : i + k + 1] for i in range(len(data) - k)) for k in range(1, n)]
    totals = [Counter() for _ in range(1, n)]
    followers = [dict() for _ in range(1, n)]
    for k in range(1, n):
        for gram, c in counts[k - 1].items():
            totals[k - 1][gram[:-1]] += c
            followers[k - 1].setdefault(gram[:-1], set()).add(gram[-1])
    bits = []
    for t in range(n - 1, len(text)):
        w = text[t]
        p = (unigram[w] + 1) / (len(data) + 256)
        for k in range(1, n):
            h = text[t - k : t]
            if totals[k - 1][h]:
                t_h = len(followers[k - 1][h])
                p = (counts[k - 1][h + bytes([w])] + t_h * p) / (totals[k - 1][h] + t_h)
        bits.append(-math.log2(p))
    return sum(bits) / len(bits)


def test_ngram_matches_brute_force():
    data = b"to be or not to be, that is the question: whether tis nobler in the mind to suffer" * 3
    for n in (1, 2, 3, 5):
        judge = NGramModel(data, n)
        for text in (b"to be or not to suffer the question", b"xqzj to be zzzz"):
            assert judge.bits(text) == pytest.approx(brute_witten_bell(data, n, text), rel=1e-9)
    judge = NGramModel(data, 3)
    assert judge.bits(b"to be or not to be, that is") < judge.bits(b"zqxv jkwq pqzm, vvvv xq qq")
    with pytest.raises(UserError):
        NGramModel(data, 9)
    assert compression_ratio(b"an" * 500) < compression_ratio(data[:1000])


@pytest.mark.parametrize(
    "field, value, message",
    [
        ("recipes", "official,nope", "unknown recipe 'nope'"),
        ("recipes", "alibi,alibi", "named twice"),
        ("seeds", "0,x", "comma-separated list of int"),
        ("recall_distances", "64,-1", "distances must be >= 1"),
        ("cut_stride", 1000, "at most seq_len"),
    ],
)
def test_bad_config_is_one_line(field, value, message):
    with pytest.raises(UserError, match=message):
        Config(**{field: value})


def test_quick_experiment_end_to_end_and_resumed(tmp_path, capsys, readable_figures):
    out = tmp_path / "lc"
    args = ["experiment", "long-context", "--quick", "--out", str(out), "--threads", "1"]
    assert main(args) == 0
    report = (out / "report.md").read_text()
    results = json.loads((out / "results.json").read_text())
    assert {r["recipe"] for r in results["runs"]} == {"official", "facts", "gpt"}
    for name in ("context.png", "recall.png"):
        assert (out / "figures" / name).stat().st_size > 10_000
    assert set(readable_figures()) == {"context.png", "recall.png"}  # readable at 100 % zoom
    for heading in ("Loss by position", "What the state adds", "Recall through the state", "Long generation"):
        assert heading in report
    gpt = next(r for r in results["runs"] if r["recipe"] == "gpt")
    assert "carried" not in gpt and "cut" in gpt  # a model without a state: the window only
    official = next(r for r in results["runs"] if r["recipe"] == "official")
    assert official["carried"]["edges"] == [0, 32, 64, 128, 256, 512, 1024, 2048]
    assert all(math.isfinite(b) for b in official["carried"]["bits"])
    assert set(official["generation"]) >= {"ngram_first", "ngram_last", "zlib_first", "zlib_last"}
    capsys.readouterr()
    (out / "results" / "gpt-s0.json").unlink()  # as if interrupted before the last run was measured
    assert main([*args, "--resume"]) == 0
    err = capsys.readouterr().err
    assert err.count("already measured, reused") == 2 and "training gpt" in err
    assert main([*args[:-2], "--resume", "--set", "steps=31"]) == 2  # another config: refused
    assert "was made with another config (differs in steps)" in capsys.readouterr().err


def test_cause_measurements():
    """RoPE scores depend on t - tau only: an empty state at position 50,000 reads as one at 0 (float32 phases
    at 5e4 turns lose about 1e-3 of a radian's precision on the fastest frequencies; 2e-2 bits is well above
    the loss change that makes and far below any effect worth reporting). Damping of 1 is no damping. The far
    share is 0 where nothing is more than T away, positive past it for an undamped model."""
    from bdh.analysis.loss_by_position import carried_curve
    from bdh.experiments.longcontext.cause import damped_curve, far_share, offset_curve

    torch.manual_seed(0)
    model = BDH(BDHConfig(n_layer=2, n_embd=32, n_head=2, n_neurons=256, dropout=0.0)).eval()
    tokens = torch.randint(0, 256, (2, 129), generator=torch.Generator().manual_seed(3))
    zero, far = offset_curve(model, tokens, 16, 0), offset_curve(model, tokens, 16, 50_000)
    assert far.bits() == pytest.approx(zero.bits(), abs=2e-2)
    same = damped_curve(model, tokens, 16, (1.0, 1.0))
    assert same.bits() == pytest.approx(carried_curve(model, tokens, 16).bits(), abs=1e-4)
    assert model.log_u is None  # restored
    damped = damped_curve(model, tokens, 16, (0.5, 0.5))
    assert damped.bits() != pytest.approx(same.bits(), abs=1e-3)
    share = far_share(model, tokens, 16)
    assert math.isnan(share["share"][0]) and share["share"][1] == 0  # the first two chunks: nothing older
    assert all(0 < s < 10 for s in share["share"][2:])
    for options in ({"decay_gate": True}, {"state_write": "delta"}, {"damping": "alibi", "learn_damping": True}):
        other = BDH(BDHConfig(n_layer=1, n_embd=32, n_head=2, n_neurons=64, dropout=0.0, **options)).eval()
        with pytest.raises(UserError, match="needs Eq. 8's state rule with a fixed U"):
            far_share(other, tokens, 16)
        with pytest.raises(UserError, match="needs Eq. 8's state rule with a fixed U"):
            damped_curve(other, tokens, 16, (0.5, 0.5))


def test_word_targets_find_recurring_words_by_distance():
    from bdh.experiments.longcontext.probes import WORD_GIVEN, word_targets

    gap = b" " * 200
    row = b"Hamlet speaks." + gap + b"Hamlet again; Ophelia." + gap * 3 + b"Ophelia x Hamlet"
    buckets, first = word_targets(row, 64)
    h1, h2 = row.index(b"Hamlet"), row.index(b"Hamlet", 1)
    o1, o2 = row.index(b"Ophelia"), row.rindex(b"Ophelia")
    h3 = row.rindex(b"Hamlet")
    # distances: Hamlet 214 (bucket 64-256), Ophelia 617 (256-1024), Hamlet again 624 (256-1024)
    assert buckets[0] == list(range(h2 + WORD_GIVEN - 1, h2 + 5))
    assert buckets[1] == list(range(o2 + WORD_GIVEN - 1, o2 + 6)) + list(range(h3 + WORD_GIVEN - 1, h3 + 5))
    assert first == list(range(h1 + 1, h1 + 5)) + list(range(row.index(b"speaks") + 1, row.index(b"speaks") + 5)) + [
        i for w in (b"again", b"Ophelia") for i in range(row.index(w) + 1, row.index(w) + len(w) - 1)
    ]
    assert o1 > 0


def _recall_run(accuracy: float, control: float, trials: int = 16) -> dict:
    row = {"accuracy": accuracy, "control": control, "recall": accuracy - control, "trials": trials}
    return {"recall": [{"distance": 64, "carried": row}, {"distance": 4096, "carried": row}]}


def test_recall_verdict_needs_the_accuracy_interval_above_the_controls_at_4k():
    from bdh.experiments.longcontext.report import recall_verdict

    # 2 seeds x 16 trials x 5 letters = 160 letters: 10 right reach down to 0.034, 5 of the control up to 0.071
    assert recall_verdict("r", [_recall_run(0.06, 0.03)] * 2)[1] is False
    assert recall_verdict("r", [_recall_run(0.20, 0.03)] * 2)[1] is True
    title, ok, numbers = recall_verdict("r", [{"recall": _recall_run(0.2, 0.0)["recall"][:1]}])
    assert ok is None and "no recall distance" in numbers


def test_facts_recipe_trains_with_the_curriculum():
    config = Config()
    assert config.sections("facts")["task"]["facts"] > 0
    assert config.model_section("gpt-facts")["name"] == "gpt"
    assert "task" not in config.sections("official")


@pytest.mark.parametrize("recipe", list(RECIPES))
def test_every_recipe_trains_the_model_it_names(recipe, tmp_path):
    """Each recipe's run config is what the recipe says, and nothing of the main job's defaults: a recipe that
    sets no damping trains the official, undamped BDH (the main job's ALiBi default once leaked in here)."""
    from bdh.train.config import sweep_run_config

    config = Config(recipes=recipe)
    run = sweep_run_config(
        config.model_section(recipe),
        {"name": "text", "seq_len": config.seq_len},
        tmp_path,
        lr=config.lr,
        steps=3,
        batch_size=2,
        seed=0,
        eval={"every": 0},
        sections=config.sections(recipe),
    )
    wanted = RECIPES[recipe].get("model", {}).get("damping")
    if run.model.name == "bdh":
        assert run.model.config.damping == wanted
    for section, fields in RECIPES[recipe].items():
        if section != "model":
            got = getattr(run, section)
            got = got if isinstance(got, dict) else got.to_dict()
            assert all(got[k] == v for k, v in fields.items())
