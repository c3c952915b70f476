"""`bdh.analysis.evaluation.plan`: what ``bdh eval`` reads is planned in the library, and a Python caller running
the plan gets what the command printed."""

from __future__ import annotations

import math
import re
from types import SimpleNamespace

import pytest
import torch
from _train_helpers import set_args, tiny

from bdh.analysis.evaluation.data import eval_data
from bdh.analysis.evaluation.plan import LONG_LENGTH, StreamPlan, WindowPlan, plan_eval
from bdh.analysis.loss_by_position import ContextCurve, plan_streams, position_edges, state_gain
from bdh.baselines.gpt import GPT, GPTConfig
from bdh.cli import main
from bdh.errors import UserError
from bdh.model import BDH, BDHConfig
from bdh.train.config import load_config
from bdh.train.run.model import load_run_model

#: the command prints four decimals: a number it printed lies within half a unit of the last one of the value
PRINTED = 0.5e-4 + 1e-9


def numbers(line: str) -> list[float]:
    return [float(x) for x in re.findall(r"\d+\.\d{4}", line)]


@pytest.fixture(scope="module")
def trained(tmp_path_factory, corpus_file):
    run = tmp_path_factory.mktemp("runs") / "plan"
    assert main(["train", *set_args(tiny(corpus_file, run, "train.max_steps=3", "eval.every=0"))]) == 0
    return run


def run_cli(capsys, *args: str) -> list[str]:
    assert main(["eval", *args, "--progress", "none"]) == 0
    return capsys.readouterr().out.splitlines()


def test_a_python_caller_gets_what_bdh_eval_printed(trained, capsys):
    lines = run_cli(capsys, str(trained), "--batches", "3", "--batch-size", "2")
    model, folder = load_run_model(str(trained), None, "cpu")
    plan = plan_eval(eval_data(trained, model), model, batches=3, batch_size=2)
    assert isinstance(plan, WindowPlan) and (plan.batches, plan.batch_size, plan.whole) == (3, 2, False)
    assert lines[: 1 + len(plan.notes)] == [f"model: {folder}", *plan.notes]  # the notes are what it printed
    metrics = plan.run(model)
    loss, bits, se = numbers(lines[len(plan.notes) + 1])
    assert abs(loss - metrics["val_loss"]) <= PRINTED and abs(bits - metrics["val_bpb"]) <= PRINTED
    assert abs(se - metrics["val_bpb_se"]) <= PRINTED


def test_a_python_caller_gets_the_curves_bdh_eval_printed(trained, capsys):
    lines = run_cli(capsys, str(trained), "--carry-state", "--sliding", "--length", "200", "--stride", "5")
    model, _ = load_run_model(str(trained), None, "cpu")
    plan = plan_eval(eval_data(trained, model), model, carry=True, sliding=True, length=200, stride=5)
    assert isinstance(plan, StreamPlan) and (plan.length, plan.window, plan.cut, plan.stride) == (200, 32, 32, 5)
    assert lines[1 : 1 + len(plan.notes)] == list(plan.notes)
    curves = plan.run(model)
    names = ["state carried (context up to 200)", "context cut to 32 (context 32, stride 5)"]
    assert [name for name, _ in curves] == names
    for name, curve in curves:
        (total,) = [line for line in lines if line.startswith("loss ") and line.endswith(f"({name})")]
        nats, bits = numbers(total)
        assert abs(bits - curve.total_bits()) <= PRINTED and abs(nats - curve.total_bits() * math.log(2)) <= PRINTED


def test_a_python_caller_gets_the_states_gain_bdh_eval_printed(trained, capsys):
    lines = run_cli(capsys, str(trained), "--carry-state", "--sliding", "--length", "200", "--stride", "5")
    model, _ = load_run_model(str(trained), None, "cpu")
    (carried, carried_curve), (_, cut_curve) = plan_eval(
        eval_data(trained, model), model, carry=True, sliding=True, length=200, stride=5
    ).run(model)
    gains = state_gain(carried_curve, cut_curve)
    (line,) = [line for line in lines if line.startswith("the state's gain over the cut context")]
    printed = dict(re.findall(r"(\S+) ([+-]\d+\.\d{3})", line.split(": ", 1)[1]))
    assert list(printed) == list(gains) == carried_curve.labels and carried.startswith("state carried")
    for label, gain in gains.items():  # printed to three decimals: within half a unit of the last one
        assert abs(float(printed[label]) - gain) <= 0.5e-3 + 1e-9
    for (lo, hi), gain in zip(zip(cut_curve.edges, cut_curve.edges[1:]), gains.values()):  # the bucket's own bits
        assert gain == pytest.approx(cut_curve.at(lo, hi) - carried_curve.at(lo, hi), abs=1e-9)  # summed alike


def test_the_states_gain_needs_curves_over_the_same_positions():
    a, b = ContextCurve(position_edges(32, 200), 32, "carried"), ContextCurve(position_edges(32, 100), 32, "cut")
    with pytest.raises(UserError, match="the state's gain needs curves over the same positions"):
        state_gain(a, b)


@pytest.fixture
def run_folder(tmp_path):
    """A run folder's config (no checkpoint): windows of 64 bytes, batches of 6, three evaluation batches."""
    overrides = ["task.seq_len=64", "train.batch_size=6", "eval.batches=3", "eval.final_batches=3"]
    (tmp_path / "config.yaml").write_text(load_config(None, overrides).to_yaml())
    return tmp_path


def bdh_model() -> BDH:
    torch.manual_seed(0)
    return BDH(BDHConfig(n_layer=1, n_embd=32, n_head=2, n_neurons=64, dropout=0.0)).eval()


def test_window_plans_read_the_runs_batches_or_the_whole_split(run_folder):
    ev = eval_data(run_folder, SimpleNamespace(config=SimpleNamespace(vocab_size=256)))
    plan = plan_eval(ev, None)
    total = ev.task.num_batches("val", 6)
    assert (plan.batches, plan.batch_size, plan.total, plan.whole, plan.progress) == (3, 6, total, False, False)
    assert plan.notes[-1].endswith("the batches of the run's final evaluation. --full scores all")
    full = plan_eval(ev, None, full=True, batches=2, batch_size=5)
    assert (full.batches, full.batch_size, full.whole, full.progress) == (ev.task.num_batches("val", 5), 5, True, True)
    # what --full costs against the default, said before scoring: the batches it reads, as a multiple of the default
    times = f"{full.batches / 3:.1f} times the 3 batches the default reads, in as many forward passes"
    assert full.notes[-1] == f"scoring {full.batches} of {full.batches} batches of 5 windows (seed {ev.seed}): {times}"


def test_stream_plans_choose_lanes_length_and_window(run_folder):
    model = bdh_model()
    ev = eval_data(run_folder, model)
    plan = plan_eval(ev, model, carry=True)
    assert (plan.lanes, plan.length) == plan_streams(ev.task, "val", LONG_LENGTH, None)
    assert plan.trained == 64 and plan.window == 64 and plan.cut == 64  # the streams are longer: buckets of it
    assert plan.notes[-1].startswith(f"note: the streams ({plan.length:,} bytes) are longer")
    short = plan_eval(ev, model, sliding=True, batches=1, batch_size=2)
    assert (short.lanes, short.length, short.window, short.carry) == (2, 64, 64, False)  # --batches: windows per lane
    assert len(short.notes) == 1  # no longer than the trained context: no note
    whole = plan_eval(ev, model, carry=True, full=True)
    assert whole.lanes == 1 and whole.length == ev.task.lane_windows("val", 1) * 64


def test_plans_refuse_what_cannot_be_read_in_one_line(run_folder):
    gpt = GPT(GPTConfig(vocab_size=256, seq_len=64, n_layer=1, n_embd=16, n_head=2))
    ev = eval_data(run_folder, gpt)
    with pytest.raises(UserError, match="no recurrent state to carry"):
        plan_eval(ev, gpt, carry=True)
    assert isinstance(plan_eval(ev, gpt, sliding=True, length=128), StreamPlan)  # any model reads through a window
    boards = SimpleNamespace(name="boards", seq_len=8)  # a task without consecutive windows
    with pytest.raises(UserError, match="'boards' has no consecutive windows"):
        plan_eval(SimpleNamespace(**{**ev.__dict__, "task": boards}), gpt, sliding=True)


def same_printout(printed: list[str], got: list[str]) -> None:
    """The same lines, their numbers within the last printed digit (the scoring ran twice: reductions may round
    differently from one run to the next)."""
    assert len(printed) == len(got)
    for a, b in zip(printed, got):
        pattern = r"[-+]?\d+\.\d+"
        assert re.sub(pattern, "#", a) == re.sub(pattern, "#", b)
        for x, y in zip(re.findall(pattern, a), re.findall(pattern, b)):
            assert abs(float(x) - float(y)) <= 10 ** -len(x.split(".")[1]) + 1e-9


@pytest.mark.parametrize(
    "flags, options",
    [
        (["--batches", "3", "--batch-size", "2"], dict(batches=3, batch_size=2)),
        (["--carry-state", "--sliding", "--length", "200"], dict(carry=True, sliding=True, length=200)),
    ],
)
def test_open_eval_gives_a_python_caller_the_lines_bdh_eval_printed(trained, capsys, tmp_path, flags, options):
    from bdh.analysis.evaluation.run import open_eval

    figure = ["--figure", str(tmp_path / "f.png")] if options.get("carry") else []
    lines = run_cli(capsys, str(trained), *flags, *figure, "--device", "cpu")
    run = open_eval(trained, device="cpu", figure=figure[1] if figure else None, **options)
    assert lines[: len(run.plan.notes) + 1] == run.header().splitlines()
    result = run.run()
    same_printout(lines[len(run.plan.notes) + 1 :], result.table().splitlines())
    assert (result.metrics is None) == bool(figure) and (result.figure is not None) == bool(figure)
    if figure:
        assert (tmp_path / "f.png").stat().st_size > 0 and lines[-1] == f"figure: {figure[1]}"


def test_open_eval_refuses_a_figure_without_a_long_context(trained):
    from bdh.analysis.evaluation.run import open_eval

    with pytest.raises(UserError, match="--figure and --stride go with --carry-state or --sliding"):
        open_eval(trained, device="cpu", figure="f.png")
