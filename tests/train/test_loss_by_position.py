"""Loss by context position (`bdh.analysis.loss_by_position`): the carried curve is one long forward, the sliding
window gives every token exactly its cropped context, buckets add up, and ``bdh eval`` prints and draws them."""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F
from _train_helpers import set_args, tiny

from bdh.analysis.loss_by_position import (
    ContextCurve,
    carried_curve,
    empty_heads,
    plan_streams,
    position_edges,
    sliding_curve,
    sliding_steps,
    task_streams,
)
from bdh.baselines.gpt import GPT, GPTConfig
from bdh.cli import main
from bdh.errors import UserError
from bdh.model import BDH, BDHConfig
from bdh.tasks.text import TextConfig, TextTask
from bdh.train.config import RunConfig
from bdh.train.run.model import load_generator, past_training_warning, trained_context

LN2 = math.log(2.0)


def tiny_bdh(**kw) -> BDH:
    torch.manual_seed(0)
    return BDH(BDHConfig(n_layer=2, n_embd=32, n_head=2, n_neurons=256, dropout=0.0, **kw)).eval()


def token_losses(model, tokens) -> torch.Tensor:
    with torch.no_grad():
        logits = model(tokens[:, :-1])
    return F.cross_entropy(logits.transpose(1, 2), tokens[:, 1:], reduction="none")


def test_position_edges():
    assert position_edges(128, 1000) == [0, 128, 256, 512, 1000]
    assert position_edges(128, 128) == [0, 128]
    assert position_edges(128, 100) == [0, 100]
    assert position_edges(32, 4096) == [0, 32, 64, 128, 256, 512, 1024, 2048, 4096]
    with pytest.raises(UserError):
        position_edges(0, 10)


def test_curve_buckets_add_up():
    curve = ContextCurve(position_edges(4, 10), 4, "test")
    losses = torch.arange(20, dtype=torch.float32).view(2, 10)  # positions 0..9 of two streams
    curve.add(losses[:, :6], 0)
    curve.add(losses[:, 6:], 6)
    assert curve.count == [8, 8, 4]
    assert curve.loss_sum == [float(losses[:, 0:4].sum()), float(losses[:, 4:8].sum()), float(losses[:, 8:].sum())]
    assert curve.total_bits() == pytest.approx(float(losses.mean()) / LN2)
    assert curve.at(4) == pytest.approx(float(losses[:, 4:].mean()) / LN2)
    assert curve.labels == ["0-4", "4-8", "8-10"]


@pytest.mark.parametrize("damping", [None, "alibi"])
def test_carried_curve_is_one_long_forward(damping):
    """Carrying the state chunk by chunk is the same computation as one parallel forward over the stream; both
    sum the same terms in another order, so they differ by float32 rounding (about 1e-7 relative on losses
    near ln 256 = 5.5); 1e-4 bits per bucket is far above that and far below what a lost state changes."""
    model = tiny_bdh(damping=damping)
    tokens = torch.randint(0, 256, (2, 161), generator=torch.Generator().manual_seed(1))
    curve = carried_curve(model, tokens, 16, chunk=24)
    want = token_losses(model, tokens)
    for lo, hi, bits in zip(curve.edges[:-1], curve.edges[1:], curve.bits()):
        assert bits == pytest.approx(float(want[:, lo:hi].mean()) / LN2, abs=1e-4)
    assert sum(curve.count) == 2 * 160 and curve.edges == [0, 16, 32, 64, 128, 160]


def test_emptied_heads_read_one_chunk_while_the_others_carry():
    """`empty_heads` as ``forget``: every head emptied after each chunk is the chunks read one by one from an empty
    state (the same float32 sums in a different grouping: 1e-4 bits as above); a head emptied alone changes the
    read past the first chunk and nothing inside it, and the state it hands on holds zeros in that head only."""
    model = tiny_bdh(damping="local-global", state_write="delta", positional="none")
    tokens = torch.randint(0, 256, (2, 97), generator=torch.Generator().manual_seed(2))
    windowed = carried_curve(model, tokens, 16, forget=empty_heads(range(model.config.n_head)))
    with torch.no_grad():
        chunks = [model(tokens[:, i : i + 16]) for i in range(0, 96, 16)]
    logits = torch.cat(chunks, dim=1)
    want = F.cross_entropy(logits.reshape(-1, 256), tokens[:, 1:].reshape(-1), reduction="none").view(2, 96)
    for lo, hi, bits in zip(windowed.edges[:-1], windowed.edges[1:], windowed.bits()):
        assert bits == pytest.approx(float(want[:, lo:hi].mean()) / LN2, abs=1e-4)
    carried = carried_curve(model, tokens, 16)
    one = carried_curve(model, tokens, 16, forget=empty_heads([1]))
    assert one.bits()[0] == pytest.approx(carried.bits()[0], abs=1e-6)  # the first chunk reads the empty state
    assert max(abs(a - b) for a, b in zip(one.bits()[1:], carried.bits()[1:])) > 1e-4
    state = model.init_state(2)
    state.rho.normal_()
    after = empty_heads([1])(state)
    assert torch.equal(after.rho[:, :, 0], state.rho[:, :, 0]) and not after.rho[:, :, 1].any()
    assert after.pos == state.pos and state.rho[:, :, 1].any()  # a new state; the old one is kept


def test_sliding_curve_gives_each_token_its_cropped_context():
    """Every scored token must see exactly the ``context`` tokens ending with itself (fewer at the start):
    checked against a brute-force loop over positions, one forward per token."""
    model = tiny_bdh()
    tokens = torch.randint(0, 256, (2, 61), generator=torch.Generator().manual_seed(2))
    context, L = 12, 60
    want = torch.zeros(2, L)
    with torch.no_grad():
        for t in range(L):
            begin = max(0, t + 1 - context)
            logits = model(tokens[:, begin : t + 1])[:, -1]
            want[:, t] = F.cross_entropy(logits, tokens[:, t + 1], reduction="none")
    for stride in (1, 5, 12):
        curve = sliding_curve(model, tokens, 8, context, stride)
        assert sum(curve.count) == 2 * L
        if stride == 1:  # stride 1: each token sees exactly its last `context` tokens
            for lo, hi, bits in zip(curve.edges[:-1], curve.edges[1:], curve.bits()):
                assert bits == pytest.approx(float(want[:, lo:hi].mean()) / LN2, abs=1e-4)
    # stride = context: independent windows of `context` tokens, what training evaluates
    windows = sliding_curve(model, tokens, 8, context, context)
    independent = torch.cat([token_losses(model, tokens[:, i : i + context + 1]) for i in range(0, L, context)], dim=1)
    assert windows.total_bits() == pytest.approx(float(independent.mean()) / LN2, abs=1e-4)
    assert sliding_steps(L, context, 5) == 1 + math.ceil((L - context) / 5)
    with pytest.raises(UserError, match="stride"):
        sliding_curve(model, tokens, 8, context, context + 1)


def test_a_model_without_state_reads_through_the_window_only():
    torch.manual_seed(0)
    gpt = GPT(GPTConfig(vocab_size=256, seq_len=16, n_layer=1, n_embd=16, n_head=2)).eval()
    tokens = torch.randint(0, 256, (1, 65))
    curve = sliding_curve(gpt, tokens, 16)
    assert sum(curve.count) == 64 and all(math.isfinite(b) for b in curve.bits())
    with pytest.raises(UserError, match="no recurrent state"):
        carried_curve(gpt, tokens, 16)


def test_task_streams_are_the_lanes_text(corpus_file):
    task = TextTask(TextConfig(data=str(corpus_file), seq_len=32))
    tokens = task_streams(task, "val", 2, 100)
    assert tokens.shape == (2, 101)
    lo, lane = task.n_train, task.split_bytes("val") // 2
    first, _, _ = task.stream_batch("val", 0, 2, 0)
    start = int(first[1, 0])  # the lanes start at a seeded shift; row 1 begins one lane later
    raw = bytes(task.stream.read(lo, task.split_bytes("val")))
    assert bytes(tokens[0].tolist()) in raw and bytes(tokens[1].tolist()) in raw
    assert raw.index(bytes(tokens[1].tolist())) - raw.index(bytes(tokens[0].tolist())) == lane
    assert int(tokens[1, 0]) == start
    with pytest.raises(UserError, match="more text than the split has"):
        task_streams(task, "val", 2, 10**7)
    assert plan_streams(task, "val", 1000, None) == (min(8, task.lane_windows("val", 1) * 32 // 1000), 1000)
    assert plan_streams(task, "val", None, 3)[0] == 3


def test_trained_context():
    base = {"task": {"name": "text", "seq_len": 64}}
    assert trained_context(RunConfig.from_dict(base)) == 64
    tb = RunConfig.from_dict({**base, "train": {"bptt": "tbptt", "tbptt_windows": 8}})
    assert trained_context(tb) == 512


@pytest.fixture(scope="module")
def trained(tmp_path_factory, corpus_file):
    run = tmp_path_factory.mktemp("runs") / "bdh"
    overrides = tiny(corpus_file, run, "train.max_steps=5", "eval.every=0", "model.damping=null")  # the official model
    assert main(["train", *set_args(overrides)]) == 0
    return run


def test_eval_prints_the_curve_and_draws_it(trained, tmp_path, capsys):
    fig = tmp_path / "curve.png"
    code = main(
        [
            "eval",
            str(trained),
            "--carry-state",
            "--sliding",
            "--length",
            "256",
            "--progress",
            "none",
            "--figure",
            str(fig),
        ]
    )
    out = capsys.readouterr().out
    assert code == 0
    assert "longer than any context the model met in training (32 bytes)" in out
    assert "| positions (bytes) | 0-32 | 32-64 | 64-128 | 128-256 | all |" in out
    assert "state carried (context up to 256)" in out and "context cut to 32" in out
    assert "the state's gain over the cut context" in out
    assert fig.is_file() and fig.stat().st_size > 10_000


def test_eval_long_refuses_figure_without_a_curve(trained, capsys):
    assert main(["eval", str(trained), "--figure", "x.png"]) == 2
    assert "--figure and --stride go with --carry-state or --sliding" in capsys.readouterr().err


def test_generate_warns_once_past_the_trained_context_without_damping(trained, tmp_path, capsysbinary, corpus_file):
    args = ["generate", str(trained), "--max-new-tokens", "40", "--seed", "0", "--prompt", "ab"]

    def err_of(argv) -> str:
        assert main(argv) == 0
        return capsysbinary.readouterr().err.decode()

    err = err_of(args)
    assert err.count("warning: this model has no state damping and met contexts of at most 32 bytes") == 1
    assert "warning" not in err_of([*args[:3], "20", *args[4:]])  # within the trained context: no warning
    damped = tmp_path / "damped"
    overrides = tiny(corpus_file, damped, "train.max_steps=2", "eval.every=0", "model.damping=alibi")
    err_of(["train", *set_args(overrides)])
    assert "warning" not in err_of(["generate", str(damped), *args[2:]])


def test_a_python_caller_gets_what_generate_said_before_the_text(trained, capsysbinary):
    model, folder = load_generator(trained, None, "cpu")
    warning = past_training_warning(trained, model, len(b"ab") + 40)
    assert past_training_warning(trained, model, len(b"ab") + 20) is None  # within the trained context
    assert past_training_warning(folder, model, 10_000) is None  # a model folder does not say what it met
    assert main(["generate", str(trained), "--max-new-tokens", "40", "--seed", "0", "--prompt", "ab"]) == 0
    lines = capsysbinary.readouterr().err.decode().splitlines()
    assert lines[0] == f"model: {folder} (checksums verified)" and lines[1] == warning
    with pytest.raises(UserError, match="--top-k 999: the model has 256 tokens; give at most that"):
        load_generator(trained, None, "cpu", top_k=999)


def test_the_main_job_is_damped_and_the_official_model_one_set_away():
    config = RunConfig.from_dict({})
    assert config.model.config.damping == "alibi"
    official = RunConfig.from_dict({"model": {"damping": None}})
    assert official.model.config.damping is None and official.model.config.n_neurons == 2048


def test_eval_figure_names_its_unit(trained, tmp_path, monkeypatch, capsys):
    import bdh.plotting

    drawn = []
    real = bdh.plotting.save_file
    monkeypatch.setattr(bdh.plotting, "save_file", lambda fig, path, **kw: (drawn.append(fig), real(fig, path, **kw)))
    args = ["eval", str(trained), "--carry-state", "--length", "128", "--progress", "none"]
    assert main([*args, "--figure", str(tmp_path / "c.png")]) == 0
    ax = drawn[0].axes[0]
    assert ax.get_ylabel() == "bits per byte" and "bytes" in ax.get_xlabel()  # a byte model's unit, as its table
