"""What a training step on CUDA keeps for its backward (issue 58, point 2: the saved activations in bf16): the kernels
`choose` takes there (the Triton encoder, chunked attention and gated read-in), run here through Triton's interpreter
under bf16 autocast, save every N-wide tensor in bf16, and three of them a layer (x, R x and z): y = ReLU(z) * x, its
dropout mask and the ReLU masks are never saved (formed again from z and x in the backward)."""

from __future__ import annotations

import pytest
import torch

from model.helpers import interpreted, tiny_model

pytestmark = pytest.mark.extra  # the gpu extra
pytest.importorskip("triton", reason="Triton (the gpu extra) is not installed")


def _saved(monkeypatch, state_write: str = "add"):
    """(the choice, every tensor autograd saves in a bf16 training forward with CUDA's kernels, the model's N)."""
    interpreted("bdh.model.kernels.triton.chunked", "chunked_triton")
    import bdh.model.kernels.choice as choice
    from bdh.model.kernels import Pass

    monkeypatch.setattr(choice, "use_triton", lambda device: True)  # the CUDA rows, on the CPU
    monkeypatch.setenv("BDH_NATIVE", "0")  # no compiled CPU loops: the kernels CUDA runs
    model = tiny_model(seed=1, dropout=0.1, dropout_rng="torch", state_write=state_write).train()
    c = model.kernels(Pass("chunked", 0, 20)).choice
    saved: list[torch.Tensor] = []
    idx = torch.randint(0, 256, (2, 20), generator=torch.Generator().manual_seed(0))
    hooks = torch.autograd.graph.saved_tensors_hooks(lambda t: saved.append(t) or t, lambda t: t)
    with hooks, torch.autocast("cpu", dtype=torch.bfloat16):
        model(idx, mode="chunked").float().square().mean().backward()
    return c, saved, model.config.n_neurons // model.config.n_head, model.config.n_layer


def test_a_training_step_with_the_cuda_kernels_saves_its_n_wide_tensors_in_bf16_three_a_layer(monkeypatch):
    c, saved, N, L = _saved(monkeypatch)
    assert (c.encode, c.attention, c.read_in) == ("triton", "chunked-triton", "gated-triton")
    wide = [t for t in saved if t.dim() == 4 and t.shape[-1] == N]
    assert wide and all(t.dtype == torch.bfloat16 for t in wide), {t.dtype for t in wide}
    # distinct storages: x (the encoder's output, read again by the read-in), R x (the attention's q = k), z
    assert len({t.untyped_storage().data_ptr() for t in wide}) == 3 * L
    assert not any(t.dtype == torch.bool and t.shape[-1] == N for t in saved)  # no dropout or ReLU mask


def test_with_the_delta_rule_every_n_wide_tensor_saved_is_bf16(monkeypatch):
    c, saved, N, _ = _saved(monkeypatch, state_write="delta")
    assert c.attention == "delta-chunked-triton"
    wide = [t for t in saved if t.dim() == 4 and t.shape[-1] == N]
    assert wide and all(t.dtype == torch.bfloat16 for t in wide), {t.dtype for t in wide}
