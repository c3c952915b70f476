"""A trained BDH run autoregressively as a dynamical system (docs/dmft.md).

Control: the temperature T = 1/beta (Eq. 6); order parameter: the readout r_a(t) = sum_v p_t(v) e_v . w_a (Eq. 11).
lambda_1 from a perturbed copy of rho on the same random numbers (Benettin), beside token flips and a "free pair" never
pulled back."""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import torch

from bdh.typed_config import TypedConfig, bounded, one_of

from .diagnostics import autocorrelation, power_spectrum


@dataclass
class ProbeConfig(TypedConfig):
    """What `run_probe` runs (the options of ``bdh dmft probe``)."""

    # the sampling temperatures (the control parameter); 0 is greedy.
    temperatures: tuple[float, ...] = bounded((0.5, 0.8, 1.0, 1.3, 1.6), ge=0)
    n_transient: int = bounded(200, ge=0, le=1_000_000)  # tokens generated and discarded before recording.
    n_steps: int = bounded(1000, ge=8, le=1_000_000)  # tokens recorded per temperature.
    n_features: int = bounded(3, ge=1)  # M, the readout dimension (top principal directions of the embedding table).
    delta: float = bounded(1e-4, gt=0, lt=1)  # relative size of the state perturbation of the Lyapunov estimate.
    prompt: str = "\n"
    seed: int = 0
    max_lag: int = 100
    dtype: str = one_of("float64", ("float32", "float64"))
    threads: int = 1  # torch intra-op threads (1 suits small models on a shared machine).

    def __post_init__(self) -> None:
        super().__post_init__()  # the declared ranges
        if not self.temperatures:
            self._fail("temperatures", "give at least one temperature")
        if not self.prompt:
            self._fail("prompt", "empty; give at least one character")


def feature_directions(model, n_features: int) -> torch.Tensor:
    """Top principal directions (D, M) of the token embedding table (centred)."""
    E = model.embed.weight.detach().to(torch.float64)
    E = E - E.mean(0, keepdim=True)
    _, _, Vh = torch.linalg.svd(E, full_matrices=False)
    return Vh[: min(n_features, Vh.shape[0])].T.contiguous()


def _sample(logits: torch.Tensor, temp: torch.Tensor, u: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """softmax(logits / T) and the inverse-CDF token for uniforms u (greedy at T = 0)."""
    greedy = temp <= 0
    t = torch.where(greedy, torch.ones_like(temp), temp)
    p = torch.softmax(logits / t[:, None], dim=-1)
    cdf = torch.cumsum(p, dim=-1)
    tok = torch.searchsorted(cdf, (u * cdf[:, -1])[:, None]).squeeze(1).clamp_max(logits.shape[-1] - 1)
    arg = logits.argmax(-1)
    p = torch.where(greedy[:, None], torch.nn.functional.one_hot(arg, logits.shape[-1]).to(p.dtype), p)
    return p, torch.where(greedy, arg, tok)


def run_probe(model, cfg: ProbeConfig) -> tuple[dict, dict]:
    """Run the probe; returns (report as JSON-able dict, series of arrays)."""
    old = torch.get_num_threads()
    torch.set_num_threads(max(1, int(cfg.threads)))
    try:
        return _run_probe(model, cfg)
    finally:
        torch.set_num_threads(old)


@dataclass
class _Trace:
    """What the probe records per temperature (rows) and recorded token (columns)."""

    readout: np.ndarray  # (nT, steps, M): r_a(t)
    log_growth: np.ndarray  # log(separation / d0) of the renormalised copy, before it is pulled back
    differ: np.ndarray  # the renormalised copy sampled another token than the reference
    free_growth: np.ndarray  # log(separation / d0) of the free copy
    free_differ: np.ndarray  # the free copy sampled another token than the reference
    tokens: np.ndarray  # the reference's tokens
    entropy: np.ndarray  # the entropy of the reference's next-token distribution (nats)

    @classmethod
    def empty(cls, temperatures: int, steps: int, features: int) -> _Trace:
        """Zeros for every recorded token; refused in one line (naming ``--steps``) when they do not fit in memory."""
        from bdh.errors import UserError
        from bdh.train.runtime.memory import available_bytes

        need, free = temperatures * steps * (8 * features + 8 * 4 + 2), available_bytes(torch.device("cpu"))
        if free is not None and need > free:
            raise UserError(
                f"--steps {steps:,}: recording that many tokens at {temperatures} temperature(s) takes "
                f"{need / 2**30:,.1f} GiB of memory, more than the {free / 2**30:,.1f} GiB available; give fewer "
                "--steps"
            )
        shape = (temperatures, steps)
        return cls(
            np.zeros((*shape, features)),
            np.zeros(shape),
            np.zeros(shape, dtype=bool),
            np.zeros(shape),
            np.zeros(shape, dtype=bool),
            np.zeros(shape, dtype=np.int64),
            np.zeros(shape),
        )


@torch.no_grad()
def _run_probe(model, cfg: ProbeConfig) -> tuple[dict, dict]:
    dtype = torch.float64 if cfg.dtype == "float64" else torch.float32
    model = model.to(dtype).eval()
    V = model.config.vocab_size
    temps = torch.tensor(cfg.temperatures, dtype=dtype)
    nT = temps.shape[0]
    # rows: [0, nT) reference, [nT, 2nT) perturbed copies renormalised every token (Benettin),
    # [2nT, 3nT) perturbed once and left free (finite-perturbation divergence)
    T2 = torch.cat([temps, temps, temps])
    gen = torch.Generator().manual_seed(cfg.seed)
    prompt = [b % V for b in cfg.prompt.encode("utf-8", "surrogateescape")] or [0]
    state = model.init_state(3 * nT)
    state.rho = state.rho.to(dtype)
    idx = torch.tensor(prompt, dtype=torch.long).repeat(3 * nT, 1)
    logits, state = model.step(idx, state)
    logits = logits[:, -1]
    W = feature_directions(model, cfg.n_features).to(dtype)
    emb = model.embed.weight.detach().to(dtype)
    read_dirs = emb @ W  # (V, M): e_v . w_a
    trace = _Trace.empty(nT, cfg.n_steps, W.shape[1])
    d0 = torch.ones(nT, dtype=dtype)
    for s in range(cfg.n_transient + cfg.n_steps):
        if s == cfg.n_transient:
            d0 = _perturb(state, nT, cfg.delta, gen, dtype)
        u = torch.rand(nT, generator=gen, dtype=dtype).repeat(3)  # common random numbers
        p, tok = _sample(logits, T2, u)
        j = s - cfg.n_transient
        if j >= 0:
            _record_sample(trace, j, p[:nT], tok, read_dirs)
        # each copy follows its own sampled token (the same uniforms as its reference)
        logits, state = model.step(tok, state)
        if j >= 0:
            _record_separation(trace, j, state, d0)
    acf = autocorrelation(trace.readout[:, :, 0], cfg.max_lag)
    freq, spec = power_spectrum(trace.readout[:, :, 0])
    per = _per_temperature(cfg, trace, acf, freq, spec)
    return _report(model, cfg, per), _series(cfg, trace, acf, freq, spec)


def _perturb(state, nT: int, delta: float, gen: torch.Generator, dtype: torch.dtype) -> torch.Tensor:
    """Displace both copies: rho' = rho + delta |rho| xi / |xi| per temperature; returns the distances d0."""
    ref = state.rho[:, :nT]
    xi = torch.randn(ref.shape, generator=gen, dtype=dtype)
    nr = ref.transpose(0, 1).reshape(nT, -1).norm(dim=1)
    nxi = xi.transpose(0, 1).reshape(nT, -1).norm(dim=1)
    d0 = delta * nr.clamp_min(1e-12)
    state.rho[:, nT : 2 * nT] = ref + xi * (d0 / nxi).view(1, nT, 1, 1, 1)
    state.rho[:, 2 * nT :] = state.rho[:, nT : 2 * nT]
    return d0


def _record_sample(trace: _Trace, j: int, pr: torch.Tensor, tok: torch.Tensor, read_dirs: torch.Tensor) -> None:
    """Record token ``j``: the reference's readout, entropy and token, and whether each copy sampled another."""
    nT = pr.shape[0]
    trace.readout[:, j] = (pr @ read_dirs).cpu().numpy()
    trace.entropy[:, j] = (-(pr.clamp_min(1e-30).log() * pr).sum(-1)).cpu().numpy()
    trace.tokens[:, j] = tok[:nT].cpu().numpy()
    trace.differ[:, j] = (tok[:nT] != tok[nT : 2 * nT]).cpu().numpy()
    trace.free_differ[:, j] = (tok[:nT] != tok[2 * nT :]).cpu().numpy()


def _record_separation(trace: _Trace, j: int, state, d0: torch.Tensor) -> None:
    """Record both copies' log separation growth after token ``j``; pull the renormalised copy back to ``d0``."""
    nT = d0.shape[0]
    ref = state.rho[:, :nT]
    diff = (state.rho[:, nT : 2 * nT] - ref).transpose(0, 1).reshape(nT, -1)
    dist = diff.norm(dim=1).clamp_min(1e-300)
    trace.log_growth[:, j] = torch.log(dist / d0).cpu().numpy()
    state.rho[:, nT : 2 * nT] = ref + (state.rho[:, nT : 2 * nT] - ref) * (d0 / dist).view(1, nT, 1, 1, 1)
    free = (state.rho[:, 2 * nT :] - ref).transpose(0, 1).reshape(nT, -1).norm(dim=1).clamp_min(1e-300)
    trace.free_growth[:, j] = torch.log(free / d0).cpu().numpy()


def _per_temperature(cfg: ProbeConfig, trace: _Trace, acf: np.ndarray, freq: np.ndarray, spec: np.ndarray) -> list:
    """Each temperature's entry: exponents, token divergence, free pair, ACF decay, spectral peak, text spread."""
    lam = trace.log_growth.mean(1)
    per = []
    for i, T in enumerate(cfg.temperatures):
        below = np.nonzero(acf[i] < math.exp(-1))[0]
        k = int(np.argmax(spec[i][1:]) + 1) if spec.shape[1] > 1 else 0
        same = ~trace.differ[i]
        free_differ = trace.free_differ[i]
        per.append(
            {
                "temperature": float(T),
                "beta": (1.0 / T) if T > 0 else None,
                "lyapunov": float(lam[i]),
                "lyapunov_same_tokens": float(trace.log_growth[i][same].mean()) if same.any() else None,
                "token_divergence_rate": float(trace.differ[i].mean()),
                "free_pair": {
                    "first_token_divergence": int(np.argmax(free_differ)) if free_differ.any() else None,
                    "token_disagreement": float(free_differ.mean()),
                    "final_log_separation": float(trace.free_growth[i, -1]),
                },
                "acf_decay_lag": int(below[0]) if below.size else None,
                "spectrum_peak_frequency": float(freq[k]),
                "distinct_tokens": int(np.unique(trace.tokens[i]).size),
                "readout_std": [float(v) for v in trace.readout[i].std(0)],
                "mean_entropy_nats": float(trace.entropy[i].mean()),
            }
        )
    return per


def _report(model, cfg: ProbeConfig, per: list) -> dict:
    """The JSON report of the probe: ``per`` temperature (`_per_temperature`), the config, the method, the model."""
    return {
        "temperatures": [float(t) for t in cfg.temperatures],
        "per_temperature": per,
        "config": {k: (list(v) if isinstance(v, tuple) else v) for k, v in vars(cfg).items()},
        "readout": "expected next-token embedding projected on the top principal directions of the embedding table",
        "lyapunov_method": (
            "two nearby recurrent states, common random numbers, renormalised every token (per token, natural log)"
        ),
        "model": {
            "n_layer": model.config.n_layer,
            "n_embd": model.config.n_embd,
            "n_head": model.config.n_head,
            "n_neurons": model.config.n,
            "vocab_size": model.config.vocab_size,
        },
    }


def _series(cfg: ProbeConfig, trace: _Trace, acf: np.ndarray, freq: np.ndarray, spec: np.ndarray) -> dict:
    """The arrays of the probe (what its figures draw)."""
    return {
        "readout": trace.readout,
        "log_growth": trace.log_growth,
        "acf": acf,
        "freq": freq,
        "spectrum": spec,
        "tokens": trace.tokens,
        "differ": trace.differ,
        "free_log_separation": trace.free_growth,
        "free_differ": trace.free_differ,
        "temperatures": np.array(cfg.temperatures),
    }
