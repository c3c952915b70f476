"""benchmarks/gpu.py and benchmarks/gpu_all.py: their logic at tiny sizes on the CPU (``--device cpu --quick``), and
their refusals.

The official pathwaycom/bdh code is not part of this project; the script loads it from a checkout path. Here a
stand-in with the same interface (``BDHConfig``, ``BDH(config)``, ``model(idx, targets) -> (logits, loss)``,
``generate``) is written to a temporary folder, built on our own model, and it runs out of memory above 48
tokens so that the per-cell OOM report is exercised. On a GPU, tests/cuda/test_cuda.py runs the script itself.
"""

from __future__ import annotations

import gzip
import importlib.util
import json
import sys
import tarfile
from pathlib import Path

import pytest
import torch

BENCHMARKS = Path(__file__).resolve().parents[1] / "benchmarks"

STAND_IN = '''
import dataclasses

import torch
import torch.nn.functional as F

import bdh


@dataclasses.dataclass
class BDHConfig:
    n_layer: int = 6
    n_embd: int = 256
    dropout: float = 0.1
    n_head: int = 4
    mlp_internal_dim_multiplier: int = 128
    vocab_size: int = 256


class BDH(torch.nn.Module):
    """The official interface on top of bdh.BDH; a window longer than 48 tokens "runs out of GPU memory"."""

    def __init__(self, config):
        super().__init__()
        c = config
        self.inner = bdh.BDH(bdh.BDHConfig(n_layer=c.n_layer, n_embd=c.n_embd, n_head=c.n_head,
                                           n_neurons=c.mlp_internal_dim_multiplier * c.n_embd, dropout=c.dropout,
                                           vocab_size=c.vocab_size, dropout_rng="torch"))

    def forward(self, idx, targets=None):
        if idx.shape[1] > 48:
            raise torch.cuda.OutOfMemoryError("stand-in: out of memory")
        logits = self.inner(idx)
        loss = None if targets is None else F.cross_entropy(logits.flatten(0, 1), targets.flatten())
        return logits, loss

    @torch.no_grad()
    def generate(self, idx, max_new_tokens, temperature=1.0, top_k=None):
        for _ in range(max_new_tokens):
            logits, _ = self(idx)
            idx = torch.cat([idx, logits[:, -1].argmax(-1, keepdim=True)], dim=1)
        return idx
'''


@pytest.fixture
def gpu_benchmark(monkeypatch):
    """benchmarks/gpu.py as a module (it imports _shared from its own folder, as when run as a file)."""
    monkeypatch.syspath_prepend(str(BENCHMARKS))
    spec = importlib.util.spec_from_file_location("bdh_gpu_benchmark", BENCHMARKS / "gpu.py")
    module = importlib.util.module_from_spec(spec)
    monkeypatch.setitem(sys.modules, spec.name, module)  # its dataclasses look their module up there
    spec.loader.exec_module(module)
    n = torch.get_num_threads()
    torch.set_num_threads(1)
    yield module
    torch.set_num_threads(n)


def test_cpu_quick_mode_fills_every_cell_and_reports_oom_per_cell(gpu_benchmark, tmp_path, capsys):
    checkout = tmp_path / "official"
    checkout.mkdir()
    (checkout / "bdh.py").write_text(STAND_IN)
    out = tmp_path / "gpu.json"
    assert gpu_benchmark.main([str(checkout), "--device", "cpu", "--quick", "--out", str(out)]) == 0
    text = capsys.readouterr().out
    assert "| T | batch | loop |" in text and "| context | batch | ours ms/token |" in text
    results = json.loads(out.read_text())
    rows = {(r["T"], r["loop"]): r for r in results["training"]}
    assert set(rows) == {(T, loop) for T in (32, 64) for loop in ("official", "ours", "gpt")}
    assert rows[(64, "official")]["tok_s"] == "OOM" and "| OOM |" in text  # caught in its cell; the rest ran
    for key in [(32, "official"), (32, "ours"), (32, "gpt"), (64, "ours"), (64, "gpt")]:
        row = rows[key]
        assert row["tok_s"] > 0 and row["tflops"] > 0 and 0 < row["mfu"] and row["peak_gib"] >= 0, key
    assert rows[(32, "official")]["vs_official"] == 1.0 and rows[(32, "ours")]["vs_official"] > 0
    assert "vs_official" not in rows[(64, "ours")]  # no official number at T = 64 to compare with
    # the model FLOPs of each loop: the official parallel form at T, our form, GPT's 6 P + 12 L T d
    gpt = results["gpt"]
    assert rows[(32, "gpt")]["flops_per_token"] == 6 * 33664 + 12 * gpt["n_layer"] * 32 * gpt["n_embd"]
    assert rows[(32, "official")]["flops_per_token"] >= rows[(32, "ours")]["flops_per_token"]
    gen = {(g["context"], g["batch"]): g for g in results["generation"]}
    assert set(gen) == {(c, b) for c in (16, 32) for b in (1, 2)}
    assert all(g["ours_tok_s"] > 0 and g["ours_ms"] > 0 and g["prefill_s"] > 0 for g in gen.values())
    # the official generate runs at its context only (32 here, 2048 on the GPU), and is compared there
    assert all(("official_tok_s" in g) == (c == 32) for (c, _), g in gen.items())
    assert all(gen[(32, b)]["official_tok_s"] > 0 and gen[(32, b)]["vs_official"] > 0 for b in (1, 2))


def test_a_bare_cuda_device_gets_the_current_index(gpu_benchmark, monkeypatch):
    """torch.cuda.set_device refuses a bare "cuda" (the first GPU run stopped there): Device gives it an index."""
    monkeypatch.setattr(torch.cuda, "current_device", lambda: 3)
    assert gpu_benchmark.Device("cuda").device == torch.device("cuda", 3)
    assert gpu_benchmark.Device("cuda:1").device == torch.device("cuda", 1)
    assert gpu_benchmark.Device("cpu").device == torch.device("cpu")


def test_without_cuda_it_stops_with_one_line_and_status_2(gpu_benchmark, monkeypatch, capsys, tmp_path):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    assert gpu_benchmark.main([]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "needs a CUDA GPU" in err
    assert gpu_benchmark.main(["--device", "cpu"]) == 2  # the CPU is for --quick, a check of the script
    assert "--quick" in capsys.readouterr().err
    taken = tmp_path / "taken.json"
    taken.write_text("{}")
    assert gpu_benchmark.main(["--device", "cpu", "--quick", "--out", str(taken)]) == 2  # refused before any work
    assert "exists" in capsys.readouterr().err and taken.read_text() == "{}"


def test_the_script_runs_as_a_file_without_cuda():
    """As CI would call it on a machine without a GPU: exit status 2, one line, no traceback."""
    import subprocess

    if torch.cuda.is_available():
        pytest.skip("this machine has a GPU: the script would run the benchmark")
    out = subprocess.run([sys.executable, str(BENCHMARKS / "gpu.py")], capture_output=True, text=True, timeout=120)
    assert out.returncode == 2 and out.stderr.count("\n") == 1 and "Traceback" not in out.stderr


# --------------------------------------------------------------------------- the one command
@pytest.fixture
def gpu_all(load_benchmark):
    """benchmarks/gpu_all.py as a module."""
    return load_benchmark("gpu_all")


def test_the_one_command_on_the_cpu_writes_every_file_of_its_folder(gpu_all, tmp_path, monkeypatch, capsys):
    """Every step runs as its own process (the install is skipped on the CPU) and leaves its files."""
    if torch.cuda.is_available():
        pytest.skip("this machine has a GPU: the GPU tests would run inside this test")
    monkeypatch.setenv("OMP_NUM_THREADS", "1")  # the children are tiny; one thread each on a shared machine
    checkout = tmp_path / "official"
    checkout.mkdir()
    (checkout / "bdh.py").write_text(STAND_IN)
    out = tmp_path / "run"
    kernels = ["--skip", *gpu_all.TRITON_STEPS]  # they need Triton: tests/test_gpu_perf_kernels.py runs them
    assert gpu_all.main([str(checkout), "--device", "cpu", "--quick", "--out", str(out), "--tar", *kernels]) == 0
    files = {p.name for p in out.iterdir()}
    expected = {"environment.txt", "summary.md", "cuda_tests.log", "cuda_tests.xml", "training.log", "profile.log"}
    expected |= {"training.json", "generation.log", "generation.json"}
    expected |= {f"profile_T{T}.{ext}" for T in (32, 64) for ext in ("txt", "json.gz")}
    assert files == expected, files
    summary = (out / "summary.md").read_text()
    for step, status in [("install", "skipped"), ("cuda-tests", "ok"), ("training", "ok"), ("generation", "ok")]:
        assert f"| {step} | {status} |" in summary, summary
    assert "| profile | ok |" in summary and "GPU tests: " in summary and " failed" in summary
    assert "| T | batch | loop |" in summary and "| context | batch |" in summary  # the tables, copied
    assert "skipped" in (out / "cuda_tests.log").read_text()  # collected, and skipped without a GPU
    training = json.loads((out / "training.json").read_text())["training"]
    assert {r["loop"] for r in training} == {"official", "ours", "gpt"}
    generation = json.loads((out / "generation.json").read_text())["generation"]
    assert any(r.get("vs_official", 0) > 0 for r in generation)
    table = (out / "profile_T32.txt").read_text()
    assert "T=32" in table and "Self CPU" in table
    with gzip.open(out / "profile_T64.json.gz", "rt") as f:
        assert "traceEvents" in json.load(f)
    assert "torch: " in (out / "environment.txt").read_text()
    assert tarfile.is_tarfile(f"{out}.tar.gz")


def test_a_step_past_its_time_limit_is_stopped_and_recorded(gpu_all, tmp_path):
    step = gpu_all.Step("training", [sys.executable, "-c", "import time; time.sleep(60)"], 1, "slow.log")
    result = gpu_all.run_step(step, tmp_path)
    assert result["status"] == "timed out after 1 s" and result["seconds"] < 30
    failing = gpu_all.Step("training", [sys.executable, "-c", "raise SystemExit(3)"], 30, "bad.log")
    assert gpu_all.run_step(failing, tmp_path)["status"] == "failed (exit status 3)"


def test_the_one_command_refuses_a_used_folder_and_a_cpu_run_without_quick(gpu_all, tmp_path, capsys):
    (tmp_path / "used").mkdir()
    (tmp_path / "used" / "x").write_text("")
    assert gpu_all.main(["--out", str(tmp_path / "used"), "--device", "cpu", "--quick"]) == 2
    assert "not an empty folder" in capsys.readouterr().err
    assert gpu_all.main(["--out", str(tmp_path / "new"), "--device", "cpu"]) == 2
    assert "--quick" in capsys.readouterr().err and not (tmp_path / "new").exists()
