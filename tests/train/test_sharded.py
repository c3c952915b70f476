"""The FSDP2 helpers (bdh.train.runtime.sharded) in one process: a group of one (gloo on the CPU; NCCL on a GPU, marked
``cuda``), where every tensor is one shard.

The two-process runs that compare losses with one process are in test_distributed.py; these check the pieces
the trainer builds on (sharding, gathering full tensors, cutting them back into shards) fast and in-process.
"""

from __future__ import annotations

import pytest
import torch
import torch.distributed as dist
import torch.nn.functional as F

from bdh import BDH, BDHConfig
from bdh.baselines import GPT, GPTConfig
from bdh.train.run import checkpoint as ckpt
from bdh.train.runtime import sharded


@pytest.fixture(params=["cpu", pytest.param("cuda", marks=pytest.mark.cuda)])
def device(request, tmp_path) -> torch.device:
    """A process group of one process on the device's backend (gloo, NCCL), with a file store: no port to find."""
    if dist.is_initialized():
        pytest.skip("a process group is already set up in this process")
    backend = "nccl" if request.param == "cuda" else "gloo"
    dist.init_process_group(backend, init_method=f"file://{tmp_path / 'store'}", rank=0, world_size=1)
    yield torch.device(request.param)
    dist.destroy_process_group()


def _tiny(device: torch.device | str = "cpu") -> BDH:
    torch.manual_seed(0)
    return BDH(BDHConfig(n_layer=2, n_embd=16, n_head=2, n_neurons=64, vocab_size=32, dropout=0.0)).to(device)


def _train(model, steps: int = 3) -> torch.optim.AdamW:
    opt = torch.optim.AdamW(model.parameters(), lr=1e-2)
    g = torch.Generator().manual_seed(1)
    for _ in range(steps):
        idx = torch.randint(0, 32, (2, 9), generator=g).to(model.E.device)
        F.cross_entropy(model(idx[:, :-1]).flatten(0, 1), idx[:, 1:].flatten()).backward()
        opt.step()
        opt.zero_grad()
    return opt


def test_sharded_training_equals_plain_training_and_gathers_full_tensors(device):
    plain, model = _tiny(device), _tiny(device)
    sharded.shard(model, device, 1)
    assert sharded.is_sharded(model) and not sharded.is_sharded(plain)
    opt_plain, opt = _train(plain), _train(model)
    full = sharded.full_state_dict(model)
    assert all(type(t) is torch.Tensor for t in full.values())  # plain tensors, as safetensors wants
    assert all(t.device.type == "cpu" for t in full.values())
    for name, value in plain.state_dict().items():
        assert torch.allclose(full[name], value.cpu(), atol=1e-6, rtol=1e-5), name
    state = sharded.full_optimizer_state(opt)
    for idx, entry in opt_plain.state_dict()["state"].items():
        assert torch.allclose(state["state"][idx]["exp_avg"], entry["exp_avg"].cpu(), atol=1e-6, rtol=1e-5)
    assert sharded.full_state_dict(model, keep=False) == {}  # a process that does not write keeps nothing
    # the recurrent entry point gathers the weights like forward
    idx = torch.randint(0, 32, (2, 5), device=device)
    logits, _ = model.step(idx, model.init_state(2))
    assert torch.allclose(logits, plain.step(idx, plain.init_state(2))[0], atol=1e-5, rtol=1e-4)


def test_full_tensors_load_back_into_shards_with_the_optimiser(device, tmp_path):
    """A checkpoint of a plain run loads into a sharded model and optimiser: the next step is the plain run's."""
    plain = _tiny(device)
    opt_plain = _train(plain)
    path = ckpt.save_checkpoint(tmp_path, 3, plain, opt_plain, {}, {"step": 3, "tokens": 0}, keep=1)
    model = sharded.shard(_tiny(device), device, 1)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-2)
    ckpt.load_checkpoint(path, model, opt, device)
    for name, value in sharded.full_state_dict(model).items():
        assert torch.equal(value, plain.state_dict()[name].cpu()), name
    idx = (torch.arange(18).view(2, 9) % 32).to(device)
    for m, o in ((plain, opt_plain), (model, opt)):
        F.cross_entropy(m(idx[:, :-1]).flatten(0, 1), idx[:, 1:].flatten()).backward()
        o.step()
    # AdamW's step divides by the square root of the second moment: moments lost in loading would show here
    for name, value in sharded.full_state_dict(model).items():
        assert torch.allclose(value, plain.state_dict()[name].cpu(), atol=1e-6, rtol=1e-5), name


def test_units_are_the_distinct_blocks():
    assert sharded.units(_tiny()) == []  # BDH: weights shared by every layer, one unit
    gpt = GPT(GPTConfig(vocab_size=32, seq_len=16, n_layer=3, n_embd=16, n_head=2))
    assert sharded.units(gpt) == list(gpt.blocks)
    shared = GPT(GPTConfig(vocab_size=32, seq_len=16, n_layer=3, n_embd=16, n_head=2, share_layers=True))
    assert sharded.units(shared) == []  # one block applied three times stays in the root unit
