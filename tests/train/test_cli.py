"""``bdh train``, ``generate``, ``eval`` and ``runs`` through the command line (in this process)."""

from __future__ import annotations

import json
import os
import re

import pytest
import yaml
from _train_helpers import set_args, tiny

from bdh.cli import main


def cli(capsys, *args: str) -> tuple[int, str, str]:
    code = main(list(args))
    captured = capsys.readouterr()
    return code, captured.out, captured.err


@pytest.fixture(scope="module")
def trained(tmp_path_factory, corpus_file):
    run = tmp_path_factory.mktemp("runs") / "tiny"
    code = main(["train", *set_args(tiny(corpus_file, run, "train.max_steps=30", "optim.lr=3e-3", "eval.every=15"))])
    assert code == 0
    return run


def test_train_reports_bits_per_byte_and_a_sample(tmp_path, corpus_file, capfdbinary):
    run = tmp_path / "r"
    code = main(
        [
            "train",
            *set_args(
                tiny(
                    corpus_file,
                    run,
                    "train.max_steps=4",
                    "sample.max_new_tokens=12",
                    "sample.prompt=KING",
                    "log.progress=lines",
                )
            ),
        ]
    )
    captured = capfdbinary.readouterr()
    out, err = captured.out.decode("utf-8", "replace"), captured.err.decode()
    assert code == 0, err
    assert f"run folder: {run}" in out and "bits per byte" in out
    sample = captured.out.split(b"sample (")[1].split(b"\n", 1)[1]
    assert sample.startswith(b"KING") and len(sample) == len(b"KING") + 12 + 1  # the prompt, 12 bytes, a newline
    assert "step 4/4" in err  # non-interactive: one line per evaluation instead of a bar


def test_a_python_caller_gets_what_train_printed(tmp_path, corpus_file, capfdbinary, monkeypatch):
    import bdh.train
    from bdh.train.config import load_config
    from bdh.train.run.report import train_report

    results, real = [], bdh.train.train
    monkeypatch.setattr(bdh.train, "train", lambda *a, **k: results.append(real(*a, **k)) or results[-1])
    overrides = tiny(corpus_file, tmp_path / "r", "train.max_steps=3", "sample.max_new_tokens=9", "sample.prompt=\xe9")
    assert main(["train", *set_args(overrides)]) == 0
    printed = capfdbinary.readouterr().out
    report = train_report(load_config(None, overrides), results[0])
    assert report.sample is not None and not report.error and report.status == 0
    # the sample again from the trained model with the config's seed: the bytes the command streamed
    assert printed == report.text(report.sample.generate(results[0].model))
    assert main(["train", *set_args(overrides), "--resume", str(tmp_path / "r")]) == 0
    printed = capfdbinary.readouterr().out
    assert printed == train_report(load_config(None, overrides), results[1], str(tmp_path / "r")).text()
    assert printed.startswith(f"{tmp_path / 'r'}: finished at step 3 of 3; nothing to do".encode())


def test_config_file_and_print_config(tmp_path, corpus_file, capsys):
    path = tmp_path / "run.yaml"
    path.write_text(yaml.safe_dump({"model": {"n_layer": 3}, "optim": {"lr": "2e-3"}}))
    code, out, _ = cli(capsys, "train", str(path), "--set", "train.max_steps=9", "--print-config")
    assert code == 0
    printed = yaml.safe_load(out)
    assert printed["model"]["n_layer"] == 3 and printed["optim"]["lr"] == 2e-3 and printed["train"]["max_steps"] == 9


def test_generate_streams_bytes(trained, capfdbinary):
    argv = ["generate", str(trained), "--prompt", "ROMEO:", "--max-new-tokens", "25", "--seed", "3"]
    argv += ["--temperature", "0.7"]
    code = main(argv)
    out = capfdbinary.readouterr().out
    assert code == 0 and out.startswith(b"ROMEO:") and len(out) == len(b"ROMEO:") + 25 + 1
    main(argv)
    assert capfdbinary.readouterr().out == out  # the same seed, the same bytes
    code = main(["generate", str(trained), "--prompt", "A", "--max-new-tokens", "5", "--temperature", "0"])
    assert code == 0


def test_generate_warns_of_a_generation_that_would_run_for_days(trained, capsys, monkeypatch):
    import bdh.cli.train_cmds as train_cmds

    streamed = []
    monkeypatch.setattr(train_cmds, "_stream_bytes", lambda model, prompt, n, *a, **k: streamed.append(n))
    for n, warned in ((100_000_000_000, True), (train_cmds.LONG_GENERATION, False)):
        assert main(["generate", str(trained), "--max-new-tokens", str(n)]) == 0
        err = capsys.readouterr().err
        assert (f"warning: --max-new-tokens {n:,}: one byte at a time" in err) == warned, err
    assert streamed == [100_000_000_000, train_cmds.LONG_GENERATION]  # warned, not cut


@pytest.mark.parametrize(
    "argv, hint",
    [(["trian"], "did you mean 'train'?"), (["eval", "x", "--progress", "lins"], "did you mean 'lines'?")],
)
def test_a_mistyped_command_or_choice_suggests_the_nearest(capsys, argv, hint):
    code, _, err = cli(capsys, *argv)
    assert code == 2 and err.startswith("bdh: error: ") and err.count("\n") == 1 and hint in err, err
    code, _, err = cli(capsys, "xyzzy")
    assert code == 2 and "did you mean" not in err  # nothing near: no guess


def _generate(capfdbinary, trained, *args: str) -> tuple[bytes, str]:
    code = main(["generate", str(trained), "--prompt", "ROMEO:", "--device", "cpu", *args])
    captured = capfdbinary.readouterr()
    assert code == 0, captured.err
    return captured.out, captured.err.decode()


def test_generate_reports_tokens_per_second_on_stderr(trained, capfdbinary):
    out, err = _generate(capfdbinary, trained, "--max-new-tokens", "12", "--seed", "0")
    last = err.strip().splitlines()[-1]
    match = re.fullmatch(
        r"generated (\d+) tokens in ([\d.]+) s: ([\d,.]+) tokens/s \(reading the prompt included\)", last
    )
    assert match and match.group(1) == "12", err
    assert b"tokens/s" not in out


def test_generate_no_stream_writes_the_same_text(trained, capfdbinary):
    args = ("--max-new-tokens", "20", "--seed", "5", "--top-p", "0.9", "--repetition-penalty", "1.3")
    streamed, _ = _generate(capfdbinary, trained, *args)
    whole, _ = _generate(capfdbinary, trained, *args, "--no-stream")
    assert whole == streamed and len(whole) == len(b"ROMEO:") + 20 + 1


def test_generate_top_p_tiny_is_greedy_and_the_penalty_changes_greedy_text(trained, capfdbinary):
    greedy, _ = _generate(capfdbinary, trained, "--max-new-tokens", "60", "--temperature", "0")
    nucleus, _ = _generate(capfdbinary, trained, "--max-new-tokens", "60", "--top-p", "1e-6", "--seed", "1")
    assert nucleus == greedy
    assert len(set(greedy[6:-1])) < 60  # a model trained for 30 steps repeats itself
    penalised, _ = _generate(
        capfdbinary, trained, "--max-new-tokens", "60", "--temperature", "0", "--repetition-penalty", "2"
    )
    assert penalised != greedy


def test_generate_stops_exactly_after_a_stop_string(trained, capfdbinary):
    greedy, _ = _generate(capfdbinary, trained, "--max-new-tokens", "40", "--temperature", "0")
    text = greedy[len(b"ROMEO:") : -1]
    stop = text[25:28]
    end = text.index(stop) + len(stop)  # the first place the generated text ends with it
    args = ("--max-new-tokens", "40", "--temperature", "0", "--stop", "\x00never", "--stop", os.fsdecode(stop))
    out, err = _generate(capfdbinary, trained, *args)
    assert out == b"ROMEO:" + text[:end] + b"\n"
    assert f"generated {end} tokens" in err


def test_eval_on_validation_and_on_a_file(trained, tmp_path, capsys):
    code, out, err = cli(capsys, "eval", str(trained))
    assert code == 0, err
    bpb = float(out.split("bits per byte ")[1].split()[0])
    assert 0 < bpb < 8
    other = tmp_path / "other.txt"
    other.write_bytes("Ünïcödé and bytes \xff\n".encode() * 50 + b"\xff\xfe\x00" * 100)
    code, out, err = cli(capsys, "eval", str(trained), "--data", str(other))
    assert code == 0, err and "bits per byte" in out


def test_eval_reports_what_training_reported_and_full_scores_everything(trained, capsys):
    """By default `bdh eval` scores the batches training scored (same seed): the last eval record's
    numbers, to the printed digits, since the best checkpoint is the final one of this run or an earlier
    one whose record is in metrics.jsonl. --full scores every window of the split."""
    from bdh.train.run.log import read_metrics

    records = [r for r in read_metrics(trained / "metrics.jsonl") if r.get("kind") == "eval"]
    code, out, err = cli(capsys, "eval", str(trained))
    assert code == 0, err
    bpb = float(out.split("bits per byte ")[1].split()[0])
    # the same batches and kernels on the same machine, printed to 4 digits
    assert any(abs(bpb - r["val_bpb"]) < 1e-4 for r in records), (bpb, [r["val_bpb"] for r in records])
    assert "nats per byte" in out and "the batches of the run's final evaluation" in out
    se = float(out.split(" ± ")[1].split()[0])  # a sample of windows has a standard error, printed with it
    assert any(abs(se - r["val_bpb_se"]) < 1e-4 for r in records) and 0 < se < 1
    code, out, err = cli(capsys, "eval", str(trained), "--full")
    assert code == 0, err
    scored, total = out.split("scoring ")[1].split(" batches")[0].split(" of ")
    assert scored == total and " ± " not in out  # the whole split: no sampling error


def test_runs_lists_run_folders(trained, capsys):
    code, out, _ = cli(capsys, "runs", str(trained.parent))
    assert code == 0
    header, row = out.splitlines()[:2]
    assert "best" in header and row.startswith("tiny") and "30/30" in row and "val_bpb" in row


@pytest.mark.parametrize(
    "args, fragment",
    [
        (["train", "--set", "task.data=/nonexistent/corpus.txt"], "no such file or folder"),
        (["train", "--set", "optim.lr=fast"], "optim.lr"),
        (["train", "--set", "optim.lrate=1"], "optim.lrate"),
        (["trian"], "invalid choice"),
        (["train", "--sett", "x=1"], "unrecognized arguments"),
        (["train", "missing.yaml"], "no such config file"),
        (["generate", "/nonexistent/run"], "no such run or model folder"),
        (["generate", "/nonexistent/run", "--top-p", "0"], "--top-p"),
        (["generate", "/nonexistent/run", "--repetition-penalty", "0.9"], "--repetition-penalty"),
        (["generate", "/nonexistent/run", "--stop", ""], "--stop"),
        (["eval", "/nonexistent/run"], "no such run or model folder"),
        (["train", "--resume", "/nonexistent/run"], "no such run folder"),
    ],
)
def test_bad_input_is_one_line_and_exit_2(args, fragment, capsys):
    code, _, err = cli(capsys, *args)
    assert code == 2
    assert err.startswith("bdh: error:") and err.count("\n") == 1 and fragment in err


def test_empty_and_too_short_corpus(tmp_path, capsys):
    empty = tmp_path / "empty.txt"
    empty.write_bytes(b"")
    code, _, err = cli(capsys, "train", "--set", f"task.data={empty}", "--set", f"run_dir={tmp_path / 'a'}")
    assert code == 2 and "empty" in err and err.count("\n") == 1
    short = tmp_path / "short.txt"
    short.write_text("To be or not to be.")
    code, _, err = cli(capsys, "train", "--set", f"task.data={short}", "--set", f"run_dir={tmp_path / 'b'}")
    assert code == 2 and "shorter than one window" in err and err.count("\n") == 1


def test_quick_is_the_main_job_shortened_and_set_wins(capsys):
    from bdh.cli import main

    assert main(["train", "--quick", "--set", "eval.every=50", "--print-config"]) == 0
    text = capsys.readouterr().out
    assert "max_steps: 300" in text and "max_minutes: 1.5" in text and "every: 50" in text
    assert "n_neurons: 2048" in text  # the main job's model
    assert main(["train", "--quick", "--resume", "nowhere"]) == 2
    assert "--quick starts a new run" in capsys.readouterr().err


def test_a_run_folder_loads_its_model_as_the_run_ran_it(tmp_path, corpus_file):
    """The run folder's model runs as the run ran it (its config.yaml), and so does its model folder alone (its
    config.json keeps every field); one an earlier bdh wrote with the architecture only takes the defaults."""
    from bdh.train.run.model import load_run_model

    run = tmp_path / "chunked"
    extra = ("train.max_steps=2", "eval.every=0", "model.attention=chunked", "model.chunk_size=8")
    assert main(["train", *set_args(tiny(corpus_file, run, *extra))]) == 0
    model, folder = load_run_model(str(run), None, "cpu")
    assert folder.parent in (run, run / "checkpoints")
    assert (model.config.attention, model.config.chunk_size) == ("chunked", 8)
    alone, _ = load_run_model(str(folder), None, "cpu")
    assert (alone.config.attention, alone.config.chunk_size) == ("chunked", 8)
    stored = json.loads((folder / "config.json").read_text())
    old = {k: v for k, v in stored.items() if k not in ("attention", "chunk_size", "dropout", "dropout_rng")}
    (folder / "config.json").write_text(json.dumps(old))  # as an earlier bdh wrote it
    (folder / "meta.json").unlink()  # its checksum no longer holds
    model, _ = load_run_model(str(run), None, "cpu")
    assert (model.config.attention, model.config.chunk_size) == ("chunked", 8)  # the run's config.yaml
    alone, _ = load_run_model(str(folder), None, "cpu")
    assert (alone.config.attention, alone.config.chunk_size) == ("parallel", 128)
    assert alone.config.n == model.config.n


def test_set_with_a_space_suggests_key_equals_value(capsys):
    code, out, err = cli(capsys, "train", "--set", "optim.lr", "3e-4")
    assert code == 2 and err.count("\n") == 1
    assert "--set optim.lr=3e-4" in err and "no such config file" not in err, err
    code, out, err = cli(capsys, "train", "--set", "optim.lr=", "3e-4")
    assert code == 2 and "--set optim.lr=3e-4" in err, err


def test_name_gives_the_run_folder_a_name(tmp_path, corpus_file, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    overrides = [s for s in tiny(corpus_file, tmp_path / "unused", "train.max_steps=1", "eval.every=0")]
    overrides = [s for s in overrides if not s.startswith("run_dir=")]
    code, out, err = cli(capsys, "train", "--name", "lr-3e-4", *set_args(overrides))
    assert code == 0, err
    (folder,) = (tmp_path / "runs").iterdir()
    assert folder.name.endswith("-lr-3e-4") and folder.name[:8].isdigit()
    assert f"run folder: {folder.relative_to(tmp_path)}" in out
    assert yaml.safe_load((folder / "config.yaml").read_text())["name"] == "lr-3e-4"
    for bad in ("a/b", "..", " "):
        code, out, err = cli(capsys, "train", "--name", bad, "--print-config")
        assert code == 2 and "name:" in err and err.count("\n") == 1, (bad, err)
    code, out, err = cli(capsys, "train", "--name", "x", "--resume", str(folder))
    assert code == 2 and "--name" in err


def test_the_last_line_says_when_the_time_budget_cut_the_run(tmp_path, corpus_file, capsys):
    extra = ("train.max_steps=1000000", "train.max_minutes=0.02", "eval.every=0", "optim.warmup_steps=2")
    code, out, err = cli(capsys, "train", *set_args(tiny(corpus_file, tmp_path / "r", *extra)))
    assert code == 0, err
    last = out.strip().splitlines()[-1]
    assert "time budget" in last and "train.max_minutes=0.02" in last and "of 1000000 steps" in last, out
    resume = f"bdh train --resume {tmp_path / 'r'} --set train.max_minutes=null"
    assert f"to finish this run: {resume}" in last, last  # the command that finishes it, not a new run's
    # looked at again (a resume completes the planned steps, then has nothing to do): the same diagnosis and command
    for _ in range(2):
        code, out, err = cli(capsys, "train", "--resume", str(tmp_path / "r"))
        again = out.strip().splitlines()[-1]
        assert code == 0 and again.endswith(f"to finish this run: {resume}") and "max_steps" not in again, again
    code, out, err = cli(capsys, "train", *set_args(tiny(corpus_file, tmp_path / "s", "train.max_steps=2")))
    assert code == 0 and "time budget" not in out
