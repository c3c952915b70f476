"""bdh info / the CLI's error handling."""

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from bdh import BDHConfig
from bdh.cli import main
from bdh.model.sizes import train_memory_bytes


def test_info_defaults_are_the_official_model(capsys):
    assert main(["info"]) == 0
    out = capsys.readouterr().out
    assert "25,296,896" in out and "32768 (8192)" in out


def test_info_json_and_flags(capsys):
    assert (
        main(
            [
                "info",
                "--n-layer",
                "2",
                "--n-embd",
                "32",
                "--n-head",
                "2",
                "--n-neurons",
                "256",
                "--json",
                "--batch-size",
                "4",
                "--block-size",
                "64",
            ]
        )
        == 0
    )
    info = json.loads(capsys.readouterr().out)
    cfg = BDHConfig(n_layer=2, n_embd=32, n_head=2, n_neurons=256)
    assert info["params"] == 3 * 256 * 32 + 2 * 256 * 32
    assert info["state_per_layer"] == 256 * 32
    assert info["train_bytes"] == train_memory_bytes(cfg, 4, 64)


def test_info_reads_a_model_folder_and_a_config_file(tmp_path, capsys):
    from bdh import BDH

    BDH(BDHConfig(n_layer=1, n_embd=16, n_head=2, n_neurons=64)).save_pretrained(tmp_path / "m")
    assert main(["info", str(tmp_path / "m"), "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["params"] == 3 * 64 * 16 + 2 * 256 * 16
    (tmp_path / "c.json").write_text(json.dumps({"n_embd": 16, "n_neurons": 64, "n_head": 2}))
    assert main(["info", str(tmp_path / "c.json"), "--n-layer", "3", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["params"] == 3 * 64 * 16 + 2 * 256 * 16


@pytest.mark.parametrize(
    "argv, match",
    [
        (["info", "--n-head", "3"], "divisible by n_head"),
        (["info", "--attention", "flash"], "invalid choice"),
        (["infoo"], "invalid choice"),
        (["info", "missing.json"], "no such file"),
        (["info", "--n-layer", "two"], "--n-layer: expected an integer"),
    ],
)
def test_errors_are_one_line_with_exit_2(argv, match, capsys):
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert match in err and err.count("\n") == 1 and "Traceback" not in err


def test_memory_estimate_grows_linearly_for_chunked_and_quadratically_for_parallel():
    cfg = BDHConfig(n_layer=2, n_embd=64, n_head=4, n_neurons=4096, chunk_size=64)
    chunked = [train_memory_bytes(cfg, 1, t, form="chunked") for t in (1024, 2048, 4096)]
    parallel = [train_memory_bytes(cfg, 1, t, form="parallel") for t in (1024, 2048, 4096)]
    fixed = train_memory_bytes(cfg, 1, 1, form="chunked")
    assert abs((chunked[2] - fixed) / (chunked[1] - fixed) - 2) < 0.05
    assert (parallel[2] - parallel[1]) / (parallel[1] - parallel[0]) > 2.2


def test_memory_estimate_of_a_sharded_process_keeps_a_share_of_the_optimiser_state():
    """FSDP (train.parallel: fsdp): 16 / W bytes per parameter at rest, plus the gathered weights and gradients."""
    cfg = BDHConfig(n_layer=2, n_embd=64, n_head=4, n_neurons=4096)
    params = cfg.num_params()
    one = train_memory_bytes(cfg, 1, 64)
    for W in (2, 4, 8):
        assert one - train_memory_bytes(cfg, 1, 64, shards=W) == 16 * params - (16 * params // W + 8 * params)


def test_python_dash_m_bdh_runs():
    out = subprocess.run([sys.executable, "-m", "bdh", "--version"], capture_output=True, text=True, check=True)
    assert out.stdout.startswith("bdh ")


def test_info_of_a_run_estimates_memory_at_the_run_s_own_batch_and_window(tmp_path, capsys):
    from bdh import BDH

    run = tmp_path / "run"
    cfg = BDHConfig(n_layer=1, n_embd=16, n_head=2, n_neurons=64)
    BDH(cfg).save_pretrained(run / "best")
    from bdh.train.config import RunConfig

    section = {"model": {"name": "bdh"}, "task": {"name": "text", "seq_len": 96}}
    config = RunConfig.from_dict({**section, "train": {"batch_size": 12, "micro_batch_size": 6}})
    (run / "config.yaml").write_text(config.to_yaml())  # a whole config.yaml: a cut one is refused
    assert main(["info", str(run), "--json"]) == 0
    info = json.loads(capsys.readouterr().out)
    assert (info["batch_size"], info["block_size"]) == (6, 96)
    assert info["train_bytes"] == train_memory_bytes(cfg, 6, 96)
    assert main(["info", str(run), "--block-size", "32"]) == 0  # a flag wins
    assert "B=6 T=32" in capsys.readouterr().out
    assert main(["info", str(run / "best"), "--json"]) == 0  # a model folder alone: the defaults
    assert (json.loads(capsys.readouterr().out)["block_size"]) == 256


@pytest.mark.parametrize(
    "tty, mid_line, lead", [(True, True, "\n"), (True, False, ""), (False, True, ""), (False, False, "")]
)
def test_generate_speed_line_starts_a_new_line_only_after_text_left_mid_line_on_a_terminal(
    capsys, monkeypatch, tty, mid_line, lead
):
    """On a terminal the tokens/s line (stderr) came glued to the end of the text (stdout) when the text did not
    end with a newline; it now starts on its own line there, and stdout's bytes never change."""
    from bdh.cli.train_cmds import _report_speed

    monkeypatch.setattr(sys.stdout, "isatty", lambda: tty)
    _report_speed(40, 2.0, mid_line=mid_line)
    out, err = capsys.readouterr()
    assert out == ""
    assert err == f"{lead}generated 40 tokens in 2.00 s: 20.0 tokens/s (reading the prompt included)\n"


def test_describe_table_gives_a_python_caller_what_bdh_info_printed(capsys):
    from bdh.model.sizes import describe_table

    assert main(["info", "--n-layer", "3", "--n-head", "2", "--batch-size", "4", "--block-size", "64"]) == 0
    printed = capsys.readouterr().out
    table = describe_table(BDHConfig(n_layer=3, n_head=2), batch_size=4, block_size=64)
    assert printed == table + "\n" and "training memory, B=4 T=64" in table


def test_generate_speed_line_is_not_glued_to_the_text_in_one_file(tmp_path):
    """``bdh generate ... > out.txt 2>&1``: the text's closing newline reaches the file before the tokens/s line."""
    import torch

    import bdh

    torch.manual_seed(0)
    bdh.BDH(bdh.BDHConfig(n_layer=1, n_embd=16, n_head=2, n_neurons=64)).save_pretrained(tmp_path / "m")
    src = str(Path(__file__).resolve().parents[2] / "src")
    env = {**os.environ, "PYTHONPATH": src + os.pathsep + os.environ.get("PYTHONPATH", "")}
    argv = [sys.executable, "-m", "bdh", "generate", str(tmp_path / "m"), "--prompt", "hi", "--max-new-tokens", "8"]
    with open(tmp_path / "out.txt", "wb") as f:
        assert subprocess.run(argv, stdout=f, stderr=subprocess.STDOUT, env=env).returncode == 0
    text = (tmp_path / "out.txt").read_text(errors="replace")
    assert re.search(r"(^|\n)generated \d+ tokens in ", text), text
