"""``torch.compile`` of BDH on the CPU: the compiled loops are PyTorch operators (``bdh::relu_rope``, ``bdh::gate``
and their backwards, `bdh.model.kernels.cpu.ops`), so a compiled training pass keeps them as calls in one graph and
computes what the eager pass computes."""

import pytest
import torch
import torch._dynamo
import torch.nn.functional as F

from bdh.model.kernels.cpu import native
from bdh.model.kernels.pytorch.rope import official_frequencies, rope_tables

from .helpers import tiny_model

built = pytest.mark.skipif(not native.available(), reason="the compiled loops are not built here (setup.py)")


def _half_tables(N: int, T: int):
    cos, sin = rope_tables("rope", official_frequencies(N, 2.0**16), 0, T)
    return native.half_tables("rope", cos, sin)


@built
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_the_loops_are_well_formed_operators(dtype):
    """torch.library.opcheck: the schema, the fake (shape-only) implementations torch.compile traces with, the
    registered backward against autograd's use of it, and the same results when traced by AOT autograd."""
    g = torch.Generator().manual_seed(0)
    cos, sin = _half_tables(16, 5)
    h = torch.randn(2, 3, 5, 16, generator=g).to(dtype).requires_grad_()
    torch.library.opcheck(torch.ops.bdh.relu_rope.default, (h, cos, sin, "rope"))
    z, x = (torch.randn(2, 3, 5, 16, generator=g).to(dtype).requires_grad_() for _ in range(2))
    for drop in (0, 13107):  # no dropout, and p = 0.2 (round(0.2 2^16) of the 2^16 draws)
        torch.library.opcheck(torch.ops.bdh.gate.default, (z, x, torch.tensor(7, dtype=torch.int64), drop))


def _pass(model, idx, target, run=None):
    """The loss and the gradient of every parameter of ``model``, run through ``run`` (``model`` or its compiled
    form, which shares its parameters)."""
    model.zero_grad()
    loss = F.cross_entropy((model if run is None else run)(idx).flatten(0, 1), target.flatten())
    loss.backward()
    return loss.detach(), {n: p.grad.clone() for n, p in model.named_parameters()}


@built
def test_a_compiled_training_pass_equals_the_eager_one():
    """fp32, no dropout: the same loops and products; inductor sums the LayerNorms and the reductions in its own
    order, a few ulps carried through 2 layers (the tolerance of the eager-vs-PyTorch-path test)."""
    torch._dynamo.reset()
    model = tiny_model(seed=3, n_neurons=128).train()
    idx = torch.randint(0, 256, (2, 12), generator=torch.Generator().manual_seed(1))
    target = torch.randint(0, 256, (2, 12), generator=torch.Generator().manual_seed(2))
    loss, grads = _pass(model, idx, target)
    compiled_loss, compiled_grads = _pass(model, idx, target, torch.compile(model))
    assert torch.allclose(compiled_loss, loss, rtol=1e-5, atol=0)
    for name, g in grads.items():
        assert (compiled_grads[name] - g).abs().max() <= 1e-4 * g.abs().max(), name


@built
def test_a_compiled_bf16_pass_with_dropout_breaks_the_graph_only_at_the_token_check():
    """The loops (host dropout masks drawn inside the gate's loop) stay in the graph: the only breaks are the
    check of the token ids before the model (`bdh.model.tokens.check_tokens` reads them as Python integers)."""
    torch._dynamo.reset()
    model = tiny_model(seed=3, n_neurons=128, dropout=0.2).train()
    idx = torch.randint(0, 256, (2, 12), generator=torch.Generator().manual_seed(1))

    def forward(i):
        with torch.autocast("cpu", dtype=torch.bfloat16):
            return model(i)

    explained = torch._dynamo.explain(forward)(idx)
    where = {r.user_stack[-1].filename.replace("\\", "/").split("/bdh/")[-1] for r in explained.break_reasons}
    assert where <= {"model/tokens.py"}, where
    ops = {str(n.target) for g in explained.graphs for n in g.graph.nodes if n.op == "call_function"}
    assert {"bdh.relu_rope.default", "bdh.gate.default"} <= ops, sorted(ops)
