"""Obviously-correct references, slow on purpose: the fast paths are tested against these.

* `naive_linear_attention`: paper Eq. 4 term by term, with loops over t and tau.
* `naive_state_rule`: the state rules (a retention per token, the delta rule) one token at a time.
* `naive_official_forward`: the official ``pathwaycom/bdh`` forward in its own names and shapes, which proves that
`BDH.slow_forward` (and so every fast path) computes the official logits."""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F

#: keys are normalised as k / max(|k|, KEY_EPS): a token with no active neuron writes nothing
KEY_EPS = 1e-6


def _values(v: torch.Tensor, b: int, h: int) -> torch.Tensor:
    """The values head h of sequence b reads: v is (B, 1 or H, T, D), one value stream shared by heads or one each."""
    return v[b, 0 if v.shape[1] == 1 else h]


def naive_linear_attention(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    retention: torch.Tensor | None = None,
    state: torch.Tensor | None = None,
    causal: bool = True,
) -> torch.Tensor:
    """a_t = u^t q_t^T S0 + sum_{tau<t} u^(t-tau) (q_t . k_tau) v_tau, one term at a time (causal=False: over all
    tau, u^|t-tau|).

    q, k: (B, H, T, N); v: (B, 1 or H, T, D); retention: (H,) u or None; state: (B, H, N, D) or None."""
    B, H, T, _ = q.shape
    D = v.shape[-1]
    out = q.new_zeros(B, H, T, D)
    for b in range(B):
        for h in range(H):
            u = 1.0 if retention is None else float(retention[h])
            vh = _values(v, b, h)
            for t in range(T):
                acc = q.new_zeros(D)
                if state is not None:
                    acc = acc + (u**t) * (q[b, h, t] @ state[b, h])
                taus = range(t) if causal else range(T)
                for tau in taus:
                    acc = acc + (u ** abs(t - tau)) * torch.dot(q[b, h, t], k[b, h, tau]) * vh[tau]
                out[b, h, t] = acc
    return out


def naive_write_key(
    k: torch.Tensor, centred: bool = False, topk: int | None = None, heads: tuple[int, ...] | None = None
) -> torch.Tensor:
    """A delta-rule write key from a raw k (..., H, T, N): minus its mean if ``centred``, cut to its ``topk`` largest
    (in the heads ``heads`` alone where given), then k / max(|k|, KEY_EPS)."""
    if centred:
        k = k - k.mean(dim=-1, keepdim=True)
    if topk is not None:
        kth = k.sort(dim=-1, descending=True).values[..., topk - 1 : topk]
        cut = torch.where(k >= kth, k, torch.zeros_like(k))
        if heads is None:
            k = cut
        else:
            k = torch.stack([cut[..., h, :, :] if h in heads else k[..., h, :, :] for h in range(k.shape[-3])], -3)
    return k / k.norm(dim=-1, keepdim=True).clamp_min(KEY_EPS)


def naive_state_rule(q, k, v, *, log_g=None, beta=None, state=None, need_state=False, write_key=None):
    """The state rules token by token, vectorised over sequences and heads (as fla's ``naive_recurrent_*``): a_t =
    q_t^T S, then S = u_t (S + k_t w_t^T) with w_t = v_t, or b_t (v_t - S^T k_t) given ``beta`` (the delta rule), u_t
    = e^{log_g}.

    q, k: (B, H, T, N); v: (B, 1 or H, T, D); log_g, beta: (B, H, T) or None; state: (B, H, N, D) or None; write_key:
    None or (centred, topk, heads) for `naive_write_key`. Returns (a (B, H, T, D), the state after or None)."""
    B, H, T, N = q.shape
    S = q.new_zeros(B, H, N, v.shape[-1]) if state is None else state
    outs = []
    for t in range(T):
        qt, kt, vt = q[:, :, t : t + 1], k[:, :, t : t + 1], v[:, :, t : t + 1]
        if write_key is not None:
            kt = naive_write_key(kt, *write_key)
        outs.append(qt @ S.to(q.dtype))  # read before write
        if beta is not None:
            vt = beta[:, :, t, None, None].to(q.dtype) * (vt - kt @ S.to(q.dtype))  # w_t = b_t (v_t - S^T k_t)
        S = S + kt.mT @ vt
        if log_g is not None:
            S = S * torch.exp(log_g[:, :, t]).view(B, H, 1, 1).to(S.dtype)
    return torch.cat(outs, dim=2), (S if need_state else None)


def naive_rope_interleaved(z: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """The official rotation: pairs (2k, 2k+1) turn by the angle whose cos/sin are given per neuron."""
    rot = torch.empty_like(z)
    rot[..., 0::2] = -z[..., 1::2]
    rot[..., 1::2] = z[..., 0::2]
    return z * cos + rot * sin


def naive_official_forward(sd: dict[str, torch.Tensor], idx: torch.Tensor, n_layer: int, n_head: int) -> torch.Tensor:
    """The official BDH-GPU forward pass (eval mode), written out from its published math.

    ``sd``: ``embed.weight`` (V, D), ``encoder`` (h, D, N) = Dx, ``encoder_v`` (h, D, N) = Dy, ``decoder`` (h N, D) = E,
    ``lm_head`` (D, V). RoPE: theta = 2^16, frequencies in turns, interleaved pairs."""
    B, T = idx.shape
    encoder, encoder_v, decoder, lm_head = sd["encoder"], sd["encoder_v"], sd["decoder"], sd["lm_head"]
    D, N = encoder.shape[1], encoder.shape[2]

    def ln(z: torch.Tensor) -> torch.Tensor:
        mu = z.mean(-1, keepdim=True)
        var = ((z - mu) ** 2).mean(-1, keepdim=True)
        return (z - mu) / torch.sqrt(var + 1e-5)

    dev = idx.device  # the reference runs where its inputs are (a GPU test compares on the GPU)
    i = torch.arange(N, dtype=torch.float32, device=dev)
    freqs = 1.0 / (2.0**16) ** ((torch.floor(i / 2) * 2) / N) / (2 * math.pi)
    phases = (torch.arange(T, dtype=torch.float32, device=dev).view(-1, 1) * freqs.view(1, -1)) % 1 * (2 * math.pi)
    cos, sin = torch.cos(phases), torch.sin(phases)

    def rope(z: torch.Tensor) -> torch.Tensor:
        return naive_rope_interleaved(z, cos, sin)

    x = ln(sd["embed.weight"][idx]).unsqueeze(1)  # B, 1, T, D
    causal = torch.ones(T, T, device=dev).tril(diagonal=-1)
    for _ in range(n_layer):
        xs = F.relu(x @ encoder)  # B, h, T, N
        xr = rope(xs)
        a = ((xr @ xr.transpose(-1, -2)) * causal) @ x  # B, h, T, D
        ys = F.relu(ln(a) @ encoder_v)
        xy = (xs * ys).transpose(1, 2).reshape(B, 1, T, n_head * N)
        x = ln(x + ln(xy @ decoder))
    return x.view(B, T, D) @ lm_head
