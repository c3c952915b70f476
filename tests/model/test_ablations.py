"""The four ablations of `BDHConfig` (separate keys, no gate, no neuron expansion, unshared layers): every attention
form against the slow reference loops (values and gradients), the compiled loops, the sparse step, causality, sizes,
save and load, one-line errors, and a short training through the public trainer."""

from __future__ import annotations

import json

import pytest
import torch

import bdh
from bdh import BDH, BDHConfig
from bdh.errors import UserError
from bdh.model.config import ABLATIONS
from bdh.model.kernels.cpu import native
from bdh.model.sizes import match_budget

from .helpers import rel_err, tiny_config

#: each ablation alone, and all four together
CASES = {name: {name: True} for name in ABLATIONS} | {"all": dict.fromkeys(ABLATIONS, True)}
FORMS = ("parallel", "chunked", "recurrent")


def ablated(case: str, seed: int = 0, **overrides) -> BDH:
    """A tiny model with the ablations of ``CASES[case]`` (no_expansion leaves the neuron count out)."""
    fields = dict(CASES[case], **overrides)
    if fields.get("no_expansion"):
        fields["n_neurons"] = None
    torch.manual_seed(seed)
    return BDH(tiny_config(**fields)).eval()


def grads_of(model: BDH, logits_fn) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    """Logits and the gradient of every parameter of a fixed weighted sum of them."""
    model.zero_grad()
    logits = logits_fn()
    weights = torch.linspace(-1, 1, logits.numel(), dtype=logits.dtype).view_as(logits)
    (logits * weights).sum().backward()
    return logits.detach(), {n: p.grad.clone() for n, p in model.named_parameters()}


@pytest.mark.parametrize("damping", [None, "alibi"])
@pytest.mark.parametrize("case", CASES)
def test_every_form_equals_the_reference_forward_in_values_and_gradients(case, damping):
    """fp32: the model's three forms against `BDH.slow_forward` (Eq. 8 in plain PyTorch, the ablations written out).
    The same sums in other orders (blocks, chunks, token by token), a few fp32 ulps carried through two layers,
    stay well under 1e-5 of the scale; a wrong branch (a missing gate, the wrong keys or layer) is O(1)."""
    model = ablated(case, positional="rope", damping=damping, chunk_size=3)
    idx = torch.randint(0, 256, (2, 10), generator=torch.Generator().manual_seed(1))
    ref, ref_grads = grads_of(model, lambda: model.slow_forward(idx))
    for form in FORMS:
        logits, grads = grads_of(model, lambda form=form: model(idx, mode=form))
        assert rel_err(logits, ref) <= 1e-5, form
        for name, g in ref_grads.items():
            assert rel_err(grads[name], g) <= 1e-5, (form, name)


@pytest.mark.parametrize("case", CASES)
def test_the_reference_sees_each_ablation(case):
    """The reference is not blind to the option: turning it off changes the logits (the test above can fail)."""
    model = ablated(case, positional="none")
    idx = torch.randint(0, 256, (1, 8), generator=torch.Generator().manual_seed(2))
    with torch.no_grad():
        ours = model.slow_forward(idx)
        for name in CASES[case]:
            if name in ("separate_keys", "ungated"):  # same weights, the other equation
                setattr(model.config, name, False)
                model.Dk = None if name == "separate_keys" else model.Dk
                assert rel_err(model.slow_forward(idx), ours) > 1e-3, name


@pytest.mark.parametrize("case", CASES)
def test_steps_by_pieces_continue_the_sequence(case):
    """A prefill chunk, single tokens and a chunked step, the state carried, give the logits of the whole sequence
    (fp32: the same sums in other orders, a few ulps carried through two layers)."""
    model = ablated(case, damping=0.9)
    idx = torch.randint(0, 256, (2, 15), generator=torch.Generator().manual_seed(3))
    full = model(idx)
    logits, state = model.step(idx[:, :6], model.init_state(2))
    pieces = [logits]
    for t in range(6, 9):
        logits, state = model.step(idx[:, t], state)
        pieces.append(logits.unsqueeze(1))
    logits, state = model.step(idx[:, 9:], state, mode="chunked")
    pieces.append(logits)
    assert state.pos == 15 and rel_err(torch.cat(pieces, dim=1), full) <= 1e-5


@pytest.mark.parametrize("case", CASES)
def test_a_future_token_does_not_change_past_logits(case):
    model = ablated(case)
    idx = torch.randint(0, 256, (2, 12), generator=torch.Generator().manual_seed(4))
    changed = idx.clone()
    changed[:, 7] = (changed[:, 7] + 1) % 256
    for form in FORMS:
        a, b = model(idx, mode=form), model(changed, mode=form)
        # the past is computed from the same numbers; 1e-6 allows for a kernel that sums in blocks
        assert rel_err(b[:, :7], a[:, :7]) <= 1e-6, form
        assert rel_err(b[:, 7:], a[:, 7:]) > 1e-4, form  # and the token does matter from position 7 on


@pytest.mark.skipif(not native.available(), reason="the compiled loops are not built here (setup.py)")
@pytest.mark.parametrize("case", CASES)
def test_the_compiled_loops_give_the_pytorch_path_values(case):
    """Training pass (logits and gradients) and in-place generation steps with and without the compiled loops (fp32:
    the same products summed in another order, a few ulps through two layers, as tests/model/test_native.py)."""
    model = ablated(case, damping=0.9)
    idx = torch.randint(0, 256, (2, 11), generator=torch.Generator().manual_seed(5))
    fast, fg = grads_of(model, lambda: model(idx))
    with native.disabled():
        ref, rg = grads_of(model, lambda: model(idx))
    assert rel_err(fast, ref) <= 1e-5 and all(rel_err(fg[n], rg[n]) <= 1e-4 for n in fg)
    with torch.no_grad():
        fast_state, ref_state = model.init_state(2), model.init_state(2)
        for t in range(6):
            fast, fast_state = model.step(idx[:, t], fast_state, inplace=True)
            with native.disabled():
                ref, ref_state = model.step(idx[:, t], ref_state, inplace=True)
            assert rel_err(fast, ref) <= 1e-5, t


@pytest.mark.parametrize("case", CASES)
def test_the_static_decoder_steps_as_the_eager_step(case):
    """`StateDecoder` (the step a CUDA graph captures) against `BDH.step`: the same kernels on the same numbers."""
    from bdh.model.decoder import StateDecoder

    model = ablated(case)
    prompt = torch.randint(0, 256, (3, 6), generator=torch.Generator().manual_seed(8))
    dec = StateDecoder(model, 3, temperature=0)
    token = dec.prefill(prompt).clone()
    with torch.no_grad():
        logits, state = model.step(prompt, model.init_state(3))
        for _ in range(4):
            logits, state = model.step(token, state)
            token = dec.step().clone()
            assert rel_err(dec.logits, logits) < 1e-5 and rel_err(dec.state.rho, state.rho) < 1e-5  # summation order


@pytest.mark.parametrize("density", [0.0, 1.0])  # 0: the dense read and write; 1: row by row
@pytest.mark.parametrize("case", CASES)
def test_the_sparse_step_equals_the_dense_step(case, density, monkeypatch):
    from bdh.model.kernels.pytorch import sparse as sparse_kernels

    monkeypatch.setattr(sparse_kernels, "DENSITY", density)
    model = ablated(case, n_neurons=None if "no_expansion" in CASES[case] else 128)
    with torch.no_grad():  # sparse activations: most pre-activations negative
        for w in (model.Dx, model.Dk):
            if w is not None:
                w.sub_(w.abs().mean() * 0.8)
    idx = torch.randint(0, 256, (1, 9), generator=torch.Generator().manual_seed(6))
    _, dense = model.step(idx[:, :5], model.init_state(1))
    sparse = dense.clone()
    for t in range(5, 9):
        ref, dense = model.step(idx[:, t], dense)
        with torch.no_grad():
            got, sparse = model.step(idx[:, t], sparse, mode="sparse", inplace=True)
        # fp32, rank-one updates summed in another order (tests/model/test_generate.py argues 1e-6 of the scale)
        assert torch.allclose(got, ref, rtol=1e-5, atol=1e-6)
        assert torch.allclose(sparse.rho, dense.rho, rtol=1e-5, atol=1e-6 * dense.rho.abs().max().item())


@pytest.mark.parametrize("case", CASES)
def test_parameter_count_and_state_size_follow_their_formulas(case):
    model = ablated(case)
    cfg = model.config
    n, D, V, L = cfg.n, cfg.n_embd, cfg.vocab_size, cfg.n_layer
    if cfg.no_expansion:
        assert n == cfg.n_head * D and cfg.N == D
    encoders = (4 if cfg.separate_keys else 3) * n * D * (L if cfg.unshared_layers else 1)
    assert cfg.num_params() == model.num_params() == encoders + 2 * V * D
    assert model.state_size() == n * D  # per layer: h heads of N x D, whatever the weights
    assert tuple(model.init_state(3).rho.shape) == (L, 3, cfg.n_head, cfg.N, D)
    lead = (L,) if cfg.unshared_layers else ()
    assert model.Dx.shape == (*lead, cfg.n_head, D, cfg.N) and model.E.shape == (*lead, n, D)
    assert (model.Dk is not None) == cfg.separate_keys


def test_the_official_model_is_unchanged():
    """Default off: the same parameters as before; a key encoder is drawn after the official weights, so a seed gives
    the official model's weights either way."""
    plain = BDH(tiny_config())
    assert set(plain.state_dict()) == {"E", "Dx", "Dy", "embed.weight", "readout", "freqs"}
    assert BDHConfig().ablations() == () and not any(getattr(BDHConfig(), a) for a in ABLATIONS)
    torch.manual_seed(0)
    a = BDH(tiny_config())
    torch.manual_seed(0)
    b = BDH(tiny_config(separate_keys=True, ungated=True))
    for name, t in a.state_dict().items():
        assert torch.equal(t, b.state_dict()[name]), name


@pytest.mark.parametrize("case", CASES)
def test_save_and_load_round_trip(case, tmp_path):
    model = ablated(case)
    folder = model.save_pretrained(tmp_path / "m")
    assert all(json.loads((folder / "config.json").read_text())[name] for name in CASES[case])
    back = bdh.load_pretrained(folder)
    idx = torch.randint(0, 256, (2, 7))
    assert back.config == model.config
    with torch.no_grad():
        assert torch.equal(back(idx), model(idx))  # the same weights through the same code


@pytest.mark.parametrize(
    "fields, match",
    [
        (dict(no_expansion=True, n_neurons=64), "BDHConfig.no_expansion: fixes n"),
        (dict(no_expansion=True, n_neurons=None, mlp_internal_dim_multiplier=4), "mlp_internal_dim_multiplier must"),
        (dict(separate_keys="yes"), "BDHConfig.separate_keys: must be true or false"),
        (dict(unshared_layers=1), "BDHConfig.unshared_layers: must be true or false"),
        (dict(no_expansion=True, n_neurons=None, n_embd=15), "neurons per head must be even"),
    ],
)
def test_bad_configs_are_refused_in_one_line(fields, match):
    with pytest.raises(UserError, match=match) as err:
        tiny_config(**fields)
    assert "\n" not in str(err.value)


def test_tools_that_read_the_papers_weights_refuse_what_they_cannot_read():
    from bdh.analysis.neurograph import head_block
    from bdh.model import graph, interop, merge

    unshared, keys = ablated("unshared_layers"), ablated("separate_keys")
    cases = [
        (lambda: unshared(torch.zeros(1, 3, dtype=torch.long), n_layer=3), "runs its 2 layers, not 3"),
        (lambda: interop.to_official(keys), "to_official: needs the paper's architecture.*separate_keys"),
        (lambda: merge.concatenate(keys, keys), "concatenating neurons: needs the paper's architecture"),
        (lambda: merge.average(keys, ablated("ungated")), "the models differ in separate_keys"),
        (lambda: graph.from_gpu(unshared), "the graph form: needs the paper's architecture"),
        (lambda: head_block(unshared, "x", 0), "the neuron graph: needs the paper's architecture"),
    ]
    for call, match in cases:
        with pytest.raises(UserError, match=match) as err:
            call()
        assert "\n" not in str(err.value)
    assert set(interop.to_official(ablated("no_expansion"))) >= {"encoder", "decoder"}  # n = h D: multiplier h
    assert merge.average(keys, keys).config == keys.config  # same ablations: averaged


def test_an_unshared_model_matched_to_the_shared_count_is_the_closest_width():
    shared = BDHConfig(n_layer=4, n_embd=32, n_head=2, n_neurons=256)
    target = shared.num_params()
    matched = match_budget(shared.replace(unshared_layers=True), target)
    assert matched.unshared_layers and matched.n // matched.n_embd == shared.n // shared.n_embd  # expansion kept
    assert matched.n_embd < shared.n_embd
    step = 1  # n = 8 D, h = 2, RoPE: every width keeps N = 4 D an even number
    for d in (matched.n_embd - step, matched.n_embd + step):  # no neighbouring width is closer
        assert abs(matched.replace(n_embd=d).num_params() - target) >= abs(matched.num_params() - target)
    no_exp = match_budget(BDHConfig(n_layer=2, n_embd=16, n_head=2, no_expansion=True), target)
    assert no_exp.n == 2 * no_exp.n_embd and no_exp.n_embd % 2 == 0  # RoPE pairs: N = D even
    with pytest.raises(UserError, match="match_budget: the budget must be a positive"):
        match_budget(shared, 0)


def test_the_autocast_copy_of_E_is_one_per_layer_when_layers_have_their_own():
    """Without autograd under autocast, E's low-precision copy is kept for the pass: one per weight set. Logits as
    with autograd (which casts per layer), up to bf16 rounding: both round the same products, so 2^-7 of the scale
    (two roundings) bounds it, while using layer 0's E everywhere is an O(1) change."""
    model = ablated("unshared_layers")
    idx = torch.randint(0, 256, (2, 9), generator=torch.Generator().manual_seed(7))
    with torch.autocast("cpu", dtype=torch.bfloat16):
        with_grad = model(idx).float().detach()
        with torch.no_grad():
            without = model(idx).float()
    assert rel_err(without, with_grad) <= 2**-7


@pytest.mark.parametrize("case", CASES)
def test_each_ablation_trains_through_the_public_trainer(case, tmp_path):
    from bdh.train import load_config, train

    fields = [f"model.{name}=true" for name in CASES[case]]
    size = [] if "no_expansion" in CASES[case] else ["model.n_neurons=128"]
    overrides = [
        "task.name=repeat", "task.seq_len=48", "model.n_layer=2", "model.n_embd=16", "model.n_head=2",
        "model.dropout=0.0", "train.max_steps=40", "train.batch_size=8", "train.threads=1", "optim.lr=3e-3",
        "optim.warmup_steps=5", "train.max_minutes=null", "eval.every=0", "eval.batches=1", "log.progress=none",
        "log.tensorboard=false", "sample.max_new_tokens=0", f"run_dir={tmp_path / 'run'}", *size, *fields,
    ]  # fmt: skip
    result = train(load_config(None, overrides))
    assert all(getattr(result.model.config, name) for name in CASES[case])
    records = [json.loads(line) for line in (result.run_dir / "metrics.jsonl").read_text().splitlines()]
    losses = [r["loss"] for r in records if r["kind"] == "train"]
    assert len(losses) >= 20 and sum(losses[-5:]) / 5 < sum(losses[:5]) / 5 - 0.3


def test_the_ungated_activation_drops_entries_at_rate_p_with_host_masks():
    """`Kernels.activate` (ReLU without the gate) zeroes a fraction p of the entries in a CPU training pass, and no
    gradient flows through them. 2^16 entries: the dropped fraction's standard deviation is 0.002, so 0.02 is ten."""
    from bdh.model.kernels import Pass, bind, choose
    from bdh.model.kernels.pytorch.rope import rope_tables

    model = ablated("ungated")
    choice = choose(
        Pass("parallel", 0, 8), positional="rope", log_u=None, causal=True, chunk_size=4,
        dropout=0.5, dropout_rng="auto", training=True, autograd=True, device=torch.device("cpu"),
    )  # fmt: skip
    k = bind(choice, rope_tables("rope", model.freqs, 0, 8))
    assert k.choice.masks == "in-gate"
    z = torch.ones(4, 2, 64, 128, requires_grad=True)
    y = k.activate(z)
    assert abs(float((y == 0).float().mean()) - 0.5) < 0.02 and set(y.unique().tolist()) == {0.0, 1.0}
    y.sum().backward()
    assert torch.equal(z.grad, (y != 0).float())
