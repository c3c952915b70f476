"""Monosemantic synapses (paper section 6.3): the vectorised U, sigma scoring, a planted synapse, the commands."""

import json

import numpy as np
import pytest
import torch
from scipy.stats import mannwhitneyu, rankdata

import bdh
from bdh.analysis.record import head_neurons, record, recover_sigma
from bdh.cli import main
from bdh.experiments import synapses as S
from bdh.tasks.multilingual import concept_sentences, contrast_sentences


def _model(**over):
    torch.manual_seed(0)
    fields = dict(n_layer=3, n_embd=16, n_head=2, n_neurons=64, dropout=0.0)
    fields.update(over)
    return bdh.BDH(bdh.BDHConfig(**fields)).eval()


# ------------------------------------------------------------------------------------------ U and AUC
@pytest.mark.parametrize("ties", [False, True])
def test_vectorised_u_equals_scipy(ties):
    rng = np.random.default_rng(1)
    scores = rng.normal(size=(37, 200))
    if ties:
        scores = np.round(scores * 2) / 2  # many ties within columns
        scores[:, :5] = 0.0  # constant columns
    labels = np.zeros(37, dtype=bool)
    labels[rng.choice(37, 15, replace=False)] = True
    u = S.mann_whitney_u(scores, labels, chunk=64)
    for c in range(scores.shape[1]):
        ref = mannwhitneyu(scores[labels, c], scores[~labels, c], alternative="greater").statistic
        assert u[c] == pytest.approx(ref)
    # the average-rank form R_1 - n_1 (n_1 + 1) / 2 gives the same U
    ranks = rankdata(scores, axis=0)
    assert np.allclose(u, ranks[labels].sum(axis=0) - 15 * 16 / 2)


def test_u_rejects_bad_input():
    with pytest.raises(ValueError):
        S.mann_whitney_u(np.zeros((4, 3)), np.ones(4, dtype=bool))
    with pytest.raises(ValueError):
        S.mann_whitney_u(np.full((4, 3), np.nan), np.array([1, 0, 1, 0], dtype=bool))


def test_mann_whitney_test_reports_u_p_and_r():
    pos, neg = np.arange(10.0, 20.0), np.arange(0.0, 10.0)
    t = S.mann_whitney_test(pos, neg)
    assert t["U"] == t["U_opt"] == 100 and t["auc"] == 1.0 and t["r"] == 1.0 and t["p"] < 1e-3
    t = S.mann_whitney_test(neg, pos)
    assert t["U"] == 0 and t["r"] == -1.0 and t["p"] > 0.99
    t = S.mann_whitney_test(np.ones(5), np.ones(5))
    assert t["auc"] == 0.5 and t["p"] == 1.0


# ------------------------------------------------------------------------------------------ scoring
@pytest.mark.parametrize("rotate", [False, True])
def test_sentence_scores_equal_recover_sigma(rotate):
    model = _model()
    sents = concept_sentences("currency", 3, "en", seed=5) + contrast_sentences("currency", 2, "fr", seed=5)
    layer, head = 2, 1
    sc = S.score_sentences(model, sents, layer, head, rotate=rotate, batch_size=2)
    N = model.config.N
    hn = head_neurons(model.config, head)
    for k, s in enumerate(sents):
        data, off = S.sentence_bytes(s)
        assert data[:off] == f"<F:{s.language}>".encode() and sc.lengths[k] == len(data)
        rec = record(model, torch.tensor(list(data)).view(1, -1))
        ref = recover_sigma(rec, layer, rows=hn, cols=hn, rotate=rotate)
        assert torch.allclose(torch.from_numpy(sc.end[k]).view(N, N), ref, rtol=1e-4, atol=1e-5)
        Y, X = rec.y[layer - 1][0, head], rec.x[layer][0, head]
        inc = (Y[:, :, None] * X[:, None, :]).amax(dim=0)
        assert torch.allclose(torch.from_numpy(sc.max[k]).view(N, N), inc, rtol=1e-5, atol=1e-6)
    # a subset of synapses gives the same numbers
    rows, cols = np.array([3, 0, 3]), np.array([5, 7, 1])
    sub = S.score_sentences(model, sents, layer, head, rotate=rotate, pairs=(rows, cols))
    assert np.allclose(sub.end, sc.end[:, rows * N + cols], rtol=1e-5, atol=1e-6)
    assert np.allclose(sub.max, sc.max[:, rows * N + cols])


def test_traces_add_up_to_the_end_of_sentence_sigma():
    model = _model()
    s = concept_sentences("currency", 1, "en", seed=2)[0]
    data, _ = S.sentence_bytes(s)
    sc = S.score_sentences(model, [s], 2, 0, pairs=(np.array([4]), np.array([9])))
    tr = S.synapse_traces(model, data, 2, 0, 4, 9)
    assert tr["sigma"][-1] == pytest.approx(float(sc.end[0, 0]), rel=1e-4, abs=1e-6)
    assert np.allclose(np.cumsum(tr["increment"]), tr["sigma"], rtol=1e-4, atol=1e-6)
    rot = S.synapse_traces(model, data, 2, 0, 4, 9, rotate=True)
    sc_rot = S.score_sentences(model, [s], 2, 0, rotate=True, pairs=(np.array([4]), np.array([9])))
    assert rot["sigma"][-1] == pytest.approx(float(sc_rot.end[0, 0]), rel=1e-4, abs=1e-6)


# ------------------------------------------------------------------------------------------ a planted synapse
def test_a_planted_separating_synapse_is_found_and_validated():
    rng = np.random.default_rng(0)
    N = 16
    labels = np.r_[np.ones(40, bool), np.zeros(40, bool)]
    scores = rng.normal(size=(80, N * N)).astype(np.float32)
    planted = 5 * N + 11
    scores[:, planted] = np.where(labels, 1.0, 0.0) + rng.uniform(0, 0.5, 80)
    found = S.search(scores, labels, top_k=3)
    assert found.top[0] == planted and found.auc[planted] == 1.0
    assert divmod(int(found.top[0]), N) == (5, 11)
    pos = 1.0 + rng.uniform(0, 0.5, 50)
    neg = rng.uniform(0, 0.5, 50)
    t = S.mann_whitney_test(pos, neg)
    assert t["U"] == t["U_opt"] == 2500 and t["p"] < 1e-14
    # with shuffled labels nothing separates perfectly
    shuffled = S.search(scores, rng.permutation(labels), top_k=1)
    assert shuffled.auc[shuffled.top[0]] < 1.0


def test_search_breaks_auc_ties_by_effect_size():
    labels = np.r_[np.ones(4, bool), np.zeros(4, bool)]
    scores = np.zeros((8, 3))
    scores[:, 0] = np.r_[2, 2, 2, 0, 1.9, 1.9, 1.9, 1.5]  # AUC 0.75
    scores[:, 1] = np.r_[1, 1, 1, 1, 0, 0, 0, 0.9]  # AUC 1, a near miss
    scores[:, 2] = np.r_[1, 1, 1, 1, 0, 0, 0, 0]  # AUC 1, the larger margin
    found = S.search(scores, labels, top_k=3)
    assert list(found.top) == [2, 1, 0]
    assert found.auc[1] == found.auc[2] == 1.0 and found.effect[2] > found.effect[1]


# ------------------------------------------------------------------------------------------ sentence sets
def test_sentence_sets_are_disjoint_length_matched_and_seeded():
    opts = S.SynapseOptions(search=40, heldout=20)
    sets = S.sentence_sets(opts)
    assert not {s.text for s in sets.search} & {s.text for s in sets.heldout_pos + sets.heldout_neg}
    assert all(s.has_concept for s in sets.search_pos + sets.heldout_pos + sets.second_pos)
    assert not any(s.has_concept for s in sets.search_neg + sets.heldout_neg + sets.second_neg)
    assert all(s.language == "fr" for s in sets.second_pos + sets.second_neg)
    lengths = S.length_baseline(sets, prefix=True)
    unmatched = S.length_baseline(
        S.sentence_sets(S.SynapseOptions(search=40, heldout=20, match_length=False)), prefix=True
    )
    assert abs(lengths["en"] - 0.5) < abs(unmatched["en"] - 0.5)
    again = S.sentence_sets(opts)
    assert [s.text for s in again.search] == [s.text for s in sets.search]


def test_examples_show_different_surface_forms():
    ex = S.examples(S.SynapseOptions())
    assert len(ex) == 4
    text = [e.data.decode() for e in ex]
    assert "British pound" in text[0] and "livre sterling" in text[0]
    assert text[0].startswith("<F:en>") and text[2].startswith("<F:fr>")
    for e in ex:
        assert e.source[1] <= e.target[0]
    assert ex[0].concept_spans and not ex[1].concept_spans


def test_options_and_config_errors():
    with pytest.raises(ValueError, match="concept"):
        S.SynapseOptions(concept="weather")
    with pytest.raises(ValueError, match="layer"):
        S.SynapseOptions(layer=0)
    with pytest.raises(ValueError, match="second_language"):
        S.SynapseOptions(language="fr", second_language="fr")
    with pytest.raises(ValueError, match="head"):
        S.Config(head=4)
    with pytest.raises(ValueError, match="layer"):
        S.Config(layer=4)
    with pytest.raises(ValueError, match="language"):
        S.Config(pairs=(("en", "es"),), second_language="fr")
    with pytest.raises(ValueError, match="head"):
        S.SynapseOptions(head=2).check_model(_model())
    assert S.SynapseOptions().check_model(_model()) == 1  # floor(5 * 3 / 8)


# ------------------------------------------------------------------------------------------ commands
@pytest.fixture(scope="module")
def tiny_run(tmp_path_factory):
    """A tiny model trained for a few steps on the translation stream."""
    from bdh.experiments.common import ModelSize, train_lm, write_corpus

    root = tmp_path_factory.mktemp("syn")
    data = write_corpus(root / "corpus.txt", [("en", "fr")], 60_000, seed=0)
    train_lm(
        root / "run",
        data,
        ModelSize(n_layer=2, n_embd=16, n_head=2, n_neurons=128),
        steps=6,
        batch_size=4,
        seq_len=48,
        lr=3e-3,
        threads=1,
    )
    return root / "run"


def test_synapses_command_on_a_trained_model(tiny_run, tmp_path, capsys, readable_figures):
    out = tmp_path / "rep"
    assert main(["synapses", str(tiny_run), "--search", "16", "--heldout", "8", "--top", "2", "--out", str(out)]) == 0
    res = json.loads((out / "results.json").read_text())
    assert res["layer"] == 1 and res["candidates"] == 64 * 64
    assert set(res["models"]) == {"trained", "untrained", "shuffled labels"}
    head = res["headline"]
    assert head["en"]["U_opt"] == 64 and 0 <= head["en"]["U"] <= 64
    assert head["en"]["r"] == pytest.approx(2 * head["en"]["U"] / 64 - 1)
    assert "fr" in head and len(res["models"]["trained"]["end"]["heldout"]["en"]) == 2
    report = (out / "report.md").read_text()
    assert "What matched the paper and what did not" in report
    for name in ("fig12_synapse_trace", "fig13_mechanism", "search_auc"):
        assert (out / "figures" / f"{name}.png").is_file() and (out / "figures" / f"{name}.svg").is_file()
    assert "U/U_opt" in capsys.readouterr().out
    titles = readable_figures()  # the per-byte figures give each byte's character room at the smallest font
    assert "cf. Fig. 12" in titles["fig12_synapse_trace.png"] and "nulls" in titles["search_auc.png"]


@pytest.mark.parametrize(
    "extra, message",
    [
        (["--layer", "2"], "--layer"),
        (["--layer", "0"], "--layer"),
        (["--head", "2"], "--head"),
        (["--concept", "weather"], "--concept"),
        (["--second-language", "en"], "--second-language"),
        (["--search", "1"], "--search"),
    ],
)
def test_synapses_command_errors(tiny_run, tmp_path, capsys, extra, message):
    assert main(["synapses", str(tiny_run), "--out", str(tmp_path / "x"), *extra]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("bdh: error:") and message in err and "\n" not in err


def test_synapses_command_needs_a_bdh_model(tmp_path, capsys):
    assert main(["synapses", str(tmp_path / "missing")]) == 2
    assert "no such" in capsys.readouterr().err
    empty = tmp_path / "empty"
    empty.mkdir()
    assert main(["synapses", str(empty)]) == 2
    assert "holds no model" in capsys.readouterr().err
    from bdh.baselines.gpt import GPT, GPTConfig

    gpt = tmp_path / "gpt"
    GPT(GPTConfig(n_layer=2, n_embd=16, n_head=2)).save_pretrained(gpt)
    assert main(["synapses", str(gpt), "--out", str(tmp_path / "o")]) == 2
    assert "needs a BDH model" in capsys.readouterr().err


@pytest.fixture
def unrendered_figures(monkeypatch):
    """Figures built but not drawn (an empty file each): drawing the per-byte figures is most of an analysis's
    time, and test_synapses_command_on_a_trained_model draws and checks them."""
    import bdh.plotting as plotting

    def write(fig, path, fmt, dpi, tight, min_font=None):
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(b"")
        return path

    monkeypatch.setattr(plotting, "_write", write)


def test_experiment_synapses_quick_end_to_end(tmp_path, unrendered_figures):
    out = tmp_path / "exp"
    assert (
        main(
            [
                "experiment",
                "synapses",
                "--quick",
                "--threads",
                "1",
                "--out",
                str(out),
                "--set",
                "search=16",
                "--set",
                "heldout=8",
                "--set",
                "steps=10",
            ]
        )
        == 0
    )
    res = json.loads((out / "results.json").read_text())
    assert res["config"]["steps"] == 10 and res["training"]["steps"] == 10
    assert {"training_s", "analysis_s", "total_s"} <= set(res["timings"])
    assert len(res["verdicts"]) == 8 and all(isinstance(v["held"], bool) for v in res["verdicts"])
    assert (out / "report.md").is_file() and (out / "figures" / "fig12_synapse_trace.png").is_file()
    assert (out / "runs" / "bdh").is_dir() and (out / "data" / "corpus.txt").is_file()


def test_a_python_caller_of_write_analysis_gets_what_bdh_synapses_printed(
    tiny_run, tmp_path, capsys, unrendered_figures
):
    from bdh.cli.checks import load_model
    from bdh.train.run.checkpoint import resolve_model_dir

    argv = ["synapses", str(tiny_run), "--search", "8", "--heldout", "4", "--top", "1", "--out", str(tmp_path / "cli")]
    assert main(argv) == 0
    announced, *printed = capsys.readouterr().out.splitlines()
    model_dir = resolve_model_dir(tiny_run)
    opts = S.SynapseOptions(search=8, heldout=4, top_k=1)
    written = S.write_analysis(
        load_model(model_dir, announce=False), opts, tmp_path / "lib", model_dir=model_dir, run_dir=tiny_run
    )
    lines = written.summary().splitlines()
    # the same code, model, options and seeds in one process: the same headline; the last line differs in its folder
    # and in the minutes the run took, the one field two runs may not share
    assert announced.startswith("model: ") and len(lines) == len(printed) == 2 and lines[0] == printed[0]
    assert written.path == tmp_path / "lib" / "report.md" and lines[1].startswith(f"{written.path}  (")
    assert printed[1].startswith(f"{tmp_path / 'cli' / 'report.md'}  (")
    cli, lib = (json.loads((tmp_path / d / "results.json").read_text()) for d in ("cli", "lib"))
    for res in (cli, lib):
        res.pop("timings")
    assert lib == cli and lib["model_dir"] == model_dir.name
    assert json.loads(json.dumps(written.report.results, default=str))["headline"] == lib["headline"]


def test_write_analysis_refuses_a_missing_head_before_touching_the_folder(tiny_run, tmp_path):
    from bdh.cli.checks import load_model
    from bdh.errors import UserError
    from bdh.train.run.checkpoint import resolve_model_dir

    model_dir = resolve_model_dir(tiny_run)
    model = load_model(model_dir, announce=False)
    out = tmp_path / "used"
    out.mkdir()
    (out / "notes.txt").write_text("keep")
    with pytest.raises(UserError, match="head: 2 does not exist"):
        S.write_analysis(model, S.SynapseOptions(head=2), out, model_dir=model_dir, run_dir=tiny_run, overwrite=True)
    with pytest.raises(UserError, match="--overwrite"):
        S.write_analysis(model, S.SynapseOptions(search=4, heldout=4), out, model_dir=model_dir, run_dir=tiny_run)
    with pytest.raises(UserError, match="input"):
        S.write_analysis(model, S.SynapseOptions(), tiny_run, model_dir=model_dir, run_dir=tiny_run, overwrite=True)
    assert [p.name for p in out.iterdir()] == ["notes.txt"] and (out / "notes.txt").read_text() == "keep"
