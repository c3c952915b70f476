"""benchmarks/roofline.py: its FLOPs are the model count the benchmarks' MFU uses, its time is the per-pass roofline
summed, the fused step moves fewer bytes than today's, and bad sizes are one-line refusals."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest

from bdh import BDHConfig
from bdh.model.sizes import train_flops_per_token

BENCHMARKS = Path(__file__).resolve().parents[1] / "benchmarks"


@pytest.fixture(scope="module")
def roofline():
    """benchmarks/roofline.py as a module (with its folder on the import path, as when it runs as a file)."""
    sys.path.insert(0, str(BENCHMARKS))
    spec = importlib.util.spec_from_file_location("bdh_roofline", BENCHMARKS / "roofline.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # its dataclasses look their module up there
    spec.loader.exec_module(module)
    yield module
    del sys.modules[spec.name]
    sys.path.remove(str(BENCHMARKS))


@pytest.mark.parametrize("shape", [{}, {"n_layer": 2, "n_embd": 32, "n_head": 2, "n_neurons": 256, "block": 48}])
@pytest.mark.parametrize("design", ["today", "fused"])
def test_the_flops_are_the_model_count_of_the_chunked_form(roofline, shape, design):
    s = roofline.Shape(**shape)
    cfg = BDHConfig(n_layer=s.n_layer, n_embd=s.n_embd, n_head=s.n_head, n_neurons=s.n_neurons, chunk_size=s.chunk)
    expected = train_flops_per_token(cfg, s.block, "chunked") * s.tokens
    # the same sums in another order: equal to float rounding
    assert roofline.step(design, s, 989.0, 4.8)["flops"] == pytest.approx(expected, rel=1e-12)


def test_the_step_is_the_sum_of_each_pass_roofline(roofline):
    s = roofline.Shape()
    out = roofline.step("today", s, 500.0, 2.0)
    for r in out["passes"]:
        assert r["seconds"] == max(r["flops"] / 500e12, r["bytes"] / 2e12)
    assert out["seconds"] == pytest.approx(sum(r["seconds"] for r in out["passes"]), rel=1e-12)
    assert out["tokens_per_s"] == pytest.approx(s.tokens / out["seconds"], rel=1e-12)
    element_wise = [r for r in out["passes"] if r["flops"] == 0]
    assert element_wise and all(r["seconds"] == r["bytes"] / 2e12 for r in element_wise)  # memory-bound
    doubled = roofline.step("today", s, 500.0, 4.0)  # twice the bandwidth: every memory-bound pass halves
    assert doubled["seconds"] < out["seconds"] and doubled["bytes"] == out["bytes"]


def test_the_fused_step_moves_fewer_bytes_in_fewer_passes_and_keeps_the_attention_kernels(roofline):
    s = roofline.Shape()
    today, fused = (roofline.step(d, s, 989.0, 4.8) for d in ("today", "fused"))
    assert fused["bytes"] < today["bytes"] and fused["flops"] == pytest.approx(today["flops"], rel=1e-12)
    assert len(fused["passes"]) < len(today["passes"]) and fused["tokens_per_s"] > today["tokens_per_s"]
    kept = [r for r in today["passes"] if r["pass"].startswith("attention") and "key" not in r["pass"]]
    same = {r["pass"]: r["bytes"] for r in kept}
    assert same and all(same[r["pass"]] == r["bytes"] for r in fused["passes"] if r["pass"] in same)
    # the chunk states are D / C bf16 numbers per neuron and token: a longer kernel chunk writes fewer
    longer = roofline.step("today", roofline.Shape(chunk=128), 989.0, 4.8)
    assert longer["bytes"] < today["bytes"]


def test_the_command_prints_both_designs_and_refuses_bad_sizes_in_one_line(roofline, capsys):
    assert roofline.main(["--n-layer", "2", "--tokens", "4096"]) == 0
    out = capsys.readouterr().out
    assert "| today |" in out and "| fused |" in out and "4,096 tokens a step" in out
    assert roofline.main(["--tokens", "0"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "--tokens must be positive" in err
    assert roofline.main(["--n-neurons", "100", "--n-head", "3"]) == 2
    assert "multiple of --n-head" in capsys.readouterr().err


def test_versus_puts_each_triton_row_of_a_training_table_beside_its_prediction(roofline):
    """The perf plan's summary (benchmarks/gpu_all.py): measured / predicted per row of our Triton step."""
    cfg = BDHConfig(n_layer=6, n_embd=256, n_head=4, n_neurons=32768, chunk_size=256).to_dict()
    rows = [
        {"T": 2048, "batch": 8, "loop": "ours", "form": "chunked (triton)", "tok_s": 50_000.0},
        {"T": 2048, "batch": 8, "loop": "ours", "form": "chunked (lean)", "tok_s": 40_000.0},
        {"T": 2048, "batch": 8, "loop": "gpt", "form": "sdpa", "tok_s": 500_000.0},
    ]
    lines = roofline.versus({"bdh": cfg, "peak_tflops": 700.0, "training": rows}, tbs=4.0)
    assert len([line for line in lines if line.startswith("| 2048 |")]) == 1  # the Triton row only
    shape = roofline.Shape(tokens=2048 * 8, block=2048, chunk=64)  # the kernels' chunk: min(chunk_size, 64)
    predicted = roofline.step("today", shape, 700.0, 4.0)["tokens_per_s"]
    assert f"| {50_000 / predicted:.2f} |" in lines[-1] and f"| {predicted:,.0f} |" in lines[-1]
    cpu = roofline.versus({"bdh": cfg, "peak_tflops": 0.1, "training": rows[1:]})
    assert cpu == ["(no row of our step on the Triton chunked kernels in this table: nothing to compare)"]


def test_a_state_stride_divides_the_chunk_states_bytes_and_nothing_else(roofline, capsys):
    """--state-stride R (a design of the attention's backward): every pass's state bytes / R, the model FLOPs kept."""
    s = roofline.Shape()
    fused, strided = roofline.step("fused", s, 989.0, 4.8), roofline.step("fused", s, 989.0, 4.8, stride=2)
    assert strided["flops"] == fused["flops"] and strided["design"] == "fused, states every 2 chunks"
    states = 2 * s.n_embd / s.chunk  # bf16 bytes of the chunk states per neuron and token
    for a, b in zip(fused["passes"], strided["passes"]):
        # an attention pass moves 0, 1 or 2 state buffers once per neuron and token, each half as large; the rest none
        saved = (a["bytes"] - b["bytes"]) / (s.n_layer * s.tokens * s.n_neurons * states / 2)
        assert round(saved) == pytest.approx(saved, abs=1e-9), a["pass"]
        assert round(saved) in ((0, 1, 2) if a["pass"].startswith("attention") else (0,)), a["pass"]
    assert sum(a["bytes"] - b["bytes"] for a, b in zip(fused["passes"], strided["passes"])) > 0
    assert roofline.main(["--state-stride", "2"]) == 0
    assert "| fused, states every 2 chunks |" in capsys.readouterr().out
    assert roofline.main(["--state-stride", "0"]) == 2
    assert "--state-stride must be positive" in capsys.readouterr().err
