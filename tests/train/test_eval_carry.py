"""``bdh eval``: long context with the recurrent state carried across windows, the mode it prints, the
one-line refusal for a model without a state, and the progress of ``--full``."""

from __future__ import annotations

import io

import pytest
import torch
import torch.nn.functional as F
from _train_helpers import set_args, tiny

from bdh.cli import main
from bdh.errors import UserError
from bdh.model import BDH, BDHConfig
from bdh.tasks.text import TextConfig, TextTask
from bdh.train.evaluate import LN2, evaluate, evaluate_carried
from bdh.train.run.log import EvalProgress


def cli(capsys, *args: str) -> tuple[int, str, str]:
    code = main(list(args))
    captured = capsys.readouterr()
    return code, captured.out, captured.err


@pytest.fixture(scope="module")
def trained(tmp_path_factory, corpus_file):
    """A tiny BDH run (32-byte windows)."""
    run = tmp_path_factory.mktemp("runs") / "bdh"
    overrides = tiny(corpus_file, run, "train.max_steps=20", "optim.lr=3e-3", "eval.every=0")
    assert main(["train", *set_args(overrides)]) == 0
    return run


@pytest.fixture(scope="module")
def gpt_run(tmp_path_factory, corpus_file):
    """A tiny GPT run: a model without a recurrent state."""
    run = tmp_path_factory.mktemp("runs") / "gpt"
    overrides = tiny(corpus_file, run, "train.max_steps=2", "eval.every=0")
    overrides = [o for o in overrides if not o.startswith("model.")]
    overrides += ["model.name=gpt", "model.n_layer=1", "model.n_embd=16", "model.n_head=2"]
    assert main(["train", *set_args(overrides)]) == 0
    return run


@pytest.mark.parametrize("attention", ["parallel", "chunked"])
def test_carried_state_is_one_long_forward(corpus_file, attention):
    """Carrying the state window after window must give what one parallel forward over the whole lane gives:
    every token then sees all the tokens before it in its lane. Both compute the same sums in another order
    (the state accumulates window by window; the parallel form is one masked product over 160 tokens), so
    they differ only by float32 rounding, of the order of 1e-7 relative on a loss near ln 256; 1e-5 nats is
    well above that, and a hundred times below what a lost or reset state changes even in this untrained
    model (scoring the same windows independently, checked to move the loss by more than 1e-3 nats)."""
    torch.manual_seed(0)
    model = BDH(BDHConfig(n_layer=2, n_embd=32, n_head=2, n_neurons=256, attention=attention)).eval()
    task = TextTask(TextConfig(data=str(corpus_file), seq_len=32))
    lanes, windows, seed = 2, 5, 3
    got = evaluate_carried(model, task, lanes, windows, seed)
    parts = [task.stream_batch("val", i, lanes, seed) for i in range(windows)]
    inputs = torch.cat([p[0] for p in parts], dim=1)  # (lanes, windows * seq_len): each lane as one sequence
    targets = torch.cat([p[1] for p in parts], dim=1)
    with torch.no_grad():
        logits = model(inputs)
    want = float(F.cross_entropy(logits.reshape(-1, logits.shape[-1]), targets.reshape(-1)))
    assert got["val_loss"] == pytest.approx(want, abs=1e-5)
    assert got["val_bpb"] == pytest.approx(want / LN2, abs=1e-5 / LN2)
    # the same tokens scored window by window from an empty state: what carrying changes
    with torch.no_grad():
        windowed = torch.cat([model(p[0]) for p in parts], dim=1)
    independent = float(F.cross_entropy(windowed.reshape(-1, windowed.shape[-1]), targets.reshape(-1)))
    assert abs(independent - want) > 1e-3


def test_carry_needs_a_recurrent_model_and_a_text_task(corpus_file):
    task = TextTask(TextConfig(data=str(corpus_file), seq_len=32))

    class NoState(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.w = torch.nn.Parameter(torch.zeros(256))

        def forward(self, idx):
            return self.w.expand(*idx.shape, 256)

    with pytest.raises(UserError, match="no recurrent state"):
        evaluate_carried(NoState(), task, 1, 2, 0)
    model = BDH(BDHConfig(n_layer=1, n_embd=32, n_head=2, n_neurons=256))

    class Windows:
        name = "windows"

    with pytest.raises(UserError, match="no consecutive windows"):
        evaluate_carried(model, Windows(), 1, 2, 0)


def test_eval_prints_its_mode(trained, capsys):
    code, out, err = cli(capsys, "eval", str(trained))
    assert code == 0, err
    assert "windows of 32 bytes, independent" in out.splitlines()[-2]  # the result line says the mode
    independent = float(out.split("bits per byte ")[1].split()[0])
    code, out, err = cli(capsys, "eval", str(trained), "--carry-state", "--batches", "3", "--progress", "none")
    assert code == 0, err
    result = [line for line in out.splitlines() if line.startswith("loss ")][0]
    assert "state carried (context up to 96)" in result  # 3 windows of 32 bytes
    assert "of 96 bytes, each read in order" in out and err == ""
    carried = float(result.split("bits per byte ")[1].split()[0])
    assert 0 < carried < 9 and carried != independent
    code, out, err = cli(capsys, "eval", str(trained), "--carry-state", "--batch-size", "4", "--full")
    assert code == 0, err
    assert "4 lanes of " in out and "each read in order" in out


def test_eval_carry_state_refuses_a_model_without_state(gpt_run, capsys):
    code, out, err = cli(capsys, "eval", str(gpt_run), "--carry-state")
    assert code == 2
    assert err.count("\n") == 1 and err.startswith("bdh: error: --carry-state: the model (GPT) has no recurrent state")
    assert "--sliding reads long text through a window" in err
    code, out, err = cli(capsys, "eval", str(gpt_run), "--batches", "1")  # independent windows work
    assert code == 0, err
    code, out, err = cli(capsys, "eval", str(gpt_run), "--sliding", "--length", "128", "--progress", "none")
    assert code == 0, err  # the advice works: the GPT's curve through a window of its trained context
    assert "context cut to 32" in out and "| positions (bytes) | 0-32 | 32-64 | 64-128 | all |" in out


def test_hard_gate_reads_the_delta_rule_through_the_hard_gate(tmp_path_factory, corpus_file, trained, gpt_run, capsys):
    """``--hard-gate``: a run whose delta rule writes through the sigmoid gate is read, with the same weights,
    through the hard gate (`BDH.hard_gated`), said in the header; the carried curve is the hard twin's. Any other
    model is refused in one line."""
    from bdh.analysis.evaluation.run import open_eval

    run = tmp_path_factory.mktemp("runs") / "delta"
    overrides = tiny(corpus_file, run, "train.max_steps=3", "eval.every=0", "model.state_write=delta")
    assert main(["train", *set_args(overrides)]) == 0
    soft = open_eval(run, carry=True, batches=3)
    hard = open_eval(run, carry=True, batches=3, hard_gate=True)
    assert (soft.model.config.write_gate, hard.model.config.write_gate) == ("sigmoid", "hard")
    assert hard.header().startswith(f"model: {hard.folder} (read with the hard write gate)")
    assert "hard" not in soft.header()
    want = soft.plan.run(soft.model.hard_gated(), "none")[0][1].total_bits()
    got = hard.run().curves[0][1].total_bits()
    assert got == pytest.approx(want, abs=1e-9)  # the same model on the same streams in the same order
    assert abs(got - soft.run().curves[0][1].total_bits()) > 1e-6  # near b = 1/2, hardsigmoid is not the sigmoid
    code, out, err = cli(capsys, "eval", str(run), "--hard-gate", "--batches", "2")
    assert code == 0, err
    assert "(read with the hard write gate)" in out
    for other, says in (
        (trained, "sigmoid gate (state_write: delta, write_gate: sigmoid or annealed); this one has"),
        (gpt_run, "a hard read needs a BDH; this model is a GPT"),
    ):
        code, out, err = cli(capsys, "eval", str(other), "--hard-gate")
        assert code == 2
        assert err.count("\n") == 1 and err.startswith("bdh: error: --hard-gate: ") and says in err, err


def test_full_shows_progress(trained, capsys):
    """Not a terminal (captured): one line about every tenth of the batches on stderr, as training prints
    lines instead of a bar; ``--progress none`` turns it off."""
    code, out, err = cli(capsys, "eval", str(trained), "--full")
    assert code == 0, err
    lines = [line for line in err.splitlines() if line.startswith("eval: ")]
    scored = out.split("scoring ")[1].split(" of ")[0]
    assert lines and lines[-1].startswith(f"eval: {scored}/{scored} batches") and len(lines) <= 11
    code, out, err = cli(capsys, "eval", str(trained), "--full", "--progress", "none")
    assert code == 0 and err == ""
    code, out, err = cli(capsys, "eval", str(trained))  # the default 2 batches: no progress
    assert code == 0 and err == ""


def test_eval_progress_is_a_bar_in_a_terminal(corpus_file):
    class Terminal(io.StringIO):
        def isatty(self) -> bool:
            return True

    stream = Terminal()
    model = BDH(BDHConfig(n_layer=1, n_embd=32, n_head=2, n_neurons=256))
    task = TextTask(TextConfig(data=str(corpus_file), seq_len=32))
    evaluate(model, task, 4, 3, 0, progress=EvalProgress(3, "auto", stream=stream))
    assert "eval" in stream.getvalue() and "3/3" in stream.getvalue()
