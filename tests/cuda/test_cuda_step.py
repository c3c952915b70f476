"""The generation step's Triton kernel (`bdh.model.kernels.triton.step`) compiled for the GPU: the read and the state
against the PyTorch in-place step at paper width, chosen by the decoder, and the decoder's tokens, logits and state
with it equal to ``BDH_TRITON=0``'s (fp32, TF32 off: tests/cuda/conftest.py)."""

from __future__ import annotations

import pytest
import torch
from model.helpers import rel_err, tiny_model

from bdh.model.kernels.pytorch.attention import recurrent

pytestmark = pytest.mark.cuda
pytest.importorskip("triton", reason="Triton is not installed")

GPU = torch.device("cuda")


@pytest.mark.parametrize("batch", [1, 3])
def test_the_kernel_equals_the_pytorch_step_at_paper_width(batch):
    """N = 8,192 rows, D = 256 columns, damped: both sum the read over N in fp32 in other orders (1e-5 of the
    largest, the fp32 bound of the CPU tests), and the state is one multiply-add and one multiply per entry (1e-6)."""
    from bdh.model.kernels.triton.step import recurrent_step_triton

    g = torch.Generator(device=GPU).manual_seed(0)
    q = torch.randn(batch, 4, 1, 8192, generator=g, device=GPU).relu()
    v = torch.randn(batch, 1, 1, 256, generator=g, device=GPU)
    S = torch.randn(batch, 4, 8192, 256, generator=g, device=GPU) / 64
    log_u = torch.linspace(0.9, 0.999, 4, device=GPU).log()
    with torch.no_grad():
        want, S_want = recurrent(q, q, v, log_u=log_u, state=S.clone(), need_state=True, inplace=True)
        got = recurrent_step_triton(q, q, v, state=S, log_u=log_u)
    assert rel_err(got, want) < 1e-5 and rel_err(S, S_want) < 1e-6


def _generate(triton: str, monkeypatch):
    from bdh.model.decoder import StateDecoder
    from bdh.model.kernels import Pass

    monkeypatch.setenv("BDH_TRITON", triton)
    model = tiny_model(seed=3, damping=(0.9, 0.8)).to(GPU)
    with torch.no_grad():
        chosen = model.kernels(Pass("recurrent", 0, 1, carried=True, need_state=True, inplace=True)).choice.attention
    dec = StateDecoder(model, 2, temperature=0)
    prompt = torch.randint(0, 256, (2, 7), generator=torch.Generator().manual_seed(0)).to(GPU)
    tokens = [dec.prefill(prompt).clone()] + [dec.step().clone() for _ in range(6)]  # past the graph's capture
    return chosen, torch.stack(tokens), dec.logits.clone(), dec.rho.clone()


def test_the_decoder_with_the_kernel_equals_todays_step(monkeypatch):
    (fast, *got), (slow, *want) = _generate("1", monkeypatch), _generate("0", monkeypatch)
    assert (fast, slow) == ("recurrent-triton", "recurrent")
    assert torch.equal(got[0], want[0]) and rel_err(got[1], want[1]) < 1e-5 and rel_err(got[2], want[2]) < 1e-5
