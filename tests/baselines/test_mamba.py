"""Mamba: the parallel prefix scan against the sequential loop (values and gradients), the formulas, the trainer."""

from __future__ import annotations

import math

import pytest
import torch
from _compare import assert_same_model, randomize, rel_err
from _trainer_run import learned, trainer_losses

from bdh.baselines.mamba import (
    Mamba,
    MambaConfig,
    selective_scan_native,
    selective_scan_parallel,
    selective_scan_recurrent,
    selective_scan_sequential,
)
from bdh.model.kernels.cpu import native

built = pytest.mark.skipif(not native.available(), reason="the compiled loops are not built here (setup.py)")


def scan_inputs(b: int, T: int, e: int, N: int, dtype: torch.dtype, delta_scale: float = 1.0) -> list[torch.Tensor]:
    g = torch.Generator().manual_seed(0)
    x = torch.randn(b, T, e, generator=g, dtype=dtype)
    delta = torch.rand(b, T, e, generator=g, dtype=dtype) * delta_scale
    A = -torch.arange(1, N + 1, dtype=dtype).repeat(e, 1) * (0.5 + torch.rand(e, 1, generator=g, dtype=dtype))
    B, C = (torch.randn(b, T, N, generator=g, dtype=dtype) for _ in range(2))
    D = torch.randn(e, generator=g, dtype=dtype)
    return [t.requires_grad_() for t in (x, delta, A, B, C, D)]


@pytest.mark.parametrize("fast", [selective_scan_parallel, selective_scan_recurrent], ids=["parallel", "recurrent"])
@pytest.mark.parametrize("T", [1, 2, 7, 16, 33])
def test_the_fast_scans_are_the_sequential_one_in_values_and_gradients(T, fast):
    """fp64: the forms add the same terms in other orders (log2 T rounds against T steps; the recurrent form's
    backward is written by hand); the rounding of either is below 1e-14 relative here, so 1e-10 leaves room and still
    catches any wrong term (>= 1e-3)."""
    args = scan_inputs(2, T, 5, 4, torch.float64)
    ys = [f(*args) for f in (selective_scan_sequential, fast)]
    weight = torch.cos(torch.arange(ys[0].numel(), dtype=torch.float64)).view_as(ys[0])
    grads = [torch.autograd.grad((y * weight).sum(), args, allow_unused=True, materialize_grads=True) for y in ys]
    assert rel_err(ys[1], ys[0]) <= 1e-10
    for ga, gb in zip(*grads):
        assert rel_err(gb, ga) <= 1e-10


@pytest.mark.parametrize("T", [1, 5, 16])
def test_the_recurrent_scan_carries_a_state_in_and_out_with_gradients(T):
    """From a given h0, returning h_T: values and the gradients of h0 and of every input (fp64, as above)."""
    args = scan_inputs(2, T, 5, 4, torch.float64)
    h0 = torch.randn(2, 5, 4, dtype=torch.float64, generator=torch.Generator().manual_seed(1)).requires_grad_()
    outs = [f(*args, h0, final=True) for f in (selective_scan_sequential, selective_scan_recurrent)]
    grads = [torch.autograd.grad((y * y.detach().cos()).sum() + (h * h).sum(), [*args, h0]) for y, h in outs]
    for a, b in zip(outs[0], outs[1]):
        assert rel_err(b, a) <= 1e-10
    for ga, gb in zip(*grads):
        assert rel_err(gb, ga) <= 1e-10


def test_the_scan_is_the_recurrence_written_out():
    """One channel, one state, three steps by hand: h_t = exp(d_t a) h_{t-1} + d_t b_t x_t, y_t = c_t h_t + D x_t."""
    x, d, b, c = [1.0, 2.0, -1.0], [0.5, 0.1, 1.0], [1.0, -2.0, 0.5], [2.0, 1.0, 3.0]
    a, D = -1.5, 0.25
    h, want = 0.0, []
    for t in range(3):
        h = math.exp(d[t] * a) * h + d[t] * b[t] * x[t]
        want.append(c[t] * h + D * x[t])
    seq = [torch.tensor(v, dtype=torch.float64).view(1, 3, 1) for v in (x, d, b, c)]
    args = [*seq[:2], torch.tensor([[a]], dtype=torch.float64), *seq[2:], torch.tensor([D], dtype=torch.float64)]
    for scan in (selective_scan_sequential, selective_scan_recurrent, selective_scan_parallel):
        assert scan(*args).flatten().tolist() == pytest.approx(want, rel=1e-12)


def test_the_parallel_scan_is_stable_where_cumulative_decays_underflow():
    """Large steps: the decay over the sequence is exp(-thousands), which a closed form exp(S_t) sum exp(-S_s) u_s
    overflows in fp32; the prefix scan multiplies decays in (0, 1] only, so it stays finite and equal to the loop
    (fp32 rounding, about 1e-7 relative per operation over ~10 rounds: 1e-5 suffices)."""
    args = [a.detach().float() for a in scan_inputs(2, 64, 4, 8, torch.float64, delta_scale=20.0)]
    fast, ref = selective_scan_parallel(*args), selective_scan_sequential(*args)
    assert torch.isfinite(fast).all()
    assert rel_err(fast, ref) <= 1e-5


@pytest.mark.parametrize("scan", ["parallel", "recurrent"])
def test_the_models_scans_agree_in_values_and_gradients(scan):
    """The whole model in fp64 with random weights: the scan is its only difference; tolerance as above."""
    torch.manual_seed(0)
    cfg = MambaConfig(vocab_size=32, n_layer=2, n_embd=12, d_state=4, d_conv=3)
    fast = randomize(Mamba(cfg.replace(scan=scan)).double())
    ref = Mamba(cfg.replace(scan="sequential")).double()
    assert_same_model(fast, ref, torch.randint(0, 32, (2, 19)), tol=1e-10)


def test_auto_runs_the_compiled_loop_or_else_the_loop_on_a_cpu():
    """On a CPU the compiled loop for fp32 where built; else (fp64, or not built) the loop as one autograd node when
    gradients are recorded, the plain loop when not; elsewhere the prefix scan."""
    mixer = Mamba(MambaConfig(vocab_size=8, n_embd=8)).blocks[0].mixer
    if native.available():
        assert mixer.scan_for(torch.device("cpu")) is selective_scan_native
    with native.disabled():
        assert mixer.scan_for(torch.device("cpu")) is selective_scan_recurrent
        with torch.no_grad():
            assert mixer.scan_for(torch.device("cpu")) is selective_scan_sequential
    assert mixer.scan_for(torch.device("cpu"), torch.float64) is selective_scan_recurrent
    assert mixer.scan_for(torch.device("cuda")) is selective_scan_parallel


@built
@pytest.mark.parametrize("carried", [False, True], ids=["from-zero", "carried"])
@pytest.mark.parametrize(("T", "N"), [(1, 4), (7, 13), (33, 24)])
def test_the_compiled_scan_is_the_loop_in_values_and_gradients(T, N, carried):
    """fp32 against the fp64 loop: the compiled loop rounds each step in fp32 (about 1e-7 relative) and its exp is a
    polynomial within a few ulp, over at most 33 steps, so 1e-5 relative holds with room; a wrong term (a missed
    decay, a gradient through the wrong factor) is off by 1e-2 or more. N = 13 is not a multiple of the loop's 8."""
    args = scan_inputs(3, T, 5, N, torch.float64)
    h0 = torch.randn(3, 5, N, dtype=torch.float64, generator=torch.Generator().manual_seed(1)).requires_grad_()
    single = [a.detach().float().requires_grad_() for a in (*args, h0)]

    def loss(y: torch.Tensor, h: torch.Tensor) -> torch.Tensor:
        return (y * torch.cos(torch.arange(y.numel(), dtype=y.dtype)).view_as(y)).sum() + (h * h.detach().sin()).sum()

    got, want = (
        scan(*a[:6], a[6] if carried else None, final=True)
        for scan, a in ((selective_scan_native, single), (selective_scan_sequential, [*args, h0]))
    )
    leaves_got, leaves_want = (single, [*args, h0]) if carried else (single[:6], args)
    grads_got = torch.autograd.grad(loss(*got), leaves_got)
    grads_want = torch.autograd.grad(loss(*want), leaves_want)
    for a, b in zip(got, want):
        assert rel_err(a.double(), b) <= 1e-5
    for ga, gb in zip(grads_got, grads_want):
        assert rel_err(ga.double(), gb) <= 1e-5


@built
def test_the_compiled_scan_exp_holds_over_fp32s_range():
    """Steps so large that exp(delta A) underflows (delta up to 200 against A up to -N): the polynomial's clamp at
    -87 keeps it finite and the decays ~0, as the loop's exp gives (1e-5 as above)."""
    args = [a.detach().float() for a in scan_inputs(2, 16, 4, 8, torch.float64, delta_scale=200.0)]
    got, want = selective_scan_native(*args), selective_scan_sequential(*args)
    assert torch.isfinite(got).all() and rel_err(got, want) <= 1e-5


@built
def test_the_compiled_scan_refuses_what_it_cannot_take():
    args = scan_inputs(1, 3, 2, 4, torch.float64)
    with pytest.raises(ValueError, match="fp32 CPU tensors"):
        selective_scan_native(*args)


@built
def test_the_model_trains_the_same_with_the_compiled_scan():
    """The whole fp32 model, the compiled scan against the recurrent one on the same weights: logits and every
    parameter's gradient within 1e-4 relative (fp32 through two layers, LayerNorms and the MLP: about 1e-6 from the
    scans' roundings, amplified by the network's depth; a wrong gradient term is off by >= 1e-2)."""
    torch.manual_seed(0)
    cfg = MambaConfig(vocab_size=32, n_layer=2, n_embd=12, d_state=12, d_conv=3, embed_dropout=0.0)
    fast = randomize(Mamba(cfg.replace(scan="native")))
    ref = Mamba(cfg.replace(scan="recurrent"))
    assert_same_model(fast, ref, torch.randint(0, 32, (2, 19)), tol=1e-4)


def test_param_formula_and_state_size():
    d, V, e, N, k, r = 24, 97, 48, 8, 4, 2  # r = ceil(24 / 16)
    cfg = MambaConfig(vocab_size=V, n_layer=3, n_embd=d, d_state=N, d_conv=k)
    layer = d + 2 * e * d + e * k + e + e * (r + 2 * N) + r * e + e + e * N + e + e * d
    assert cfg.num_params() == Mamba(cfg).num_params() == V * d + d + 3 * layer
    for kw in [dict(dt_rank=5), dict(expand=3, d_state=2, d_conv=1)]:
        assert Mamba(cfg.replace(**kw)).num_params() == cfg.replace(**kw).num_params(), kw
    assert Mamba(cfg).state_size() == e * N == 384  # 2 d N: Zoology's Mamba.state_size
    assert Mamba(cfg.replace(expand=1, d_state=16)).state_size() == d * 16


def test_for_budget_lands_next_to_the_budget():
    cfg = MambaConfig.for_budget(150_000, vocab_size=128, seq_len=64, n_layer=2, n_head=4, causal=True, d_state=8)
    step = cfg.replace(n_embd=cfg.n_embd + 2).num_params() - cfg.num_params()
    assert abs(cfg.num_params() - 150_000) <= step and cfg.d_state == 8
    with pytest.raises(ValueError, match="causal"):
        MambaConfig.for_budget(10_000, vocab_size=16, seq_len=16, n_layer=2, n_head=4, causal=False)


def test_it_trains_through_the_public_trainer(tmp_path):
    losses = trainer_losses(tmp_path / "run", 40, "model.name=mamba", "model.n_layer=1", "model.n_embd=32")
    assert len(losses) == 40 and learned(losses), losses[::8]


def test_mambas_own_init_survives_the_skeletons():
    """Mamba's init (docs/baselines.md): MixerLM's N(0, 0.02) does not touch the linear maps, and the mixer's own
    (Delta, A, D) runs last. Tolerances: each sample statistic below is within about 6 standard errors."""
    torch.manual_seed(0)
    cfg = MambaConfig(vocab_size=64, n_layer=2, n_embd=32, d_state=8)
    e, r, N, d, L = cfg.inner, cfg.rank, cfg.d_state, cfg.n_embd, cfg.n_layer
    model = Mamba(cfg)
    assert model.embed.weight.std().item() == pytest.approx(0.02, rel=0.1)  # 2,048 draws
    for block in model.blocks:
        mixer = block.mixer
        assert torch.equal(mixer.A_log, torch.log(torch.arange(1, N + 1, dtype=torch.float32)).repeat(e, 1))
        assert torch.equal(mixer.D, torch.ones(e))
        log_dt = torch.log(torch.nn.functional.softplus(mixer.dt_proj.bias))  # log-uniform in [dt_min, dt_max]
        lo, hi = math.log(cfg.dt_min), math.log(cfg.dt_max)
        assert lo - 1e-3 <= log_dt.min().item() and log_dt.max().item() <= hi + 1e-3  # fp32 softplus round trip
        assert log_dt.mean().item() == pytest.approx((lo + hi) / 2, abs=(hi - lo) / 4)  # 64 draws: sd (hi-lo)/28
        bound = r**-0.5  # W_dt uniform in +-r^-1/2, far wider than N(0, 0.02)
        assert mixer.dt_proj.weight.abs().max().item() <= bound
        assert mixer.dt_proj.weight.std().item() == pytest.approx(bound / math.sqrt(3), rel=0.25)  # 128 draws
        for w, fan_in, scale in [(mixer.in_proj.weight, d, 1.0), (mixer.out_proj.weight, e, 1 / math.sqrt(L))]:
            bound = scale / math.sqrt(fan_in)  # PyTorch's Linear init, uniform in +-fan_in^-1/2
            assert w.abs().max().item() <= bound * (1 + 1e-6)
            assert w.std().item() == pytest.approx(bound / math.sqrt(3), rel=0.1)  # >= 2,048 draws


@built
def test_the_compiled_scan_gives_the_same_on_two_threads():
    """Rows are split over threads and each row is one thread's (dA summed over sequences afterwards), so the
    threads change no order of summation; 1e-6 relative (not bit-equality) all the same."""
    args = [a.detach().float().requires_grad_() for a in scan_inputs(4, 9, 6, 11, torch.float64)]
    before = torch.get_num_threads()
    outs = []
    try:
        for threads in (1, 2):
            torch.set_num_threads(threads)
            y = selective_scan_native(*args)
            outs.append((y.detach(), torch.autograd.grad((y * y).sum(), args)))
    finally:
        torch.set_num_threads(before)
    (y1, g1), (y2, g2) = outs
    assert rel_err(y2, y1) <= 1e-6
    for a, b in zip(g2, g1):
        assert rel_err(a, b) <= 1e-6
