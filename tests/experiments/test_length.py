"""``bdh experiment length``: the reads against the whole forward and brute force, the config's one-line refusals,
the text recall section, and a tiny experiment end to end, resumed."""

from __future__ import annotations

import json

import pytest
import torch
import yaml

from bdh.analysis.memory import induction_write
from bdh.baselines.gla import GLA, GLAConfig
from bdh.baselines.gpt import GPT, GPTConfig
from bdh.cli import main
from bdh.errors import UserError
from bdh.experiments.length import Config, experiment, reading
from bdh.experiments.length.experiment import read_row
from bdh.experiments.length.report import command_line
from bdh.model import BDH, BDHConfig
from bdh.tasks.base import IGNORE_INDEX
from bdh.tasks.induction import Induction, InductionConfig
from bdh.tasks.lengths import fixed_test_set


def _targets_from(logits: torch.Tensor, scored: torch.Tensor) -> torch.Tensor:
    """Targets that are the given logits' argmax at the ``scored`` positions: a read that reproduces those logits
    gets every one right."""
    return torch.where(scored, logits.argmax(-1), torch.full_like(scored, IGNORE_INDEX, dtype=torch.long))


def _scored(B: int, L: int) -> torch.Tensor:
    mask = torch.zeros(B, L, dtype=torch.bool)
    mask[:, [3, L // 2, L - 2, L - 1]] = True
    return mask


def test_reading_through_the_state_gets_what_the_whole_forward_gets():
    torch.manual_seed(0)
    model = BDH(BDHConfig(n_layer=2, n_embd=16, n_head=2, n_neurons=64, vocab_size=16)).eval()
    x = torch.randint(0, 16, (3, 40))
    with torch.no_grad():
        y = _targets_from(model(x), _scored(3, 40))
    right, n, state, tokens = reading.read_state(model, x, y, chunk=16)  # 16, 16, 8: chunks of unequal sizes
    assert (right, n, tokens) == (12, 12, 120)  # argmax of the same logits (ties: measure zero in random weights)
    assert state == 2 * 3 * 2 * 32 * 16 * 4 == reading.state_bytes(model.init_state(3))  # (L, B, H, N, D) float32
    assert reading.read_whole(model, x, y)[:2] == (12, 12)
    y_wrong = torch.where(y == IGNORE_INDEX, y, (y + 1) % 16)
    assert reading.read_state(model, x, y_wrong, chunk=16)[:2] == (0, 12)


def test_the_window_read_sees_only_the_last_t_tokens():
    torch.manual_seed(0)
    cfg = GPTConfig(vocab_size=16, seq_len=8, n_layer=1, n_embd=16, n_head=2, positional="rope")
    model = GPT(cfg).eval()
    x = torch.randint(0, 16, (2, 30))
    scored = _scored(2, 30)
    with torch.no_grad():  # brute force: each scored position from its own window of 8 tokens
        brute = torch.zeros(2, 30, 16)
        for t in range(30):
            brute[:, t] = model(x[:, max(0, t - 7) : t + 1])[:, -1]
    y = _targets_from(brute, scored)
    right, n, _, tokens = reading.read_window(model, x, y, window=8)
    assert (right, n) == (8, 8) and tokens == 2 * (4 + 8 + 8 + 8)
    assert not reading.has_state(model) and reading.has_state(BDH(BDHConfig(n_layer=1, n_embd=8, n_head=1)))


def test_a_model_capped_by_seq_len_is_rebuilt_at_the_test_length():
    torch.manual_seed(0)
    model = GLA(GLAConfig(vocab_size=16, seq_len=16, n_layer=1, n_embd=16, n_head=2)).eval()
    wider = reading.at_length(model, 64)
    assert wider.config.seq_len == 64 and reading.at_length(model, 16) is model
    x = torch.randint(0, 16, (2, 16))
    with torch.no_grad():
        assert torch.equal(wider(x), model(x))  # the same weights, the same arithmetic
    learned = GPT(GPTConfig(vocab_size=16, seq_len=8, n_layer=1, n_embd=16, n_head=2, positional="learned"))
    with pytest.raises(ValueError, match="cannot read past 8"):
        reading.at_length(learned, 16)


def test_gpt_past_the_memory_cutoff_is_reported_out_of_memory_and_a_capped_model_as_unable():
    config = Config.preset("quick").replace(attention_gb=1e-6)
    model = GPT(GPTConfig(vocab_size=16, seq_len=32, n_layer=1, n_embd=16, n_head=2, positional="rope")).eval()
    task = Induction(InductionConfig(seq_len=32))
    row = read_row(config, "gpt", model, task, "whole", 64)
    assert row["status"].startswith("out of memory (estimated") and "accuracy" not in row
    row = read_row(config, "gpt", model, task, "window", 64)
    assert row["status"] == "ok" and row["n"] == 64 and row["low"] <= row["accuracy"] <= row["high"]
    learned = GPT(GPTConfig(vocab_size=16, seq_len=32, n_layer=1, n_embd=16, n_head=2, positional="learned")).eval()
    assert read_row(config, "learned", learned, task, "whole", 32)["status"] == "ok"
    assert read_row(config, "learned", learned, task, "whole", 64)["status"].endswith("cannot read past 32")


def test_peak_memory_sees_a_large_allocation():
    import mmap
    import time

    with reading.PeakMemory(torch.device("cpu"), every=0.001) as memory:
        # 64 MiB of fresh pages, held for 50 ms: an anonymous map, never memory that malloc kept from an earlier
        # test (the trainer keeps freed memory in the process, so a tensor could land on pages already resident)
        big = mmap.mmap(-1, 64 * 2**20)
        big.write(b"\x01" * (64 * 2**20))
        time.sleep(0.05)
        big.close()
    if memory.peak is not None:  # Linux: sampled from /proc/self/statm
        assert memory.peak >= 32 * 2**20


@pytest.mark.parametrize(
    "field, value, message",
    [
        ("max_length", 1000, "seq_len \\(64\\) times a power of 2"),
        ("models", ("bdh", "bdh"), "none repeated"),
        ("models", ("bdh", "nope"), "'nope' is not a registered model"),
        ("tasks", ("mqar",), "length.tasks"),
        ("test_sequences", 32, "length.test_sequences"),
        ("induction_triggers", 15, "fewer than 2 plain tokens"),
        ("recall_pairs", 100, "length: recall_gap"),
        ("text_models", ("no/such/folder",), "not a model folder"),
        ("gpt_positional", "learned", "length.gpt_positional"),
        ("train_chunk", -1, "length.train_chunk"),
        ("min_length", 96, "min_length: must be 0 or 2T, 4T, 8T"),
        ("min_length", 64, "min_length: must be 0 or 2T, 4T, 8T"),  # T itself is always read
        ("min_length", 2**17, "at most max_length \\(65536\\)"),
    ],
)
def test_bad_config_is_one_line(field, value, message):
    with pytest.raises(UserError, match=message) as info:
        Config(**{field: value})
    assert "\n" not in str(info.value)


def test_the_command_line_of_a_config():
    assert command_line(Config()) == "bdh experiment length"
    assert command_line(Config.preset("quick").replace(steps=3)) == "bdh experiment length --quick --set steps=3"
    assert command_line(Config().replace(models=("bdh",), max_length=2**20)) == (
        "bdh experiment length --set models=[bdh] --set max_length=1048576"
    )
    assert Config().lengths == tuple(64 * 2**k for k in range(11))  # T = 64 to 2^16
    assert Config.preset("full").lengths == tuple(256 * 2**k for k in range(13))  # the paper's T = 256 to 2^20


def test_text_models_get_the_long_context_recall_probe(tmp_path):
    from bdh.experiments.length.text import text_recall

    folder = tmp_path / "text-model"
    BDH(BDHConfig(n_layer=1, n_embd=16, n_head=2, n_neurons=64)).save_pretrained(folder)
    config = Config.preset("quick").replace(text_models=(str(folder),), text_distances=(16,), text_trials=2)
    rows = text_recall(config, log=lambda _: None)
    assert len(rows) == 1 and rows[0]["distance"] == 16
    assert rows[0]["carried"]["trials"] == rows[0]["window"]["trials"] == 2


def test_a_read_stops_after_lengths_at_chance(tmp_path, monkeypatch):

    config = Config.preset("quick").replace(max_length=256, stop_after_chance=2)  # lengths 32 ... 256
    accuracy = {32: 0.9, 64: 0.05, 128: 0.9, 256: 0.05}  # at chance at 64, above at 128: the streak restarts

    def fake_row(config, model_name, model, task, read, length):
        acc = accuracy[length] if read == "whole" else 0.0
        return {"length": length, "read": read, "status": "ok", "accuracy": acc, "right": round(100 * acc), "n": 100}

    monkeypatch.setattr(experiment, "read_row", fake_row)
    monkeypatch.setattr("bdh.model.io.read_model_config", lambda folder: (GPT, None))
    monkeypatch.setattr("bdh.model.io.load_pretrained", lambda *a, **k: object())
    record = {"model": "gpt", "task": "induction", "seed": 0, "rows": []}
    (tmp_path / "results").mkdir()
    experiment.measure_run(config, tmp_path, record, log=lambda _: None)
    got = [(r["read"], r["length"]) for r in record["rows"]]
    assert got == [("whole", 32), ("whole", 64), ("whole", 128), ("whole", 256), ("window", 32), ("window", 64)]


def test_min_length_reads_t_then_only_the_long_lengths(tmp_path, monkeypatch):
    """``min_length`` skips the lengths between T and it; a resumed folder's report keeps the ones read before."""
    from bdh.experiments.length.report import shown_lengths

    assert Config().replace(min_length=4096).lengths == (64, 4096, 8192, 16384, 32768, 65536)
    assert Config().replace(min_length=2**16).lengths == (64, 2**16)
    config = Config.preset("quick").replace(max_length=256, min_length=128)

    def fake_row(config, model_name, model, task, read, length):
        return {"length": length, "read": read, "status": "ok", "accuracy": 0.9, "right": 90, "n": 100}

    monkeypatch.setattr(experiment, "read_row", fake_row)
    monkeypatch.setattr("bdh.model.io.read_model_config", lambda folder: (GPT, None))
    monkeypatch.setattr("bdh.model.io.load_pretrained", lambda *a, **k: object())
    record = {"model": "gpt", "task": "induction", "seed": 0, "rows": [], "trace": None}
    (tmp_path / "results").mkdir()
    experiment.measure_run(config, tmp_path, record, log=lambda _: None)
    assert [(r["read"], r["length"]) for r in record["rows"]] == [
        (read, length) for read in ("whole", "window") for length in (32, 128, 256)
    ]
    earlier = [{"length": 64}, {"length": 512}]  # read by an earlier invocation: 64 shown, 512 past max_length not
    assert shown_lengths(config, record["rows"] + earlier) == (32, 64, 128, 256)
    # an earlier invocation found the whole read at chance at 64 and 128: with stop_after_chance=2 it is not read at
    # 256; the window read, never at chance, is
    chance = {"status": "ok", "accuracy": 0.0, "right": 0, "n": 100}
    record = {"model": "gpt", "task": "induction", "seed": 0, "trace": None}
    record["rows"] = [{"length": n, "read": "whole", **chance} for n in (64, 128)]
    experiment.measure_run(config.replace(min_length=256, stop_after_chance=2), tmp_path, record, log=lambda _: None)
    assert [(r["read"], r["length"]) for r in record["rows"][2:]] == [("whole", 32), ("window", 32), ("window", 256)]


def test_the_plan_counts_the_runs_and_times_each_model():
    from bdh.experiments.length import describe_plan

    config = Config.preset("quick").replace(models=("bdh", "gpt"), steps=10)
    assert describe_plan(config, probe=False).startswith("length plan: 4 runs (2 models x 2 tasks x 1 seeds)")
    text = describe_plan(config)
    assert "bdh: 14,336 parameters, per run" in text and "gpt:" in text
    assert text.splitlines()[-1].startswith("estimated")


def test_plan_counts_the_curriculum_with_its_own_batch_at_t():
    from bdh.experiments.length import describe_plan

    config = Config.preset("quick").replace(short_steps=5, short_len=16, steps=3, batch_size=4, batch_at_t=2)
    line = describe_plan(config, probe=False)
    # 5 steps of 4 x 16 tokens, then 3 steps of 2 x 32 tokens: 320 + 192
    assert "each 5 steps of 4 at 16, then 3 steps of 2 x 32 tokens (512 tokens)" in line
    assert "then 3 steps of 4 x 32 tokens (704 tokens)" in describe_plan(config.replace(batch_at_t=None), probe=False)


def test_tiny_experiment_end_to_end_and_resumed(tmp_path, capsys, readable_figures):
    out = tmp_path / "length"
    args = ["experiment", "length", "--quick", "--out", str(out), "--threads", "1", "--set", "steps=3"]
    args += ["--set", "stop_after_chance=0"]
    assert main([*args, "--set", "models=[bdh,gpt]"]) == 0
    report = (out / "report.md").read_text()
    results = json.loads((out / "results.json").read_text())
    assert "`bdh experiment length --quick --set models=[bdh,gpt] --set steps=3 --set stop_after_chance=0`" in report
    assert "## induction (chance 0.067)" in report and "## recall_gap" in report and "gpt (window of T)" in report
    rows = results["rows"]
    assert len(rows) == 2 * 3 * 3  # tasks x lengths x (bdh: state; gpt: whole, window)
    assert {r["read"] for r in rows if r["model"] == "bdh"} == {"state"}
    assert all(r["n"] == (64 if r["task"] == "induction" else 128) for r in rows)
    assert {r["gap"] for r in rows if r["task"] == "recall_gap"} == {32 - 8, 64 - 8, 128 - 8}
    assert set(readable_figures()) == {"accuracy.png"}
    trace = json.loads((out / "results" / "bdh-induction-s0.json").read_text())["trace"]  # the fact traced at 128
    assert trace["length"] == 128 and trace["write"] < 127 and len(trace["heads"]) == 2 * 4 and trace["neurons"]
    task = experiment._task(Config.preset("quick"), "induction")  # the traced sequence: the longest gap of the first 8
    writes = [induction_write(fixed_test_set(task, 128, rows=[i])[0][0]) for i in range(8)]
    assert trace["write"] == min(writes) == writes[trace["row"]]
    assert "## Which neurons hold the fact" in report and "bdh s0 | 128 |" in report
    assert json.loads((out / "results" / "gpt-induction-s0.json").read_text())["trace"] is None
    capsys.readouterr()
    record = out / "results" / "bdh-recall_gap-s0.json"
    kept = json.loads(record.read_text())
    kept["rows"] = kept["rows"][:1]  # as if interrupted after its first read
    record.write_text(json.dumps(kept))
    assert main([*args, "--set", "models=[bdh,gpt,rwkv]", "--resume"]) == 0
    err = capsys.readouterr().err
    assert err.count("length: training") == 2 and "training rwkv-induction-s0" in err  # only the new model trains
    assert "bdh-recall_gap-s0 at 64 (state)" in err and "bdh-recall_gap-s0 at 32" not in err
    resumed = json.loads((out / "results.json").read_text())
    assert len(resumed["rows"]) == 2 * 3 * 4
    # the time the runs recorded, whichever invocation spent it: every training and read of every record
    records = [json.loads(p.read_text()) for p in sorted((out / "results").glob("*.json"))]
    spent = sum(r["train_seconds"] + sum(row["seconds"] or 0 for row in r["rows"]) for r in records)
    assert resumed["recorded_seconds"] == pytest.approx(spent) and spent > 0 and resumed["seconds"] > 0
    assert f"{spent / 60:.1f} min of training and reading as its runs recorded them" in (out / "report.md").read_text()
    assert main([*args, "--resume", "--set", "lr=0.01"]) == 2  # another config: refused
    assert "was made with another config (differs in lr)" in capsys.readouterr().err


def test_a_curriculum_trains_short_first_then_at_t_from_there(tmp_path, capsys):
    """``short_steps`` steps at ``short_len``, then ``steps`` at T initialised from the short run: two run folders,
    the second started from the first's weights."""
    out = tmp_path / "length"
    args = ["experiment", "length", "--quick", "--out", str(out), "--threads", "1", "--set", "models=[bdh]"]
    args += ["--set", "tasks=[induction]", "--set", "steps=2", "--set", "short_steps=3", "--set", "short_len=16"]
    assert main([*args, "--set", "max_length=64", "--set", "lr_at_t=0.0003", "--set", "batch_at_t=4"]) == 0
    err = capsys.readouterr().err
    assert "training bdh-induction-s0-short (3 steps of 8 x 16)" in err
    assert "training bdh-induction-s0 (2 steps of 4 x 32)" in err
    short = yaml.safe_load((out / "runs" / "bdh-induction-s0-short" / "config.yaml").read_text())
    full = yaml.safe_load((out / "runs" / "bdh-induction-s0" / "config.yaml").read_text())
    assert short["task"]["seq_len"] == 16 and full["task"]["seq_len"] == 32
    assert short["optim"]["lr"] == Config.preset("quick").lr and full["optim"]["lr"] == 0.0003
    assert full["train"]["init_from"] == str(out / "runs" / "bdh-induction-s0-short")
    assert short["train"]["batch_size"] == 8 and full["train"]["batch_size"] == 4
    report = (out / "report.md").read_text()
    assert (
        "after 3 steps of 8 at 16, a curriculum over lengths that is our deviation; then 2 steps of 4 at learning"
        in report
    )
    with pytest.raises(UserError, match="short_len: a curriculum starts shorter than seq_len"):
        Config.preset("quick").replace(short_steps=5, short_len=32)


def test_bdh_reads_through_its_state_in_the_chunked_form(tmp_path, monkeypatch):
    """A BDH run is loaded for its reads with attention=chunked and chunk_size 64 (`BDH_READ`), whatever form it
    trained in; another model with its own config."""
    loaded = {}

    def load(folder, map_location="cpu", **runtime):
        loaded[folder.name] = runtime
        return object()

    row = {"status": "ok", "accuracy": 1, "right": 9, "n": 9}
    monkeypatch.setattr(experiment, "read_row", lambda *a: {**row, "read": a[4], "length": a[5]})
    monkeypatch.setattr("bdh.model.io.load_pretrained", load)
    monkeypatch.setattr(experiment, "trace_record", lambda *a: None)
    config = Config.preset("quick").replace(max_length=64)
    (tmp_path / "results").mkdir()
    BDH(BDHConfig(n_layer=1, n_embd=16, n_head=2, n_neurons=64, vocab_size=16)).save_pretrained(
        tmp_path / "models" / "bdh-induction-s0"
    )
    GLA(GLAConfig(vocab_size=16, n_layer=1, n_embd=16)).save_pretrained(tmp_path / "models" / "gla-induction-s0")
    for model in ("bdh", "gla"):
        record = {"model": model, "task": "induction", "seed": 0, "rows": []}
        experiment.measure_run(config, tmp_path, record, log=lambda _: None)
    assert loaded == {"bdh-induction-s0": {"attention": "chunked", "chunk_size": 64}, "gla-induction-s0": {}}


def test_a_state_read_holds_a_whole_test_set_to_2_20_and_a_resume_may_read_on_another_device():
    """Rows read together through a state: the test set's 64 sequences to 2^20 tokens (a GPU read is ~8x faster at
    64 rows than at 8), fewer past it; the device only says where reads run, so a resumed folder may change it."""
    config = Config.preset("quick").replace(read_batch=64)
    assert experiment.rows_per_read(config, "bdh", None, "state", 2**20) == 64
    assert experiment.rows_per_read(config, "bdh", None, "state", 2**22) == 16
    assert experiment.rows_per_read(config.replace(read_batch=8), "bdh", None, "state", 2**10) == 8
    assert "device" in experiment.SELECTORS


def test_train_chunk_trains_every_bdh_row_chunked_and_leaves_the_others():
    config = Config.preset("quick").replace(train_chunk=8)
    for name in ("bdh", "bdh-nopos-lg-delta", "bdh-qk"):
        section = config.model_section(name, "induction")
        assert (section["attention"], section["chunk_size"]) == ("chunked", 8)
    assert "attention" not in config.model_section("gla", "induction")
    assert "attention" not in Config.preset("quick").model_section("bdh", "induction")  # 0: the model's own form


def test_the_hard_read_is_the_same_weights_through_the_hard_gate():
    """``state-hard`` reads a BDH whose delta rule writes through the sigmoid gate with ``write_gate: hard`` and the
    same weights (what a model trained with the hard gate computes); it is offered only with ``hard_reads`` and
    only to such a model."""
    torch.manual_seed(0)
    cfg = BDHConfig(n_layer=2, n_embd=16, n_head=2, n_neurons=64, vocab_size=16, state_write="delta")
    model = BDH(cfg).eval()
    with torch.no_grad():
        model.write_b.copy_(torch.tensor([-3.5, 0.3]))  # head 0 shut by the hard gate, not by the sigmoid
    twin = model.hard_gated()
    assert twin.config.write_gate == "hard" and model.config.write_gate == "sigmoid"
    assert all(torch.equal(a, b) for a, b in zip(twin.state_dict().values(), model.state_dict().values()))
    x = torch.randint(0, 16, (2, 24))
    with torch.no_grad():
        soft, hard = model(x), twin(x)
    assert (soft - hard).abs().max() > 1e-4  # the sigmoid's writes on head 0 change the read
    y = _targets_from(hard, _scored(2, 24))
    assert reading.read_state(twin, x, y, chunk=8)[:2] == (8, 8)
    assert experiment.reads_of("bdh-x", model, hard_reads=True) == ("state", "state-hard")
    assert experiment.reads_of("bdh-x", model) == ("state",)
    assert experiment.reads_of("bdh-x", twin, hard_reads=True) == ("state",)
    plain = BDH(BDHConfig(n_layer=1, n_embd=16, n_head=2, n_neurons=64, vocab_size=16))
    assert experiment.reads_of("bdh", plain, hard_reads=True) == ("state",)


def test_hard_reads_end_to_end(tmp_path):
    out = tmp_path / "length"
    args = ["experiment", "length", "--quick", "--out", str(out), "--threads", "1", "--set", "steps=3"]
    args += ["--set", "stop_after_chance=0", "--set", "models=[bdh-nopos-lg-delta]", "--set", "tasks=[induction]"]
    assert main([*args, "--set", "hard_reads=true"]) == 0
    rows = json.loads((out / "results.json").read_text())["rows"]
    assert sorted({r["read"] for r in rows}) == ["state", "state-hard"] and len(rows) == 2 * 3
    assert "bdh-nopos-lg-delta (read with the hard gate)" in (out / "report.md").read_text()


def test_the_top1_hard_read_end_to_end(tmp_path):
    """``hard_read_top1_heads``: a third read form, ``state-hard-top1``, the hard twin with those heads' writes
    through their key's largest neuron; resumed with it, a finished folder reads that form alone."""
    out = tmp_path / "length"
    args = ["experiment", "length", "--quick", "--out", str(out), "--threads", "1", "--set", "steps=3"]
    args += ["--set", "stop_after_chance=0", "--set", "models=[bdh-nopos-lg-delta]", "--set", "tasks=[induction]"]
    args += ["--set", "hard_reads=true"]
    assert main(args) == 0
    assert main([*args, "--resume", "--set", "hard_read_top1_heads=[1]"]) == 0
    rows = json.loads((out / "results.json").read_text())["rows"]
    assert sorted({r["read"] for r in rows}) == ["state", "state-hard", "state-hard-top1"] and len(rows) == 3 * 3
    assert "bdh-nopos-lg-delta (read with the hard gate, top-1 writes)" in (out / "report.md").read_text()


def test_the_top1_read_model_is_the_hard_twin_with_top1_heads():
    torch.manual_seed(0)
    model = BDH(BDHConfig(n_layer=1, n_embd=16, n_head=2, n_neurons=64, vocab_size=16, state_write="delta"))
    assert experiment.reads_of("bdh-x", model, True, (1,)) == ("state", "state-hard", "state-hard-top1")
    twin = experiment.read_model(model, "state-hard-top1", (1,))
    assert (twin.config.write_gate, twin.config.write_topk, twin.config.write_topk_heads) == ("hard", 1, (1,))
    assert experiment.read_model(model, "state") is model


@pytest.mark.parametrize(
    "fields, says",
    [
        (["hard_read_top1_heads=[1]"], "set hard_reads: true too"),
        (["hard_reads=true", "hard_read_top1_heads=[1,1]"], "distinct heads"),
        (["hard_reads=true", "n_head=2", "hard_read_top1_heads=[2]"], "distinct heads of 0..1"),
    ],
)
def test_bad_top1_heads_are_refused_in_one_line(fields, says, capsys):
    args = ["experiment", "length", "--quick", "--show-config"]
    for field in fields:
        args += ["--set", field]
    assert main(args) == 2
    err = capsys.readouterr().err.strip()
    assert says in err and "\n" not in err
