"""benchmarks/roofline.py: its FLOPs are the model count the benchmarks' MFU uses, its time is the per-pass roofline
summed, the fused step moves fewer bytes than today's, and bad sizes are one-line refusals."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest
import torch

from bdh import BDHConfig
from bdh.model.sizes import train_flops_per_token

DESIGNS = ("today", "first-run", "fused")  # the order of `versus`' columns
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


SMALL = {"n_layer": 2, "n_embd": 32, "n_head": 2, "n_neurons": 256, "block": 48, "tokens": 96}


@pytest.mark.parametrize("shape", [{}, SMALL, {"block": 512, "form": "parallel"}, {**SMALL, "form": "parallel"}])
@pytest.mark.parametrize("design", ["first-run", "today", "fused"])
def test_the_flops_are_the_model_count_less_what_the_shared_keys_skip(roofline, shape, design):
    s = roofline.Shape(**shape)
    cfg = BDHConfig(n_layer=s.n_layer, n_embd=s.n_embd, n_head=s.n_head, n_neurons=s.n_neurons, chunk_size=s.chunk)
    expected = train_flops_per_token(cfg, s.block, s.form) * s.tokens
    out = roofline.step(design, s, 989.0, 4.8)
    # the same sums in another order: equal to float rounding
    assert out["model_flops"] == pytest.approx(expected, rel=1e-12)
    skipped = 0 if s.form == "chunked" else 2 * s.block * s.n_neurons * s.n_layer * s.tokens  # one key product
    assert out["flops"] == pytest.approx(expected - skipped, rel=1e-12)
    assert out["mfu"] == pytest.approx(expected / out["seconds"] / 989e12, rel=1e-12)


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


#: L = 1, D = 4, h = 2, n = 16 (N = 8), 8 tokens in B = 2 sequences of T = 4, chunk C = 2: 128 entries of (B, h, T, N)
HAND = {"n_layer": 1, "n_embd": 4, "n_head": 2, "n_neurons": 16, "tokens": 8, "block": 4, "chunk": 2}


def test_today_s_bytes_are_those_counted_by_hand_pass_by_pass(roofline):
    """Each pass of today's step at HAND, counted by hand: 128 entries; bf16 2 bytes, fp32 4; the pair tables (T, N / 2)
    fp32 cos and sin read once a head: 2 x 2 x 4 x 4 x 4 = 256; a weight's B partial gradients, one bf16 pass:
    2 x 16 x 4 x 2 = 256; the chunk states D / C = 2 bf16 numbers an entry (4 bytes); a scan's fp32 final state
    (B, h, N, D): 2 x 16 x 4 x 4 = 512; the parallel form's scores (B, h, T, T) in bf16, one pass: 2 x 2 x 16 x 2 =
    128."""
    chunked = [
        128 * 2 * 2 + 256,  # x, R x written; the pair tables
        128 * 2,  # z written (one product a head: Dy read once, not copied)
        128 * 2 * 2,  # E y: z, x read
        128 * (2 + 4) + 512,  # scan: k read, states written; final state
        128 * (2 * 2 + 4),  # read: q, k, states
        128 * (2 + 4) + 512,  # recomputed scan
        128 * (2 + 4) + 512,  # reverse scan
        128 * (2 * 2 + 2 * 4 + 2),  # key gradients: q, k, both states read; dq + dk written
        128 * (2 * 2 + 4),  # dv: k, q, dstates
        128 * 2 * 4,  # dz, gate dx: z, x read, dz, dx written
        128 * 2 * 2,  # dE: z, x read
        128 * 2,  # d LN(a): dz read
        128 * 2 + 2 * 256,  # dDy: dz read; B partial gradients written, summed
        128 * (3 * 2 + 2) + 256 // 2,  # dh: g_x, g_Rx, x read, dh written; the pair tables once (not once a head)
        128 * 2,  # dv: dh read (a head, the batch in the rows)
        128 * 2,  # dDx: dh read
    ]
    out = roofline.step("today", roofline.Shape(**HAND), 989.0, 4.8)
    assert [r["bytes"] for r in out["passes"][:-1]] == chunked  # integers: exact
    parallel = [
        128 * 2 + 3 * 128,  # x x^T: x read; scores written, then scaled in place (read, written)
        128,  # scores v: scores read
        3 * 128,  # dA = (g v^T) * W: written, scaled in place
        3 * 128,  # dA + dA^T: two read, one written
        128 * (2 + 2) + 128,  # dx: x read, dx written; the sum read
        128,  # dv = scores^T g: scores read
    ]
    out = roofline.step("today", roofline.Shape(**HAND, form="parallel"), 989.0, 4.8)
    assert [r["bytes"] for r in out["passes"] if r["pass"].startswith("attention")] == parallel


@pytest.mark.parametrize("form", ["chunked", "parallel"])
def test_today_s_step_is_the_kernels_choose_picks_on_cuda(roofline, monkeypatch, form):
    """``today`` counts the kernels of `roofline.KERNELS`: a change of `choose`'s CUDA picks fails here, so that the
    roofline is recounted."""
    import bdh.model.kernels.choice as choice

    monkeypatch.setattr(choice, "use_triton", lambda device: True)  # the CUDA rows, on the CPU
    picked = choice.choose(
        choice.Pass(mode=form, start=0, length=2048), positional="rope", log_u=None, causal=True, chunk_size=256,
        dropout=0.1, dropout_rng="auto", training=True, autograd=True, device=torch.device("cuda"),
    )  # fmt: skip
    assert {k: getattr(picked, k) for k in roofline.KERNELS[form]} == roofline.KERNELS[form]


@pytest.mark.parametrize("block", [512, 2048, 8192])
@pytest.mark.parametrize("form", ["chunked", "parallel"])
def test_each_design_moves_fewer_bytes_than_the_one_before_and_the_attention_passes_stay(roofline, block, form):
    s = roofline.Shape(block=block, form=form)
    first, today, fused = (roofline.step(d, s, 989.0, 4.8) for d in ("first-run", "today", "fused"))
    assert first["bytes"] > today["bytes"] > fused["bytes"] and first["flops"] == today["flops"] == fused["flops"]
    assert len(first["passes"]) > len(today["passes"]) > len(fused["passes"])
    assert first["tokens_per_s"] < today["tokens_per_s"] < fused["tokens_per_s"]
    kept = {r["pass"]: r["bytes"] for r in today["passes"] if r["pass"].startswith("attention")}
    assert kept == {r["pass"]: r["bytes"] for r in first["passes"] if r["pass"].startswith("attention")}
    changed = [r["pass"] for r in fused["passes"] if r["pass"].startswith("attention") and r["pass"] not in kept]
    assert len(changed) == 1 and "dL/dh" in changed[0]  # the key gradient forms dh in the fused design only
    if form == "chunked":  # the chunk states are D / C bf16 numbers an entry: a longer kernel chunk writes fewer
        longer = roofline.step("today", roofline.Shape(block=block, chunk=128), 989.0, 4.8)
        assert longer["bytes"] < today["bytes"]


def test_the_command_prints_every_design_at_each_window_and_refuses_bad_sizes_in_one_line(roofline, capsys):
    assert roofline.main(["--n-layer", "2", "--tokens", "4096"]) == 0
    out = capsys.readouterr().out
    assert all(f"| {d} |" in out for d in ("first-run", "today", "fused")) and "4,096 tokens a step" in out
    for T, batch, form in ((512, 8, "parallel"), (2048, 2, "chunked")):  # `gpu.best_form`'s pick at each window
        assert sum(line.startswith(f"| {T} | {batch} | {form} |") for line in out.splitlines()) == 3
    assert "| 8192 |" not in out  # longer than the step's 4,096 tokens
    assert roofline.main(["--block", "512", "--form", "parallel"]) == 0
    assert "At T=512, batch 32, parallel form; today: encode triton, attention shared-keys" in capsys.readouterr().out
    assert roofline.main(["--tokens", "0"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "--tokens must be positive" in err
    assert roofline.main(["--n-neurons", "100", "--n-head", "3"]) == 2
    assert "multiple of --n-head" in capsys.readouterr().err
    assert roofline.main(["--tokens", "3000"]) == 2
    assert "--tokens must be a multiple of --block" in capsys.readouterr().err


def test_versus_puts_each_row_of_our_step_on_cuda_s_kernels_beside_its_prediction(roofline):
    """The perf plan's summary (benchmarks/gpu_all.py): measured / today's prediction per row of our eager bf16 step
    on CUDA's kernels (chunked with the Triton kernels, parallel), each design's prediction beside it."""
    cfg = BDHConfig(n_layer=6, n_embd=256, n_head=4, n_neurons=32768, chunk_size=256).to_dict()
    rows = [
        {"T": 512, "batch": 32, "loop": "ours", "setting": "bf16", "form": "parallel", "tok_s": 100_000.0},
        {"T": 512, "batch": 32, "loop": "ours", "setting": "bf16+compile", "form": "parallel", "tok_s": 1.0},
        {"T": 2048, "batch": 8, "loop": "ours", "form": "chunked (triton)", "tok_s": 50_000.0},
        {"T": 2048, "batch": 8, "loop": "ours", "form": "chunked (lean)", "tok_s": 40_000.0},
        {"T": 2048, "batch": 8, "loop": "gpt", "form": "sdpa", "tok_s": 500_000.0},
    ]
    lines = roofline.versus({"bdh": cfg, "peak_tflops": 700.0, "training": rows}, tbs=4.0)
    table = [line for line in lines if line.startswith(("| 512 |", "| 2048 |"))]
    assert len(table) == 2  # the eager parallel row and the Triton row only
    for (T, batch, form, measured), line in zip([(512, 32, "parallel", 100_000), (2048, 8, "chunked", 50_000)], table):
        shape = roofline.Shape(tokens=T * batch, block=T, chunk=64, form=form)  # the kernels' chunk: min(256, 64)
        now, first, fused = (roofline.step(d, shape, 700.0, 4.0)["tokens_per_s"] for d in DESIGNS)
        cells = f"{measured:,.0f} | {now:,.0f} | {measured / now:.2f} | {first:,.0f} | {fused:,.0f}"
        assert line == f"| {T} | {batch} | {cells} |"
    none = ["(no row of our step on CUDA's kernels in this table: nothing to compare)"]
    assert roofline.versus({"bdh": cfg, "peak_tflops": 0.1, "training": rows[3:]}) == none
    cpu = {"device": "CPU, 1 threads, torch 2", "bdh": cfg, "peak_tflops": 0.1, "training": rows[:1]}
    assert roofline.versus(cpu) == none  # the parallel form on the CPU runs none of CUDA's kernels


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
    out = capsys.readouterr().out
    assert "| fused, states every 2 chunks |" in out and "| today, states every 2 chunks |" in out
    assert "| 512 | 32 | parallel | today, states" not in out  # the parallel form has no chunk states
    assert roofline.main(["--state-stride", "0"]) == 2
    assert "--state-stride must be positive" in capsys.readouterr().err
