"""Reading through a carried state (`init_state` / `step`): chunk by chunk, any chunk sizes, equals the full forward
in values and gradients; the state's size does not grow with the tokens read; a wrong state is refused in one line.

Every comparison runs in fp64 with random weights (`randomize`, so that every path carries weight): the two sides
add the same terms in other orders and groupings (chunked scans, prefix sums against a loop), whose rounding is
below 1e-13 relative at these sizes; 1e-9 leaves room and still catches any wrong or missing term (>= 1e-3)."""

from __future__ import annotations

import pytest
import torch
from _compare import randomize, rel_err

from bdh.baselines import (
    GLA,
    GPT,
    RWKV,
    BaseConv,
    BaseConvConfig,
    Based,
    BasedConfig,
    DeltaNet,
    DeltaNetConfig,
    GatedDeltaNet,
    GatedDeltaNetConfig,
    GLAConfig,
    GPTConfig,
    Hyena,
    HyenaConfig,
    Mamba,
    MambaConfig,
    RWKVConfig,
)
from bdh.errors import UserError
from bdh.model import BDH, BDHConfig
from bdh.model_api import carries_state, state_grows

TOL = 1e-9
#: models with a fixed-size state, tiny
STATEFUL = {
    "mamba": lambda: Mamba(MambaConfig(vocab_size=32, n_layer=2, n_embd=16, d_state=4, d_conv=3)),
    "mamba-parallel": lambda: Mamba(MambaConfig(vocab_size=32, n_layer=2, n_embd=16, d_state=4, scan="parallel")),
    "gla": lambda: GLA(GLAConfig(vocab_size=32, seq_len=40, n_layer=2, n_embd=16, n_head=2, gate_rank=4, chunk_size=4)),
    "gla-fixed": lambda: GLA(
        GLAConfig(vocab_size=32, seq_len=40, n_embd=16, n_head=2, decay="fixed", form="reference")
    ),
    "rwkv": lambda: RWKV(RWKVConfig(vocab_size=32, n_layer=2, n_embd=16, chunk_size=4)),
    "rwkv-sequential": lambda: RWKV(RWKVConfig(vocab_size=32, n_embd=16, mlp_ratio=0, wkv="sequential")),
    "based": lambda: Based(
        BasedConfig(vocab_size=32, seq_len=40, n_layer=3, n_embd=16, n_head=2, d_feature=4, window=5, chunk_size=4)
    ),
    "deltanet": lambda: DeltaNet(DeltaNetConfig(vocab_size=32, seq_len=40, n_embd=16, n_head=2, chunk_size=4)),
    "deltanet-reference": lambda: DeltaNet(
        DeltaNetConfig(vocab_size=32, seq_len=40, n_embd=16, n_head=2, conv_size=0, form="reference")
    ),
    "gated-deltanet": lambda: GatedDeltaNet(
        GatedDeltaNetConfig(vocab_size=32, seq_len=40, n_embd=16, n_head=2, chunk_size=4, conv_size=3)
    ),
}
#: chunk sizes of the 19-token read: ones, a chunk longer than a window or a GLA/RWKV/Based chunk, uneven ones
SPLITS = [[1] * 19, [7, 1, 11], [3, 3, 3, 3, 3, 4], [19]]


def _read(model, idx: torch.Tensor, sizes: list[int]) -> torch.Tensor:
    state, out, start = model.init_state(idx.shape[0]), [], 0
    for n in sizes:
        logits, state = model.step(idx[:, start : start + n], state)
        out.append(logits)
        start += n
    assert state.pos == idx.shape[1]
    return torch.cat(out, dim=1)


def _grads(model, logits: torch.Tensor) -> dict[str, torch.Tensor]:
    model.zero_grad()
    weight = torch.linspace(-1, 1, logits.numel(), dtype=logits.dtype).view_as(logits)
    (logits * weight).sum().backward()
    return {n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None}


def _bdh() -> BDH:
    return BDH(BDHConfig(vocab_size=32, n_layer=1, n_embd=16, n_head=1, n_neurons=32))


def _model(name: str) -> torch.nn.Module:
    torch.manual_seed(0)
    return randomize(STATEFUL[name]().double().eval(), std=0.3)


@pytest.mark.parametrize("sizes", SPLITS, ids=["ones", "7-1-11", "threes", "whole"])
@pytest.mark.parametrize("name", list(STATEFUL))
def test_a_chunked_read_through_the_state_is_the_full_forward_in_values_and_gradients(name, sizes):
    model = _model(name)
    idx = torch.randint(0, 32, (2, 19), generator=torch.Generator().manual_seed(1))
    full = model(idx)
    want = _grads(model, full)
    got = _read(model, idx, sizes)
    assert rel_err(got.detach(), full.detach()) <= TOL
    grads = _grads(model, got)
    assert grads.keys() == want.keys() and grads
    for n in want:
        assert rel_err(grads[n], want[n], floor=1e-12) <= TOL, n


@pytest.mark.parametrize("name", list(STATEFUL))
def test_one_token_steps_give_the_last_logits_and_the_state_does_not_grow(name):
    model = _model(name)
    idx = torch.randint(0, 32, (3, 40), generator=torch.Generator().manual_seed(2))
    state = model.init_state(3)
    size = state.nbytes()
    with torch.no_grad():
        for t in range(40):
            logits, state = model.step(idx[:, t], state)
            assert logits.shape == (3, 32) and state.nbytes() == size
        full = model(idx[:, :40])[:, -1]
    assert rel_err(logits, full) <= TOL and state.pos == 40 and state.batch_size == 3


def test_a_wrong_state_is_refused_in_one_line():
    mamba, rwkv = _model("mamba"), _model("rwkv")
    tokens = torch.zeros(2, 3, dtype=torch.long)
    cases = [
        (mamba, mamba.init_state(3), "the state holds 3 sequences, the tokens 2"),
        (mamba, rwkv.init_state(2), "the state is a 'rwkv' model's, not this 'mamba' model's"),
        (mamba, _model("mamba-parallel").init_state(2), "are not this model's"),  # another d_conv
        (rwkv, torch.zeros(2, 3), "state must be a MixerState (from model.init_state), got Tensor"),
        (mamba, _bdh().init_state(2), "got BDHState"),
    ]
    for model, state, message in cases:
        with pytest.raises(UserError, match="^[^\n]*$") as info:
            model.step(tokens, state)
        assert message in str(info.value)
    with pytest.raises(UserError, match="batch_size must be a positive integer"):
        mamba.init_state(0)


def test_what_a_model_carries_is_what_its_class_declares():
    assert all(carries_state(_model(name)) and not state_grows(_model(name)) for name in STATEFUL)
    assert carries_state(_bdh())
    gpt = GPT(GPTConfig(vocab_size=32, seq_len=8, n_layer=1, n_embd=16, n_head=2))
    assert state_grows(gpt) and not carries_state(gpt)
    for model in (Hyena(HyenaConfig(vocab_size=32, seq_len=8, n_embd=16)), BaseConv(BaseConvConfig(vocab_size=32))):
        assert not carries_state(model) and not state_grows(model)
        with pytest.raises(UserError, match=f"^{type(model).__name__}: no recurrent state to carry: [^\n]*$"):
            model.init_state(1)


def _gpt(**fields) -> GPT:
    torch.manual_seed(0)
    cfg = GPTConfig(vocab_size=32, seq_len=19, n_layer=2, n_embd=16, n_head=2, mlp_ratio=2, **fields)
    return randomize(GPT(cfg).double().eval(), std=0.3)


GPTS = {
    "learned": {},
    "rope": {"positional": "rope"},
    "none": {"positional": "none"},
    "shared-untied": {"positional": "rope", "share_layers": True, "tie_embeddings": False, "bias": False},
}


@pytest.mark.parametrize("sizes", SPLITS, ids=["ones", "7-1-11", "threes", "whole"])
@pytest.mark.parametrize("fields", list(GPTS.values()), ids=list(GPTS))
def test_gpt_reading_through_its_kv_cache_is_the_full_forward_in_values_and_gradients(fields, sizes):
    model = _gpt(**fields)
    idx = torch.randint(0, 32, (2, 19), generator=torch.Generator().manual_seed(1))
    full = model(idx)
    want = _grads(model, full)
    got = _read(model, idx, sizes)
    assert rel_err(got.detach(), full.detach()) <= TOL
    grads = _grads(model, got)
    assert grads.keys() == want.keys() and grads
    for n in want:
        assert rel_err(grads[n], want[n], floor=1e-12) <= TOL, n


def test_gpt_generation_with_the_cache_is_recomputing_and_the_cache_grows():
    """Greedy generation token by token on the cache against the full forward recomputed at every length."""
    model = _gpt(positional="rope")
    prompt = torch.randint(0, 32, (2, 5), generator=torch.Generator().manual_seed(3))
    seq, state = prompt, model.init_state(2)
    with torch.no_grad():
        logits, state = model.step(prompt, state)
        logits = logits[:, -1]
        for _ in range(30):  # past seq_len = 19: RoPE reads any length
            assert rel_err(logits, _recompute(model, seq)) <= TOL
            nxt = logits.argmax(-1)
            seq = torch.cat([seq, nxt[:, None]], dim=1)
            logits, state = model.step(nxt, state)
    assert state.pos == seq.shape[1] and state.nbytes() == model.cache_nbytes(seq.shape[1], 2, element_size=8)


def _recompute(model: GPT, seq: torch.Tensor) -> torch.Tensor:
    """The last logits of the full forward over ``seq``, which may be longer than seq_len (a check, not a weight)."""
    room = GPT(model.config.replace(seq_len=seq.shape[1])).double().eval()
    room.load_state_dict(model.state_dict())
    return room(seq)[:, -1]


def test_gpt_refuses_what_its_cache_cannot_do_in_one_line():
    learned = _gpt()
    idx = torch.zeros(1, 12, dtype=torch.long)
    _, state = learned.step(idx, learned.init_state(1))
    four_heads = GPT(GPTConfig(vocab_size=32, seq_len=19, n_layer=2, n_embd=16, n_head=4)).double()
    cases = [
        (state, "positions up to 24 pass seq_len = 19; learned positions cannot read past"),
        (learned.init_state(2), "the cache holds 2 sequences, the tokens 1"),
        (four_heads.init_state(1), "the cache is not this model's (2 passes of (2, 0, 8) keys and values)"),
        (_model("mamba").init_state(1), "state must be a KVCache (from model.init_state), got MixerState"),
    ]
    for st, message in cases:
        with pytest.raises(UserError, match="^[^\n]*$") as info:
            learned.step(idx, st)
        assert message in str(info.value)
    with pytest.raises(UserError, match="^GPT: a bidirectional model"):
        _gpt(causal=False).init_state(1)


def test_a_baseline_state_survives_a_tbptt_checkpoint():
    """`TruncatedBPTT` writes the carried states into a checkpoint and reads them back: a `MixerState` (per-layer
    named tensors, not tensor fields) by its ``flat`` / ``unflat``; the read-back state continues the read exactly."""
    from bdh.train.recurrent import Recurrent, TruncatedBPTT
    from bdh.train.runtime.distributed import DistEnv

    model = _model("based")
    assert isinstance(model, Recurrent)
    idx = torch.randint(0, 32, (2, 9), generator=torch.Generator().manual_seed(4))
    with torch.no_grad():
        _, state = model.step(idx[:, :6], model.init_state(2))
        carry = TruncatedBPTT(task=None, model=model, micro=2, accum=1)
        carry.keep(0, state)
        tensors, meta = carry.gather(DistEnv())
        back = TruncatedBPTT(task=None, model=model, micro=2, accum=1)
        back.restore(tensors, meta, 0, torch.device("cpu"))
        assert back.carry[0].pos == 6 and back.carry[0].model == "based"
        assert torch.equal(model.step(idx[:, 6:], back.carry[0])[0], model.step(idx[:, 6:], state)[0])


@pytest.mark.parametrize("name", ["mamba", "gla", "rwkv", "based"])
def test_under_bf16_autocast_the_state_keeps_its_precision_and_size(name):
    """Mixed precision reads: the chunk computes in bf16 where autocast says, the carried state stays as made (fp32),
    so its size does not change along the read and nothing is lost between chunks to bf16 rounding."""
    torch.manual_seed(0)
    model = STATEFUL[name]().eval()
    state = model.init_state(2)
    dtypes, size = [t.dtype for layer in state.layers for t in layer.values()], state.nbytes()
    idx = torch.randint(0, 32, (2, 10), generator=torch.Generator().manual_seed(5))
    with torch.no_grad(), torch.autocast("cpu", dtype=torch.bfloat16):
        for part in (idx[:, :7], idx[:, 7:]):
            logits, state = model.step(part, state)
    assert [t.dtype for layer in state.layers for t in layer.values()] == dtypes and state.nbytes() == size
    assert torch.isfinite(logits.float()).all()
