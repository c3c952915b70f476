"""What a training step on CUDA runs over its (B, H, T, N) activations (issue 58, point 2: a step that does not write
what it can recompute): with the kernels `choose` takes there (the Triton encoder with RoPE in its epilogue, the
chunked attention's kernels or the shared-keys form, the gated read-in with its dropout drawn inside), run here through
Triton's interpreter under bf16 autocast with dropout, no PyTorch operator outputs a tensor of the activations' shape
(B, H, T, N): no cast, no ReLU or its backward, no product x * y, no dropout mask, no sum of dx's two paths (the
matmuls that write z = Dy LN(a), and in the parallel form the attention's gradient, run as (B H, T, N) products viewed
as the activations, so are not counted: they are matmuls, not passes). Today's path (``BDH_TRITON=0``) runs 16 such
passes a layer, which the test also counts."""

from __future__ import annotations

import collections

import pytest
import torch
from torch.utils._python_dispatch import TorchDispatchMode

from .helpers import interpreted, tiny_model

pytestmark = pytest.mark.extra  # the gpu extra
pytest.importorskip("triton", reason="Triton (the gpu extra) is not installed")

#: operators that allocate or view a tensor without computing its entries
NOT_A_PASS = {"empty", "empty_like", "new_empty", "view", "_unsafe_view", "alias", "as_strided", "detach", "expand",
              "set_", "t", "transpose", "permute", "unsqueeze", "squeeze", "slice", "select"}  # fmt: skip


class _Passes(TorchDispatchMode):
    """Counts, by operator, the outputs of exactly ``shape`` that an operator computes."""

    def __init__(self, shape: tuple[int, ...]):
        super().__init__()
        self.shape, self.ops = shape, collections.Counter()

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        name = func.overloadpacket.__name__
        for o in out if isinstance(out, (tuple, list)) else (out,):
            if isinstance(o, torch.Tensor) and tuple(o.shape) == self.shape and name not in NOT_A_PASS:
                self.ops[name] += 1
        return out


def _passes(monkeypatch, triton: bool, mode: str) -> dict[str, int]:
    import bdh.model.kernels.choice as choice

    monkeypatch.setattr(choice, "use_triton", lambda device: triton)  # the CUDA rows, on the CPU
    monkeypatch.setenv("BDH_NATIVE", "0")  # no compiled CPU loops: the kernels CUDA runs
    model = tiny_model(seed=1, dropout=0.1, dropout_rng="torch").train()  # masks ``torch``: CUDA's with ``auto``
    cfg, (B, T) = model.config, (2, 20)
    counter = _Passes((B, cfg.n_head, T, cfg.n_neurons // cfg.n_head))
    idx = torch.randint(0, 256, (B, T), generator=torch.Generator().manual_seed(0))
    with counter, torch.autocast("cpu", dtype=torch.bfloat16):
        model(idx, mode=mode).float().square().mean().backward()
    return dict(counter.ops)


@pytest.mark.parametrize("mode", ["chunked", "parallel"])  # the paper-size step's forms at T = 2,048 and 512
def test_a_training_step_with_the_cuda_kernels_runs_no_pass_over_its_activations(monkeypatch, mode):
    interpreted("bdh.model.kernels.triton.chunked", "chunked_triton")
    assert _passes(monkeypatch, True, mode) == {}


def test_todays_path_runs_its_sixteen_passes_a_layer(monkeypatch):
    """``BDH_TRITON=0`` (2 layers), a layer: ``F.relu`` twice (x, and ReLU(z) in the gate), RoPE's four casts (to fp32
    and back, forward and backward), five products (the gate's, dropout's and their gradients'), dropout's mask and
    its scale, two ReLU backwards, the sum of dx's two paths (RoPE's complex multiplies run on a (B, H, T, N / 2)
    view, not counted)."""
    passes = _passes(monkeypatch, False, "chunked")
    assert sum(passes.values()) == 16 * 2 and passes.get("bernoulli_") == 2, passes
