"""BDH's ablations (`BDHConfig` separate_keys, ungated, no_expansion, unshared_layers) on a CUDA GPU: every attention
form (the chunked one on the Triton kernels where Triton is installed) computes what the CPU computes, and the
recurrent step continues the sequence. Tolerances as tests/cuda/test_cuda.py: fp32 with TF32 off, 1e-5 of the
largest value (other kernels, other summation orders), while a wrong branch changes the logits by their own size."""

from __future__ import annotations

import pytest
import torch
from model.helpers import logits_and_grads, rel_err, tiny_config

from bdh import BDH
from bdh.model.config import ABLATIONS

pytestmark = pytest.mark.cuda

GPU = torch.device("cuda")
CASES = {name: {name: True} for name in ABLATIONS} | {"all": dict.fromkeys(ABLATIONS, True)}


def _model(case: str) -> BDH:
    fields = dict(CASES[case], damping=0.9)
    fields["n_neurons"] = None if fields.get("no_expansion") else 128
    torch.manual_seed(3)
    return BDH(tiny_config(**fields))


@pytest.mark.parametrize("form", ["parallel", "chunked", "recurrent"])
@pytest.mark.parametrize("case", CASES)
def test_each_ablation_on_the_gpu_computes_what_it_computes_on_the_cpu(case, form):
    cpu = _model(case)
    gpu = _model(case).to(GPU)
    idx = torch.randint(0, 256, (2, 19))
    ref_logits, ref_grads = logits_and_grads(cpu, idx, form)
    logits, grads = logits_and_grads(gpu, idx.to(GPU), form)
    assert logits.is_cuda and rel_err(logits.cpu(), ref_logits) <= 1e-5
    for name, g in grads.items():
        assert rel_err(g.cpu(), ref_grads[name]) <= 1e-5, name


@pytest.mark.parametrize("case", CASES)
def test_each_ablation_steps_on_the_gpu_as_its_whole_sequence(case):
    model = _model(case).to(GPU).eval()
    idx = torch.randint(0, 256, (2, 12), device=GPU)
    with torch.no_grad():
        full = model(idx)
        logits, state = model.step(idx[:, :5], model.init_state(2))
        pieces = [logits]
        for t in range(5, 12):
            logits, state = model.step(idx[:, t], state, inplace=True)
            pieces.append(logits.unsqueeze(1))
    assert rel_err(torch.cat(pieces, dim=1), full) <= 1e-5
