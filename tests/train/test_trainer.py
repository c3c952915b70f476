"""The trainer in-process: learning, accumulation, recurrent modes, stop conditions, bad input."""

from __future__ import annotations

import json

import pytest
import torch
from _train_helpers import tiny, train_losses

from bdh.errors import UserError
from bdh.tasks.text import TextConfig, TextTask
from bdh.train import TrainingError, load_config, train
from bdh.train.config import ConfigError
from bdh.train.trainer import Trainer


def run(corpus_file, run_dir, *extra):
    return train(load_config(None, tiny(corpus_file, run_dir, *extra)))


def test_a_short_run_learns_and_writes_a_run_folder(corpus_file, tmp_path):
    result = run(
        corpus_file,
        tmp_path / "r",
        "train.max_steps=60",
        "optim.lr=3e-3",
        "eval.every=30",
        "checkpoint.every=20",
        "checkpoint.keep=2",
    )
    losses = train_losses(result.run_dir)
    assert sorted(losses) == list(range(1, 61))
    assert sum(list(losses.values())[-10:]) / 10 < sum(list(losses.values())[:10]) / 10 - 0.5
    assert result.metrics["val_bpb"] < 8.0 and result.best["metric"] == "val_bpb"
    names = sorted(p.name for p in (result.run_dir / "checkpoints").iterdir())
    assert names == ["step-40", "step-60"]  # the last two kept
    for folder in ("checkpoints/step-60", "best"):
        assert {p.name for p in (result.run_dir / folder).iterdir()} >= {
            "config.json",
            "model.safetensors",
            "meta.json",
        }
    saved = (result.run_dir / "config.yaml").read_text()
    assert "n_neurons: 256" in saved and "ln_eps" in saved  # the resolved config, model fields filled in
    evals = [json.loads(l) for l in (result.run_dir / "metrics.jsonl").read_text().splitlines() if '"eval"' in l]
    assert [e["step"] for e in evals] == [30, 60]
    assert not list((result.run_dir / "checkpoints").glob(".*"))  # no temporary folders left


@pytest.mark.parametrize(
    ("extra", "final"),
    [((), 8), (("eval.final_batches=3",), 3), (("train.max_tokens=640",), 8)],  # 640 tokens: a stop at step 5
)
def test_the_final_evaluation_reads_more_windows(corpus_file, tmp_path, monkeypatch, extra, final):
    """Evaluations along the way read ``eval.batches``; the run's last one, whose numbers it prints and keeps,
    reads ``eval.final_batches`` (default 4 x ``eval.batches``), wherever the run stops."""
    import bdh.train.trainer as trainer_module

    read = []
    real = trainer_module.evaluate

    def counting(model, task, batch_size, batches, *args, **kwargs):
        read.append(batches)
        return real(model, task, batch_size, batches, *args, **kwargs)

    monkeypatch.setattr(trainer_module, "evaluate", counting)
    result = run(corpus_file, tmp_path / "r", "train.max_steps=6", "eval.every=2", *extra)
    steps = result.step
    assert read == [2] * ((steps - 1) // 2) + [final]  # eval.batches=2 (TINY) along the way
    evals = [json.loads(l) for l in (result.run_dir / "metrics.jsonl").read_text().splitlines() if '"eval"' in l]
    assert evals[-1]["step"] == steps and evals[-1]["val_bpb"] == result.metrics["val_bpb"]
    assert 0 < result.metrics["val_bpb_se"] < 1


def test_gradient_accumulation_matches_one_big_batch(corpus_file, tmp_path):
    a = run(corpus_file, tmp_path / "a", "train.max_steps=6", "eval.every=0")
    b = run(corpus_file, tmp_path / "b", "train.max_steps=6", "eval.every=0", "train.micro_batch_size=1")
    la, lb = train_losses(a.run_dir), train_losses(b.run_dir)
    assert la.keys() == lb.keys()
    for step in la:
        assert la[step] == pytest.approx(lb[step], rel=1e-4)
    for p, q in zip(a.model.parameters(), b.model.parameters()):
        torch.testing.assert_close(p, q, rtol=1e-3, atol=1e-5)


def frozen_tbptt(corpus_file, tmp_path, *extra: str):
    """A tiny tbptt run whose weights do not move (lr 1e-12, no decay): its losses are the initial model's."""
    frozen = ("optim.lr=1e-12", "optim.min_lr=0", "optim.warmup_steps=0", "optim.weight_decay=0", "eval.every=0")
    return load_config(None, tiny(corpus_file, tmp_path / "t", "train.bptt=tbptt", *extra, *frozen))


def test_tbptt_carries_the_state_across_consecutive_windows(corpus_file, tmp_path):
    config = frozen_tbptt(corpus_file, tmp_path, "train.max_steps=3")
    trainer = Trainer(config)
    result = trainer.fit()
    trainer.close()
    losses = train_losses(result.run_dir)
    # the same model, run by hand on the same consecutive windows with the state carried, gives the same losses
    model = result.model
    task = TextTask(TextConfig(data=str(corpus_file), seq_len=32))
    state = model.init_state(4)
    expected = []
    with torch.no_grad():
        for step in range(3):
            x, y, reset = task.stream_batch("train", step, 4, config.train.seed)
            assert reset == (step == 0)
            logits, state = model.step(x, state)
            expected.append(float(torch.nn.functional.cross_entropy(logits.reshape(-1, 256), y.reshape(-1))))
    assert [losses[s] for s in (1, 2, 3)] == pytest.approx(expected, rel=1e-4)
    assert trainer.carry[0].pos == 3 * 32  # positions keep growing along the stream
    # and the carried state matters: window 2 from a zero state scores differently
    x, y, _ = task.stream_batch("train", 1, 4, config.train.seed)
    with torch.no_grad():
        fresh = float(torch.nn.functional.cross_entropy(model(x).reshape(-1, 256), y.reshape(-1)))
    assert abs(fresh - expected[1]) > 1e-4


def test_tbptt_streams_start_from_an_empty_state_every_k_steps(corpus_file, tmp_path):
    """``train.tbptt_windows``: the trainer reads the task's random streams and resets the carried state every
    K steps: its losses are those of the model run by hand on the same streams."""
    config = frozen_tbptt(corpus_file, tmp_path, "train.tbptt_windows=2", "train.max_steps=4")
    trainer = Trainer(config)
    result = trainer.fit()
    trainer.close()
    losses = train_losses(result.run_dir)
    task = TextTask(TextConfig(data=str(corpus_file), seq_len=32))
    expected, state = [], None
    with torch.no_grad():
        for step in range(4):
            x, y, reset = task.stream_batch("train", step, 4, config.train.seed, stream_windows=2)
            assert reset == (step % 2 == 0)
            logits, state = result.model.step(x, result.model.init_state(4) if reset else state)
            expected.append(float(torch.nn.functional.cross_entropy(logits.reshape(-1, 256), y.reshape(-1))))
    assert [losses[s] for s in (1, 2, 3, 4)] == pytest.approx(expected, rel=1e-4)
    assert trainer.carry[0].pos == 2 * 32  # the state restarted at step 3


def test_tbptt_windows_longer_than_the_split_are_refused(corpus_file, tmp_path):
    config = load_config(
        None, tiny(corpus_file, tmp_path / "t", "train.bptt=tbptt", "train.tbptt_windows=100000", "eval.every=0")
    )
    with pytest.raises(UserError, match="train.tbptt_windows: a stream of 100000 windows"):
        Trainer(config)


def test_no_bptt_detaches_keys_and_values(corpus_file, tmp_path):
    full = run(corpus_file, tmp_path / "f", "train.max_steps=2", "eval.every=0")
    cut = run(corpus_file, tmp_path / "c", "train.bptt=none", "train.max_steps=2", "eval.every=0")
    lf, lc = train_losses(full.run_dir), train_losses(cut.run_dir)
    # the same forward pass, but full BPTT may take the shared-keys attention kernel and bptt=none the plain one:
    # fp32 sums in another order, relative error ~1e-7 on a loss of ~5
    assert lf[1] == pytest.approx(lc[1], rel=1e-5)
    assert lf[2] != lc[2]  # but another gradient, hence other weights after step 1
    assert any(not torch.equal(p, q) for p, q in zip(full.model.parameters(), cut.model.parameters()))


def test_stop_at_a_token_budget_and_at_a_target(corpus_file, tmp_path):
    result = run(corpus_file, tmp_path / "tok", "train.max_steps=1000", "train.max_tokens=640", "eval.every=0")
    assert result.step == 5 and result.tokens == 640  # 640 tokens / (4 x 32) per step
    result = run(
        corpus_file, tmp_path / "tgt", "train.max_steps=1000", "train.target=7.99", "eval.every=2", "optim.lr=3e-3"
    )
    evals = [json.loads(l) for l in (result.run_dir / "metrics.jsonl").read_text().splitlines() if '"eval"' in l]
    # the target is read on eval.batches; then the final evaluation reads the run's number on more windows
    reached, final = evals[-2:]
    assert result.step < 1000 and reached["step"] == final["step"] == result.step and reached["val_bpb"] <= 7.99
    assert result.metrics["val_bpb"] == final["val_bpb"] and final["val_bpb_se"] < reached["val_bpb_se"]
    assert result.checkpoint.name == f"step-{result.step}"


def test_nan_loss_stops_and_keeps_the_last_good_checkpoint(corpus_file, tmp_path):
    with pytest.raises(TrainingError) as info:
        run(
            corpus_file,
            tmp_path / "nan",
            "train.max_steps=50",
            "optim.lr=1e30",
            "optim.warmup_steps=0",
            "optim.grad_clip=null",
            "checkpoint.every=1",
            "eval.every=0",
        )
    message = str(info.value)
    assert "loss is nan at step" in message and "last good checkpoint is step-" in message
    step = int(message.split("at step ")[1].split(";")[0])
    good = message.split("last good checkpoint is ")[1].split(" ")[0]
    assert good == f"step-{step - 1}" and (tmp_path / "nan" / "checkpoints" / good / "meta.json").is_file()


def test_a_batch_that_does_not_fit_is_refused_before_training(corpus_file, tmp_path):
    with pytest.raises(ValueError) as info:
        run(corpus_file, tmp_path / "big", "model.n_neurons=262144", "task.seq_len=4096", "train.batch_size=4096")
    message = str(info.value)
    assert "GiB" in message and "train.micro_batch_size" in message and "\n" not in message
    assert not (tmp_path / "big").exists()


def test_model_and_task_must_agree(corpus_file, tmp_path):
    with pytest.raises(TrainingError, match="vocab_size"):
        run(corpus_file, tmp_path / "v", "model.vocab_size=100")
    with pytest.raises(ConfigError, match="micro_batch_size"):  # refused by the config itself (--print-config too)
        run(corpus_file, tmp_path / "m", "train.micro_batch_size=3")


def test_an_existing_run_folder_is_not_overwritten(corpus_file, tmp_path):
    (tmp_path / "busy").mkdir()
    (tmp_path / "busy" / "x").write_text("keep me")
    with pytest.raises(TrainingError, match="--resume"):
        run(corpus_file, tmp_path / "busy")


def test_tensorboard_event_files_when_installed(corpus_file, tmp_path):
    pytest.importorskip("tensorboard")
    result = run(corpus_file, tmp_path / "tb", "train.max_steps=3", "log.tensorboard=true")
    assert list((result.run_dir / "tensorboard").glob("events.out.tfevents.*"))


def test_a_time_budget_shortens_the_run_and_decays_over_it(corpus_file, tmp_path):
    result = run(
        corpus_file,
        tmp_path / "budget",
        "train.max_minutes=0.05",
        "train.max_steps=1000000",
        "eval.every=0",
        "optim.warmup_steps=2",
    )
    assert result.total_steps < 1000000 and result.step <= result.total_steps
    assert result.seconds < 3 * 60 * 0.05 + 10
    records = [json.loads(l) for l in (result.run_dir / "metrics.jsonl").read_text().splitlines() if '"train"' in l]
    if result.step == result.total_steps:  # ended by the shortened schedule, not by the hard stop
        assert records[-1]["lr"] == pytest.approx(1e-4)
    meta = json.loads((result.checkpoint / "meta.json").read_text())
    assert meta["budget_fixed"] and meta["total_steps"] == result.total_steps


def test_a_time_budget_follows_a_machine_that_speeds_up(corpus_file, tmp_path, monkeypatch):
    """Slow steps at first (a brief load), then fast ones: the plan made early must grow again so that
    the run uses its budget instead of ending after a fraction of it. A fake clock advances only in
    training steps (1 s each for 20 steps, then 0.05 s), so the test does not depend on this machine."""
    import types

    import bdh.train.trainer as trainer_module

    clock = types.SimpleNamespace(now=0.0)
    monkeypatch.setattr(trainer_module, "time", types.SimpleNamespace(time=lambda: clock.now))
    trainer = Trainer(
        load_config(
            None,
            tiny(
                corpus_file,
                tmp_path / "speedup",
                "train.max_minutes=1",
                "train.max_steps=100000",
                "eval.every=0",
                "checkpoint.every=0",
                "optim.warmup_steps=2",
            ),
        )
    )
    real_step, calls = trainer.train_step, []

    def timed_step(step):
        calls.append(step)
        clock.now += 1.0 if len(calls) <= 20 else 0.05
        return real_step(step)

    trainer.train_step = timed_step
    try:
        result = trainer.fit()
    finally:
        trainer.close()
    # 60 s: 20 slow seconds, then ~0.05 s per step; the first plan (1 s/step) allowed about 40 steps
    assert result.step > 400, result.step
    assert clock.now > 0.8 * 60, f"the run ended after {clock.now:.0f} of its 60 s"


def test_init_from_starts_from_the_given_weights_and_refuses_another_model(corpus_file, tmp_path):
    base = run(corpus_file, tmp_path / "base", "train.max_steps=5", "eval.every=0")

    def trainer(name, *extra):
        return Trainer(
            load_config(None, tiny(corpus_file, tmp_path / name, "train.max_steps=3", "eval.every=0", *extra))
        )

    tuned = trainer("tuned", f"train.init_from={base.run_dir}", "train.seed=99", "model.dropout=0.0")
    fresh = trainer("fresh", "train.seed=99")
    try:
        for name, value in base.model.state_dict().items():
            assert torch.equal(value, tuned.model.state_dict()[name]), name
        assert not torch.equal(fresh.model.E, tuned.model.E)
        result = tuned.fit()  # and it trains on from there
        assert result.step == 3 and not torch.equal(result.model.E, base.model.E)
    finally:
        tuned.close()
        fresh.close()
    with pytest.raises(TrainingError, match="another model configuration .*n_layer"):
        trainer("bad", "model.n_layer=3", f"train.init_from={base.run_dir}")
    with pytest.raises(FileNotFoundError, match="no such run or model folder"):
        trainer("bad2", f"train.init_from={tmp_path / 'missing'}")


def test_init_from_accepts_a_model_that_differs_only_in_how_it_runs(corpus_file, tmp_path):
    """``BDHConfig.RUNTIME_FIELDS`` (dropout, dropout_rng, attention, chunk_size) may differ from the model
    ``train.init_from`` starts from: the weights mean the same."""
    base = run(corpus_file, tmp_path / "base", "train.max_steps=2", "eval.every=0")
    assert base.model.config.dropout_rng == "auto"
    for name, extra in [
        ("rng", ["model.dropout_rng=torch"]),
        ("forms", ["model.attention=chunked", "model.chunk_size=16", "model.dropout=0.1"]),
    ]:
        trainer = Trainer(
            load_config(
                None,
                tiny(
                    corpus_file,
                    tmp_path / name,
                    "train.max_steps=2",
                    "eval.every=0",
                    f"train.init_from={base.run_dir}",
                    *extra,
                ),
            )
        )
        try:
            for key, value in base.model.state_dict().items():
                assert torch.equal(value, trainer.model.state_dict()[key]), (name, key)
        finally:
            trainer.close()


def test_the_run_folder_keeps_every_model_field(corpus_file, tmp_path):
    """best/ and the checkpoints load with the model config the run trained, every field (dropout 0 among them,
    issue 27), through bdh.load_pretrained and the commands' loader."""
    import dataclasses

    from bdh import load_pretrained
    from bdh.train.run.model import load_run_model

    model = [
        "model.dropout_rng=torch",
        "model.positional=rope-standard",
        "model.rope_theta=500.0",
        "model.damping=[0.9, 0.8]",
        "model.attention=chunked",
        "model.chunk_size=8",
        "model.ln_eps=1e-6",
    ]
    result = run(corpus_file, tmp_path / "r", "train.max_steps=2", "eval.every=2", "eval.batches=1", *model)
    trained = {f.name: getattr(result.model.config, f.name) for f in dataclasses.fields(result.model.config) if f.init}
    assert trained["dropout"] == 0.0 and trained["damping"] == (0.9, 0.8)
    for folder in (result.run_dir / "best", result.run_dir / "checkpoints" / "step-2"):
        for loaded in (load_pretrained(folder), load_run_model(str(folder), None, "cpu")[0]):
            assert {k: getattr(loaded.config, k) for k in trained} == trained, folder


def test_tbptt_needs_a_stream_task_and_a_recurrent_model(corpus_file, tmp_path):
    common = [
        "train.bptt=tbptt",
        "train.batch_size=4",
        "train.max_steps=1",
        "train.max_minutes=null",
        "eval.batches=1",
        "log.progress=none",
        "log.tensorboard=false",
        "sample.max_new_tokens=0",
    ]
    mqar = [
        "task.name=mqar",
        "task.vocab_size=64",
        "task.input_seq_len=32",
        "task.num_kv_pairs=2",
        "task.num_train_examples=64",
        "task.num_val_examples=16",
        "model.n_layer=1",
        "model.n_embd=16",
        "model.n_head=2",
        "model.n_neurons=64",
    ]
    with pytest.raises(TrainingError) as info:
        Trainer(load_config(None, [*common, *mqar, f"run_dir={tmp_path / 'mqar'}"]))
    assert str(info.value) == "train.bptt: tbptt needs consecutive windows, and task 'mqar' has no stream_batch"
    gpt = [
        "model.name=gpt",
        "model.n_layer=1",
        "model.n_embd=16",
        "model.n_head=2",
        "task.seq_len=32",
        f"task.data={corpus_file}",
    ]
    with pytest.raises(TrainingError) as info:
        Trainer(load_config(None, [*common, *gpt, f"run_dir={tmp_path / 'gpt'}"]))
    assert str(info.value) == "train.bptt: tbptt needs a fixed-size recurrent state (init_state/step); 'gpt' has none"
    assert not (tmp_path / "mqar").exists() and not (tmp_path / "gpt").exists()


def test_state_passing_starts_each_window_from_the_last_steps_state(corpus_file, tmp_path):
    """``train.bptt=state-passing``: ordinary (unrelated) task batches, each row starting from the state the previous
    step left in it (Buitrago Ruiz & Gu 2025): the losses are those of the model run by hand so."""
    frozen = ("optim.lr=1e-12", "optim.min_lr=0", "optim.warmup_steps=0", "optim.weight_decay=0", "eval.every=0")
    extra = ("train.bptt=state-passing", "train.max_steps=3", "train.micro_batch_size=2")
    config = load_config(None, tiny(corpus_file, tmp_path / "t", *extra, *frozen))
    trainer = Trainer(config)
    result = trainer.fit()
    trainer.close()
    losses = train_losses(result.run_dir)
    task = TextTask(TextConfig(data=str(corpus_file), seq_len=32))
    model, expected = result.model, []
    states = [model.init_state(2), model.init_state(2)]  # one per micro-batch of 2 rows
    with torch.no_grad():
        for step in range(3):
            x, y = task.batch("train", step, 4, config.train.seed)
            total = 0.0
            for j in range(2):
                logits, states[j] = model.step(x[2 * j : 2 * j + 2], states[j])
                total += float(
                    torch.nn.functional.cross_entropy(
                        logits.reshape(-1, 256), y[2 * j : 2 * j + 2].reshape(-1), reduction="sum"
                    )
                )
            expected.append(total / y.numel())
    # the same arithmetic in another order (micro-batches summed by hand): float sums, not bit-equal
    assert [losses[s] for s in (1, 2, 3)] == pytest.approx(expected, rel=1e-4)
    assert trainer.carry[1].pos == 3 * 32
    x, y = task.batch("train", 2, 4, config.train.seed)
    with torch.no_grad():  # the passed state matters: from a zero state the last batch scores differently
        fresh = float(torch.nn.functional.cross_entropy(model(x).reshape(-1, 256), y.reshape(-1)))
    assert abs(fresh - expected[2]) > 1e-4


def test_state_passing_needs_a_recurrent_model(corpus_file, tmp_path):
    common = ["train.bptt=state-passing", "train.batch_size=4", "train.max_steps=1", "train.max_minutes=null"]
    gpt = ["model.name=gpt", "model.n_layer=1", "model.n_embd=16", "model.n_head=2", "task.seq_len=32"]
    with pytest.raises(TrainingError) as info:
        Trainer(load_config(None, [*common, *gpt, f"task.data={corpus_file}", f"run_dir={tmp_path / 'gpt'}"]))
    assert str(info.value) == (
        "train.bptt: state-passing needs a fixed-size recurrent state (init_state/step); 'gpt' has none"
    )
    assert not (tmp_path / "gpt").exists()
