"""benchmarks/gpu.py: its logic at tiny sizes on the CPU (``--device cpu --quick``), and its refusals.

The official pathwaycom/bdh code is not part of this project; the script loads it from a checkout path. Here a
stand-in with the same interface (``BDHConfig``, ``BDH(config)``, ``model(idx, targets) -> (logits, loss)``,
``generate``) is written to a temporary folder, built on our own model, and it runs out of memory above 48
tokens so that the per-cell OOM report is exercised. On a GPU, tests/cuda/test_cuda.py runs the script itself.
"""

from __future__ import annotations

import importlib.util
import json
import sys
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
    assert "| T | batch | loop |" in text and "| batch | context | ours tokens/s |" in text
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
    gen = results["generation"]
    assert [g["batch"] for g in gen] == [1, 2]
    assert all(g["ours_tok_s"] > 0 and g["official_tok_s"] > 0 and g["vs_official"] > 0 for g in gen)


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
