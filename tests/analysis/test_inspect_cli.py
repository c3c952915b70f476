"""``bdh inspect``: report, figures, errors."""

import json

import pytest
import torch

import bdh
from bdh.cli import main
from bdh.train.run.checkpoint import resolve_model_dir

FAST = ["--seeds", "1", "--max-nodes", "96", "--tokens", "48", "--windows", "2"]


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory):
    root = tmp_path_factory.mktemp("run")
    torch.manual_seed(3)
    model = bdh.BDH(bdh.BDHConfig(n_layer=2, n_embd=16, n_head=2, n_neurons=256))
    model.save_pretrained(root / "checkpoints" / "step-10")
    model.save_pretrained(root / "checkpoints" / "step-20")
    (root / "checkpoints" / "step-30").mkdir()  # incomplete: ignored
    return root


def test_resolve_model_dir(run_dir, tmp_path):
    assert resolve_model_dir(run_dir).name == "step-20"
    assert resolve_model_dir(run_dir / "checkpoints" / "step-10").name == "step-10"
    with pytest.raises(ValueError):
        resolve_model_dir(tmp_path)


def test_inspect_a_given_checkpoint(run_dir, tmp_path):
    out = tmp_path / "ck"
    assert main(["inspect", str(run_dir), "--checkpoint", "step-10", "--out", str(out), "--no-figures", *FAST]) == 0
    rep = json.loads((out / "report.json").read_text())
    assert rep["source"]["model"].endswith("step-10")


def test_inspect_writes_report_and_figures(run_dir, tmp_path, capsys):
    out = tmp_path / "rep"
    assert main(["inspect", str(run_dir), "--out", str(out), *FAST]) == 0
    rep = json.loads((out / "report.json").read_text())
    assert rep["format"] == "bdh-inspect"
    for key in ("sparsity", "graphs", "sigma", "summary"):
        assert key in rep
    sd = rep["sparsity"]["data"]
    assert len(sd["trained"]["x_nonzero"]) == 2 and len(sd["control"]["y_nonzero"]) == 2
    assert "repeat" in rep["sparsity"]
    for which in ("x", "y"):
        g = rep["graphs"][which]
        assert set(g["entries"]["trained"]) == {"0", "1"}
        assert len(g["modularity"]["trained"]) == 3 and len(g["modularity"]["control"]) == 3
    assert rep["sigma"]["layer"] == 1
    pngs = sorted(p.name for p in out.glob("*.png"))
    assert "entries_x.png" in pngs and "sparsity_repeat.png" in pngs and "sigma.png" in pngs
    text = capsys.readouterr().out
    assert "statistic" in text and "control" in text
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".")]  # no temporary folder left


def test_inspect_narrowed_by_layer_and_head(run_dir, tmp_path):
    out = tmp_path / "narrow"
    assert (
        main(
            [
                "inspect",
                str(run_dir),
                "--out",
                str(out),
                "--layer",
                "1",
                "--head",
                "1",
                "--prompt",
                "to be or not to be, that is the question",
                "--no-figures",
                *FAST[:4],
            ]
        )
        == 0
    )
    rep = json.loads((out / "report.json").read_text())
    assert rep["sparsity"]["data"]["trained"]["layers"] == [1]
    assert set(rep["graphs"]["x"]["entries"]["trained"]) == {"1"} and rep["graphs"]["x"]["head"] == 1
    assert rep["sigma"]["head"] == 1
    assert not list(out.glob("*.png"))


@pytest.mark.parametrize(
    "extra",
    [["--head", "5"], ["--layer", "7"], ["--prompt", "x"], ["--data", "/nonexistent/file.txt"], ["--seeds", "0"]],
)
def test_bad_input_is_one_line_exit_2(run_dir, tmp_path, capsys, extra):
    assert main(["inspect", str(run_dir), "--out", str(tmp_path / "o"), "--no-figures", *extra]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("bdh: error:") and "\n" not in err
    assert not (tmp_path / "o").exists()


def test_missing_run_and_used_out_folder(run_dir, tmp_path, capsys):
    assert main(["inspect", str(tmp_path / "nope")]) == 2
    used = tmp_path / "used"
    used.mkdir()
    (used / "file").write_text("x")
    assert main(["inspect", str(run_dir), "--out", str(used)]) == 2
    assert (used / "file").read_text() == "x"


def test_inspect_figures_are_readable_and_name_the_probe(run_dir, tmp_path, readable_figures):
    from bdh.analysis.probe import PROBE_NAME

    assert main(["inspect", str(run_dir), "--out", str(tmp_path / "fig"), *FAST]) == 0
    titles = readable_figures()
    assert PROBE_NAME in titles["sparsity_data.png"] and PROBE_NAME in titles["sigma.png"]
    assert len(titles) == 9  # entries, modularity and degrees of G_x and G_y, sigma, the two sparsity traces


def test_a_python_caller_of_write_report_gets_what_bdh_inspect_printed(run_dir, tmp_path, capsys):
    from bdh.analysis import probe
    from bdh.analysis.report import InspectOptions
    from bdh.analysis.report_folder import write_report
    from bdh.cli.checks import load_model

    args = ["--no-figures", "--seeds", "1", "--max-nodes", "96", "--tokens", "48", "--windows", "2"]
    assert main(["inspect", str(run_dir), "--out", str(tmp_path / "cli"), *args]) == 0
    printed = capsys.readouterr().out.splitlines()
    model_dir = resolve_model_dir(run_dir)
    tokens, source = probe.probe(48, 2)
    written = write_report(
        load_model(model_dir, announce=False),
        tokens,
        tmp_path / "lib",
        source=source,
        model_dir=model_dir,
        opts=InspectOptions(seeds=1, max_nodes=96),
        figures=False,
    )
    lines = written.summary().splitlines()
    assert written.path == tmp_path / "lib" / "report.json" and json.loads(written.path.read_text()) == written.report
    # the same code, model, input and seeds in one process: the same table; the last line differs in its folder
    # and in the seconds the run took, the one field two runs may not share
    assert lines[:-1] == printed[1:-1] and printed[0].startswith("model: ")
    assert lines[-1].startswith(f"report: {written.path} (") and printed[-1].startswith(f"report: {tmp_path / 'cli'}")
    assert sorted(p.name for p in (tmp_path / "lib").iterdir()) == ["report.json"]


def test_inspect_traces_a_fact_in_a_prompt(run_dir, tmp_path, capsys):
    """--fact POS: fact.json holds `trace_fact`'s record of that position read back at the last byte (the same
    numbers as calling it), fact.png its figure; stdout names the largest share and what was written."""
    from bdh.analysis.memory import trace_fact
    from bdh.model.io import load_pretrained

    out = tmp_path / "fact"
    prompt = "The key is 7. " + "filler " * 10 + "The key is"
    assert main(["inspect", str(run_dir), "--prompt", prompt, "--fact", "11", "--out", str(out)]) == 0
    rec = json.loads((out / "fact.json").read_text())
    assert rec["write"] == 11 and rec["read"] == len(prompt) - 1 and rec["length"] == len(prompt)
    model = load_pretrained(resolve_model_dir(run_dir))
    want = trace_fact(model, torch.tensor(list(prompt.encode())), 11, top=16)
    assert [h["fact"] for h in rec["heads"]] == pytest.approx([h.fact for h in want.heads], rel=1e-6, abs=1e-9)
    assert rec["neurons"][0]["neuron"] == want.neurons[0].neuron and (out / "fact.png").is_file()
    text = capsys.readouterr().out
    assert "largest share: layer" in text and "fact.json" in text and not (out / "report.json").exists()


def test_inspect_traces_the_fact_of_an_induction_sequence(tmp_path, capsys):
    """--induction LENGTH: the fact of the test sequence with the longest gap of the first 8 (the answer after the
    first trigger), the answer recorded beside the prediction."""
    from bdh.analysis.memory import induction_write
    from bdh.registry import get_task
    from bdh.tasks.lengths import fixed_test_set

    model = bdh.BDH(bdh.BDHConfig(n_layer=1, n_embd=16, n_head=2, n_neurons=64, vocab_size=16, state_write="delta"))
    model.save_pretrained(tmp_path / "m")
    assert (
        main(["inspect", str(tmp_path / "m"), "--induction", "300", "--out", str(tmp_path / "o"), "--no-figures"]) == 0
    )
    rec = json.loads((tmp_path / "o" / "fact.json").read_text())
    cls = get_task("induction")
    sets = [fixed_test_set(cls(cls.config_class(seq_len=300, vocab_size=16)), 300, rows=[i]) for i in range(8)]
    row = min(range(8), key=lambda i: induction_write(sets[i][0][0]))  # the longest gap of the first 8
    x, y = sets[row]
    assert rec["write"] == induction_write(x[0]) and rec["answer"] == int(y[0, -1]) and rec["read"] == 299
    assert rec["source"] == f"induction test sequence {row} of 300 tokens"
    assert len(rec["heads"]) == 2 and not (tmp_path / "o" / "fact.png").exists()


def test_inspect_traces_a_recall_fact_through_the_hard_gate(tmp_path, capsys):
    """--recall LENGTH: row 0 of the recall_gap test set cut after the question whose pair came first, the pair's
    value the fact; --hard-gate traces the hard-gate twin (other numbers than the sigmoid's, the source says so)."""
    from bdh.analysis.memory import recall_facts, trace_fact
    from bdh.model import hard_read
    from bdh.registry import get_task
    from bdh.tasks.lengths import fixed_test_set

    torch.manual_seed(0)
    model = bdh.BDH(bdh.BDHConfig(n_layer=1, n_embd=16, n_head=2, n_neurons=64, state_write="delta"))
    model.save_pretrained(tmp_path / "m")
    recs = {}
    for name, extra in (("soft", []), ("hard", ["--hard-gate"])):
        out = tmp_path / name
        assert main(["inspect", str(tmp_path / "m"), "--recall", "200", "--out", str(out), "--no-figures", *extra]) == 0
        recs[name] = json.loads((out / "fact.json").read_text())
    cls = get_task("recall_gap")
    x, y = fixed_test_set(cls(cls.config_class(seq_len=200, vocab_size=256, num_kv_pairs=8)), 200, rows=[0])
    facts = recall_facts(x[0], y[0])
    (write, read), hard = facts[0], recs["hard"]
    assert (hard["write"], hard["read"], hard["length"], hard["answer"]) == (write, read, read + 1, int(y[0, read]))
    assert [(p["write"], p["read"], p["answer"]) for p in hard["pairs"]] == [(w, r, int(y[0, r])) for w, r in facts]
    first = max(hard["heads"], key=lambda h: h["share"])
    assert hard["pairs"][0]["predicted"] == hard["predicted"]  # the same read of the same tokens, traced twice
    assert hard["pairs"][0]["share"] == pytest.approx(first["share"], rel=1e-9)
    assert len(facts) == 8 and "every pair of sequence 0 (value at -> question at" in capsys.readouterr().out
    assert hard["source"].endswith("(read with the hard write gate)") and "hard" not in recs["soft"]["source"]
    want = trace_fact(hard_read(model), x[0, : read + 1], write, top=16)
    assert [h["fact"] for h in hard["heads"]] == pytest.approx([h.fact for h in want.heads], rel=1e-6, abs=1e-9)
    assert [h["fact"] for h in hard["heads"]] != pytest.approx([h["fact"] for h in recs["soft"]["heads"]])


def test_inspect_maps_keys_to_neurons_over_several_recall_sequences(tmp_path, capsys):
    """--recall LENGTH --sequences N: every pair of the first N test sequences traced on its own sequence, each with
    its key; fact.json's key_map over them (`bdh.analysis.memory.key_map`)."""
    from bdh.analysis.memory import key_map, recall_facts, trace_fact
    from bdh.registry import get_task
    from bdh.tasks.lengths import fixed_test_set

    torch.manual_seed(0)
    model = bdh.BDH(bdh.BDHConfig(n_layer=1, n_embd=16, n_head=2, n_neurons=64, state_write="delta"))
    model.save_pretrained(tmp_path / "m")
    out = tmp_path / "o"
    assert main(["inspect", str(tmp_path / "m"), "--recall", "100", "--sequences", "3", "--out", str(out)]) == 0
    rec = json.loads((out / "fact.json").read_text())
    cls = get_task("recall_gap")
    x, y = fixed_test_set(cls(cls.config_class(seq_len=100, vocab_size=256, num_kv_pairs=8)), 100, rows=[0, 1, 2])
    want = [(i, int(x[i, w - 1]), w, r) for i in range(3) for w, r in recall_facts(x[i], y[i])]
    assert [(p["sequence"], p["key"], p["write"], p["read"]) for p in rec["pairs"]] == want
    i, key, write, read = want[-1]  # a pair of the third sequence, traced on its own tokens
    trace = trace_fact(model, x[i, : read + 1], write, top=1)
    assert rec["pairs"][-1]["neuron"] == trace.neurons[0].neuron and rec["pairs"][-1]["predicted"] == trace.predicted
    expect = json.loads(json.dumps(key_map(rec["pairs"])))  # JSON turns the keys into strings
    assert rec["key_map"] == expect and rec["key_map"]["pairs"] == 24
    assert set(rec["key_map"]["keys"]) == {str(k) for _, k, _, _ in want}
    printed = capsys.readouterr().out
    assert f"keys: {len(expect['keys'])} in 24 pairs of 3 sequence(s)" in printed
    assert (out / "fact.png").is_file()


@pytest.mark.parametrize(
    "extra, message",
    [
        (["--sequences", "2"], "--sequences goes with --recall"),
        (["--recall", "64", "--sequences", "65"], "--sequences"),
        (["--recall", "64", "--hard-gate"], "--hard-gate: a hard read needs a BDH whose delta rule"),
        (["--hard-gate"], "--hard-gate goes with --fact, --induction or --recall"),
        (["--recall", "32"], "--recall"),
        (["--fact", "3"], "--fact needs the text it is in"),
        (["--prompt", "abc", "--fact", "2"], "--fact: the fact's position must lie before the input's last token (2)"),
        (["--induction", "2"], "--induction"),
        (["--prompt", "abcdef", "--fact", "1", "--induction", "64"], "not allowed with"),
    ],
)
def test_fact_bad_input_is_one_line_exit_2(run_dir, tmp_path, capsys, extra, message):
    assert main(["inspect", str(run_dir), "--out", str(tmp_path / "o"), *extra]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("bdh: error:") and "\n" not in err and message in err
    assert not (tmp_path / "o").exists()
