"""The delta rule's compiled read (`bdh.model.kernels.cpu.native.delta_read`, chosen as ``delta-native`` for a pass
without gradients on the CPU) against the reference loop `naive_state_rule`, and the model's reads with the loops on
and off (``BDH_NATIVE=0``): the PyTorch fallback (the UT form) gives the same logits, states and, where gradients
are wanted, the same gradients."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from bdh.model.kernels import Pass
from bdh.model.kernels.cpu import native
from bdh.model.kernels.naive import naive_state_rule
from bdh.model.kernels.pytorch.state_rules import unit_keys

from .helpers import rel_err, tiny_model

built = pytest.mark.skipif(not native.available(), reason="the compiled loops are not built here (setup.py)")
#: fp32 sums of N products per token, carried through T tokens of writes: ~N T ulps of the scale at worst, and
#: ~1e-7 measured; 1e-5 is far below any error of the rule itself (a wrong sign, index or order is O(1))
FP32 = 1e-5
#: a bf16 read is rounded once at the end (2^-9 of it) from fp32 sums of bf16 keys that are exact in the reference
BF16 = 2**-8


def _inputs(seed: int, B: int, H: int, T: int, N: int, D: int, v_heads: int, retention: str, gate: str):
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(B, H, T, N, generator=g).relu()  # BDH's keys: positive, with zeros (rows the loop skips)
    x[:, :, 1:2] = 0  # a token with no active neuron (none with T = 1): a zero unit key, it reads 0, writes nothing
    v = torch.randn(B, v_heads, T, D, generator=g)
    z = torch.randn(B, H, T, generator=g) * 3  # some b_t exactly 0 or 1 under the hard gate
    beta = F.hardsigmoid(z) if gate == "hard" else torch.sigmoid(z)
    log_g = {
        "none": None,
        "per-head": torch.log(torch.linspace(0.5, 1.0, H)).view(1, H, 1).expand(B, H, T),  # broadcast over B
        "per-token": F.logsigmoid(torch.randn(B, H, T, generator=g) + 2),
        "vanishing": torch.full((B, H, T), -12.0),  # the loop's scale folds back into the state (below 1e-15)
        "zero": torch.full((B, H, T), float("-inf")),  # u_t = 0: every token forgets the whole state
    }[retention]
    state = torch.randn(B, H, N, D, generator=g)
    return x, v, beta, log_g, state


RETENTIONS = ["none", "per-head", "per-token", "vanishing", "zero"]
#: (B, H, T, N, D, value heads): one block of the loop's 64 columns (held in registers); H value heads and D = 80
#: (a block and a narrower one of 16); one token with D = 40 (a narrow block only)
CASES = [((1, 4, 9, 32, 64, 1), "sigmoid", r) for r in RETENTIONS]
CASES += [((2, 3, 5, 24, 80, 3), "hard", r) for r in RETENTIONS]


@built
@pytest.mark.parametrize("shape, gate, retention", CASES + [((1, 1, 1, 8, 40, 1), "hard", "per-token")])
def test_the_compiled_read_equals_the_loop(shape, gate, retention):
    """Reads and the state after, in fp32 and bf16 keys, against the fp64 loop; shapes with one or H value heads,
    D not a multiple of the loop's 64 columns, one token."""
    B, H, T, N, D, v_heads = shape
    x, v, beta, log_g, state = _inputs(sum(shape), B, H, T, N, D, v_heads, retention, gate)
    for dtype, bound in [(torch.float32, FP32), (torch.bfloat16, BF16)]:
        q = x.to(dtype)
        k = unit_keys(q)
        S = state.clone()
        a = native.delta_read(q, k, v, beta, log_g, S)
        ref, S_ref = naive_state_rule(
            q.double(), k.double(), v.double(), log_g=log_g, beta=beta.double(), state=state.double(), need_state=True
        )
        assert a.dtype == dtype and a.shape == (B, H, T, D)
        assert rel_err(a.double(), ref) < bound, (dtype, rel_err(a.double(), ref))
        assert rel_err(S.double(), S_ref) < FP32, (dtype, rel_err(S.double(), S_ref))  # the state stays fp32


@built
def test_the_thread_count_does_not_change_the_read():
    """Threads share out the (sequence, head, block of columns) tasks; each column is summed in the same order, so
    the reads agree to fp32 rounding (bound as above; not asserted bit-equal across thread counts)."""
    x, v, beta, log_g, state = _inputs(5, 2, 2, 7, 16, 48, 1, "per-token", "sigmoid")
    before = torch.get_num_threads()
    outs = []
    try:
        for threads in (1, 2):
            torch.set_num_threads(threads)
            S = state.clone()
            outs.append((native.delta_read(x, unit_keys(x), v, beta, log_g, S), S))
    finally:
        torch.set_num_threads(before)
    assert rel_err(outs[0][0], outs[1][0]) < FP32 and rel_err(outs[0][1], outs[1][1]) < FP32


def _read(model, idx: torch.Tensor, step: int, inplace: bool = False):
    """Logits of reading ``idx`` through the state ``step`` tokens at a time, and the state after."""
    state, parts = model.init_state(idx.shape[0]), []
    for s in range(0, idx.shape[1], step):
        logits, state = model.step(idx[:, s : s + step], state, inplace=inplace)
        parts.append(logits)
    return torch.cat(parts, dim=1), state.rho


@pytest.mark.parametrize("native_env", ["1", "0"])
@pytest.mark.parametrize("write_gate", ["sigmoid", "hard"])
def test_the_model_reads_the_same_with_the_loops_on_and_off(native_env, write_gate, monkeypatch):
    """A read without gradients takes ``delta-native`` where the loops are built and on, the UT form under
    ``BDH_NATIVE=0``; both equal one fp64 pass of `slow_forward`'s loop (bound FP32), in chunks and token by token
    in place (generation's step)."""
    monkeypatch.setenv("BDH_NATIVE", native_env)
    model = tiny_model(seed=3, n_layer=2, state_write="delta", write_gate=write_gate, chunk_size=4)
    idx = torch.randint(0, 256, (2, 9), generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        ref = model.double().slow_forward(idx)
        model.float()
        chosen = model.kernels(Pass("parallel", 0, 5, carried=True, need_state=True)).choice.attention
        assert chosen == ("delta-native" if native.available() else "delta-parallel-ut")
        chunked, rho = _read(model, idx, 5)
        stepped, rho_stepped = _read(model, idx, 1, inplace=True)
    assert rel_err(chunked.double(), ref) < FP32 and rel_err(stepped.double(), ref) < FP32
    assert rel_err(rho_stepped, rho) < FP32


def test_a_read_with_gradients_takes_the_ut_form():
    """With gradients on, the pass keeps the UT form (the compiled read has no backward): the chosen kernel, and
    the gradients of a carried read equal those with the loops off (fp32 in one process: the same operations;
    bound FP32 for the order of the sums)."""
    model = tiny_model(seed=4, n_layer=2, state_write="delta", chunk_size=4)
    assert model.kernels(Pass("parallel", 0, 5, carried=True, need_state=True)).choice.attention == "delta-parallel-ut"
    idx = torch.randint(0, 256, (1, 8), generator=torch.Generator().manual_seed(2))

    def grads(off: bool) -> dict[str, torch.Tensor]:
        model.zero_grad()
        with native.disabled() if off else torch.enable_grad():
            logits, _ = _read(model, idx, 4)
        logits.square().mean().backward()
        return {n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None}

    on, off = grads(False), grads(True)
    assert on.keys() == off.keys() and "write_w" in on
    for name in on:
        assert rel_err(on[name], off[name]) < FP32, name
