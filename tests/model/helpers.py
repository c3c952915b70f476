"""Small model builders and comparison helpers shared by the model tests (CPU) and the GPU tests (tests/cuda)."""

from __future__ import annotations

import importlib
import random

import pytest
import torch

from bdh import BDH, BDHConfig


def tiny_config(**overrides) -> BDHConfig:
    fields = dict(n_layer=2, n_embd=16, n_head=2, n_neurons=64, dropout=0.0, chunk_size=5)
    fields.update(overrides)
    return BDHConfig(**fields)


#: configs that between them give every field of `BDHConfig` a value other than its default: the round trips of
#: every field through a model folder (tests/model/test_io.py, tests/test_hf.py)
EVERY_FIELD = (
    dict(
        n_layer=2,
        n_embd=16,
        n_head=2,
        n_neurons=64,
        vocab_size=64,
        dropout=0.0,
        dropout_rng="torch",
        positional="rope-standard",
        rope_theta=500.0,
        damping=(0.9, 0.8),
        learn_damping=True,
        decay_gate=True,
        state_write="delta",
        write_gate="hard",
        write_topk=3,
        write_topk_heads=(1,),
        attention="chunked",
        chunk_size=4,
        ln_eps=1e-6,
        random_depth=(1, 3),
        deep_supervision=True,
    ),
    dict(
        n_layer=3,
        n_embd=8,
        n_head=1,
        mlp_internal_dim_multiplier=4,
        causal=False,
        positional="none",
        damping="alibi",
        attend="sudoku",
        input_positions="sudoku",
    ),
    dict(
        n_layer=2,
        n_embd=8,
        n_head=2,
        separate_keys=True,
        ungated=True,
        no_expansion=True,
        unshared_layers=True,
        state_write="delta",
        write_keys="centred",
        write_gate="annealed",
        gate_anneal_steps=7,
    ),
)


def tiny_model(seed: int = 0, **overrides) -> BDH:
    torch.manual_seed(seed)
    return BDH(tiny_config(**overrides)).eval()


def rel_err(a: torch.Tensor, b: torch.Tensor) -> float:
    """max |a - b| / max |b| (0 when both vanish)."""
    denom = b.abs().max().item()
    diff = (a - b).abs().max().item()
    return diff if denom == 0 else diff / denom


def random_configs(count: int = 12, seed: int = 1234) -> list[dict]:
    """Random small model configs covering every positional scheme, damping on and off, batch > 1 and T not a
    multiple of the chunk (with ``batch`` and ``T`` of the input)."""
    rng = random.Random(seed)
    configs = []
    positional = ["rope", "rope-standard", "none"]
    damping = [None, 0.9, "alibi", "multiscale"]
    for i in range(count):
        heads = rng.choice([1, 2, 4])
        configs.append(
            dict(
                n_layer=rng.choice([1, 2, 3]),
                n_embd=rng.choice([8, 16, 24]),
                n_head=heads,
                n_neurons=heads * 2 * rng.randint(2, 12),
                positional=positional[i % 3],
                damping=damping[(i // 3) % 3],
                chunk_size=rng.choice([1, 3, 4, 7]),
                vocab_size=rng.choice([7, 64, 256]),
                batch=rng.randint(2, 3),
                T=rng.choice([9, 13, 22]),
            )
        )
    return configs


def config_id(case: dict) -> str:
    """A readable test id of a `random_configs` case."""
    c = case
    return f"{c['positional']}-{c['damping']}-L{c['n_layer']}h{c['n_head']}C{c['chunk_size']}T{c['T']}"


def logits_and_grads(model: BDH, idx: torch.Tensor, form) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    """Logits of ``form`` (an attention form's name, or a forward such as ``model.slow_forward``) and the gradient
    of every parameter of a fixed weighted sum of them."""
    model.zero_grad()
    if callable(form):
        logits = form(idx)
    else:
        model.config.attention = form
        logits = model(idx)
    weights = torch.linspace(-1, 1, logits.numel(), device=logits.device).view_as(logits)
    (logits.float() * weights).sum().backward()
    return logits.detach(), {n: p.grad.clone() for n, p in model.named_parameters()}


def values_and_grads(fn, *inputs: torch.Tensor, weight: torch.Tensor) -> tuple[torch.Tensor, list[torch.Tensor]]:
    """fn(*inputs) and the gradients of every input of sum(fn(*inputs) * weight)."""
    leaves = [t.detach().clone().requires_grad_() for t in inputs]
    out = fn(*leaves)
    (out.float() * weight).sum().backward()
    return out.detach(), [t.grad for t in leaves]


def attention_inputs(B=2, H=3, T=11, N=6, D=5, shared_v=True, with_state=False, seed=0, device="cpu"):
    """q (ReLU'd), k, v and an optional state in float64, drawn on the CPU (the same numbers on every device)."""
    g = torch.Generator().manual_seed(seed)
    q = torch.randn(B, H, T, N, generator=g, dtype=torch.float64).relu()
    k = torch.randn(B, H, T, N, generator=g, dtype=torch.float64)
    v = torch.randn(B, 1 if shared_v else H, T, D, generator=g, dtype=torch.float64)
    s = torch.randn(B, H, N, D, generator=g, dtype=torch.float64) if with_state else None
    return tuple(None if t is None else t.to(device) for t in (q, k, v, s))


def run_form(form: str, q, k, v, *, chunk_size: int = 4, **options):
    """One of the three attention forms of `bdh.model.kernels.pytorch.attention` by name: (a, state after or None)."""
    from bdh.model.kernels.pytorch import attention

    if form == "chunked":
        return attention.chunked(q, k, v, chunk_size=chunk_size, **options)
    return {"parallel": attention.parallel, "recurrent": attention.recurrent}[form](q, k, v, **options)


def rerun_greedy(model: BDH, prompt: torch.Tensor, steps: int) -> torch.Tensor:
    """What the official generate does: the whole prefix through the parallel form for every token."""
    idx = prompt
    for _ in range(steps):
        nxt = model(idx)[:, -1].argmax(-1, keepdim=True)
        idx = torch.cat([idx, nxt], dim=1)
    return idx


def interpreted(module: str, name: str):
    """``module.name`` (a Triton kernel's launcher), for a test that runs it in Triton's CPU interpreter
    (tests/conftest.py turns it on without a GPU); the test is skipped where the interpreter is off (a GPU is here:
    tests/cuda runs the compiled kernels)."""
    from bdh.model.kernels.triton.chunked import interpreting

    if not interpreting():
        pytest.skip("Triton's CPU interpreter is off (a GPU is here: tests/cuda runs the compiled kernels)")
    return getattr(importlib.import_module(module), name)


def compile_without_interpreter(script: str, *args: str) -> str:
    """The output of ``script``, a program compiling Triton kernels for sm_90 and printing ``compiled`` last, run with
    ``args`` in a process of its own without the interpreter (Triton reads TRITON_INTERPRET at its import); skipped
    where this Triton has no NVIDIA compiler (ptxas)."""
    import os
    import subprocess
    import sys

    import pytest
    import triton

    ptxas = os.path.join(os.path.dirname(triton.__file__), "backends", "nvidia", "bin", "ptxas")
    if not os.path.exists(ptxas):
        pytest.skip("this Triton has no NVIDIA compiler (ptxas) to compile with")
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    out = subprocess.run([sys.executable, "-c", script, *args], capture_output=True, text=True, timeout=600, env=env)
    assert out.returncode == 0 and out.stdout.strip().endswith("compiled"), out.stderr[-3000:]
    return out.stdout
