"""BDH, the neuron-level graph model (paper section 2), and its exact link to BDH-GPU (section 3.4).

Per token t and layer l (Eq. 6, with the Hebbian orientation that reproduces it, spec section 1.5):

    x_{t,l}     = x_{t,l-1} + ((G_x^e - G_x^i) y_{t,l-1})^+
    A_{t,l}     = sigma_{t-1,l} x_{t,l}                                 (read the synapses)
    y_{t,l}     = ((G_y^e - G_y^i) A_{t,l})^+ * x_{t,l}
    sigma_{t,l} = (sigma_{t-1,l} + (y_{t,l-1} x_{t,l}^T) . G_s) U      (Hebbian write, then damping)

Edge i -> j is stored at row j, column i. `from_gpu` builds the graphs of a BDH-GPU model (Observation 4, Eq. 9), equal
to BDH-Normfree (Eq. 7, `normfree_gpu`); `run_rounds` runs Table 1's local rules. n x n matrices: small n only."""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F

from bdh.errors import UserError

from .bdh import BDH
from .kernels import apply_rope
from .kernels.pytorch.attention import parallel
from .kernels.pytorch.rope import rope_tables


@dataclass
class GraphTrace:
    """A run's ``x``, ``y`` (L, B, T, n) and final ``sigma`` (L, B, n, n) or ``rho`` = E sigma (L, B, D, n), or None."""

    x: torch.Tensor
    y: torch.Tensor
    sigma: torch.Tensor | None = None
    rho: torch.Tensor | None = None


class BDHGraph:
    """The graph model: n neurons, L layers, h heads; (n, n) edge weights (row = target), synapse mask ``Gs``,
    update ``U``."""

    def __init__(
        self,
        Gx_e: torch.Tensor,
        Gx_i: torch.Tensor,
        Gy_e: torch.Tensor,
        Gy_i: torch.Tensor,
        n_layer: int,
        n_head: int = 1,
        Gs: torch.Tensor | None = None,
        U: torch.Tensor | None = None,
    ):
        n = Gx_e.shape[0]
        for name, g in (("Gx_e", Gx_e), ("Gx_i", Gx_i), ("Gy_e", Gy_e), ("Gy_i", Gy_i), ("Gs", Gs), ("U", U)):
            if g is not None and tuple(g.shape) != (n, n):
                raise UserError(f"BDHGraph: {name} must be ({n}, {n}), got {tuple(g.shape)}")
        for name, g in (("Gx_e", Gx_e), ("Gx_i", Gx_i), ("Gy_e", Gy_e), ("Gy_i", Gy_i), ("Gs", Gs)):
            if g is not None and bool((g < 0).any()):
                raise UserError(f"BDHGraph: {name} must be non-negative (edge weights are rule amplitudes)")
        if n % n_head:
            raise UserError(f"BDHGraph: n = {n} neurons must split evenly into n_head = {n_head} heads")
        if n_layer < 1:
            raise UserError(f"BDHGraph: n_layer must be positive, got {n_layer}")
        self.Gx_e, self.Gx_i, self.Gy_e, self.Gy_i = Gx_e, Gx_i, Gy_e, Gy_i
        self.Gs, self.U = Gs, U
        self.n, self.n_layer, self.n_head = n, n_layer, n_head
        self.head_of = torch.arange(n, device=Gx_e.device) // (n // n_head)
        self.head_mask = F.one_hot(self.head_of, n_head).T.to(Gx_e.dtype)  # (h, n)

    @property
    def Gx(self) -> torch.Tensor:
        return self.Gx_e - self.Gx_i

    @property
    def Gy(self) -> torch.Tensor:
        return self.Gy_e - self.Gy_i

    def init_sigma(self, batch_size: int) -> torch.Tensor:
        """sigma = 0 for every layer: (L, B, n, n)."""
        return self.Gx_e.new_zeros(self.n_layer, batch_size, self.n, self.n)

    # ------------------------------------------------------------------ Eq. 6
    def _read(self, sigma: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
        """A_h = sigma[:, block h] x[block h] for every head: (B, h, n)."""
        return torch.einsum("bji,hi,bi->bhj", sigma, self.head_mask, x)

    def _gate(self, A: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
        """y(j) = ((G_y A_{head(j)})_j)^+ x(j)."""
        z = torch.einsum("ji,bhi->bhj", self.Gy, A)  # (B, h, n)
        z = z.gather(1, self.head_of.view(1, 1, -1).expand(z.shape[0], 1, -1)).squeeze(1)
        return F.relu(z) * x

    def _write(self, sigma: torch.Tensor, y_prev: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
        hebb = y_prev.unsqueeze(2) * x.unsqueeze(1)  # (B, n, n): [j, i] = y_{l-1}(j) x_l(i)
        if self.Gs is not None:
            hebb = hebb * self.Gs
        sigma = sigma + hebb
        return sigma @ self.U if self.U is not None else sigma

    def run(self, y0: torch.Tensor, sigma: torch.Tensor | None = None) -> GraphTrace:
        """Eq. 6 token by token, layer by layer. y0: (B, T, n) the input y_{t,0} >= 0 (x_{t,0} = 0)."""
        B, T, n = self._check_input(y0)
        sigma = self.init_sigma(B) if sigma is None else sigma.clone()
        xs = y0.new_zeros(self.n_layer, B, T, n)
        ys = y0.new_zeros(self.n_layer, B, T, n)
        for t in range(T):
            x = y0.new_zeros(B, n)
            y_prev = y0[:, t]
            for layer in range(self.n_layer):
                x = x + F.relu(y_prev @ self.Gx.T)
                A = self._read(sigma[layer], x)  # uses sigma_{t-1}: the write comes after the read
                y = self._gate(A, x)
                sigma[layer] = self._write(sigma[layer], y_prev, x)
                xs[layer, :, t], ys[layer, :, t] = x, y
                y_prev = y
        return GraphTrace(xs, ys, sigma=sigma)

    # ------------------------------------------------------------------ Table 1
    def run_rounds(self, y0: torch.Tensor) -> GraphTrace:
        """The same dynamics as Table 1's local rules: four rounds per layer, each reading the old values."""
        B, T, n = self._check_input(y0)
        sigma = self.init_sigma(B)
        xs = y0.new_zeros(self.n_layer, B, T, n)
        ys = y0.new_zeros(self.n_layer, B, T, n)
        for t in range(T):
            X = y0.new_zeros(B, n)
            Y = y0[:, t].clone()
            A = y0.new_zeros(B, self.n_head, n)
            Xe, Xi = torch.zeros_like(X), torch.zeros_like(X)
            for layer in range(self.n_layer):
                # round 4(l-1)+3, "inference from parameters": Y(i) -G_x^e(i,j)-> X^e(j), Y(i) -G_x^i(i,j)-> X^i(j)
                Xe = Xe + Y @ self.Gx_e.T
                Xi = Xi + Y @ self.Gx_i.T
                X = X + F.relu(Xe - Xi)  # computation: thresholded increment
                # round 4l, "inference from state": X(i), sigma(i, j) -> A(j), per head
                A = A + self._read(sigma[layer], X)
                # round 4l+1, "reweighting of synapse state": X(i), Y(j) -G_s-> sigma(j <- i), then sigma
                # decays/rotates; X^e, X^i, Y reset
                sigma[layer] = self._write(sigma[layer], Y, X)
                Xe, Xi, Y = torch.zeros_like(Xe), torch.zeros_like(Xi), torch.zeros_like(Y)
                # round 4l+2, "neuron replicator dynamics": A(i) -G_y^e(i,j)-> Y^e(j), A(i) -G_y^i(i,j)-> Y^i(j);
                # computation: Y(i) += (Y^e(i) - Y^i(i))^+ X(i); Y^e, Y^i, A reset
                Ye = torch.einsum("ji,bhi->bhj", self.Gy_e, A)
                Yi = torch.einsum("ji,bhi->bhj", self.Gy_i, A)
                own = self.head_of.view(1, 1, -1).expand(B, 1, -1)
                Y = Y + F.relu(Ye.gather(1, own).squeeze(1) - Yi.gather(1, own).squeeze(1)) * X
                A = torch.zeros_like(A)
                xs[layer, :, t], ys[layer, :, t] = X, Y
        return GraphTrace(xs, ys, sigma=sigma)

    def _check_input(self, y0: torch.Tensor) -> tuple[int, int, int]:
        if y0.dim() != 3 or y0.shape[2] != self.n:
            raise UserError(f"BDHGraph: input y0 must be (batch, time, {self.n}), got {tuple(y0.shape)}")
        if bool((y0 < 0).any()):
            raise UserError("BDHGraph: input activations y0 must be non-negative")
        return y0.shape[0], y0.shape[1], y0.shape[2]


# ---------------------------------------------------------------------- BDH-GPU -> BDH
def flat_decoders(model: BDH) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """(D_x, D_y, E) as paper-shaped matrices: D_x, D_y (n, D) with neuron j = head * N + j', E (D, n)."""
    cfg = model.config
    cfg.require_paper_layer("the graph form", allow=("no_expansion",))
    Dx = model.Dx.detach().permute(0, 2, 1).reshape(cfg.n, cfg.n_embd)
    Dy = model.Dy.detach().permute(0, 2, 1).reshape(cfg.n, cfg.n_embd)
    return Dx, Dy, model.E.detach().T


def state_update_matrix(model: BDH) -> torch.Tensor | None:
    """U (n, n): one step of the model's RoPE rotation times its per-head damping, None if neither."""
    cfg = model.config
    n, N = cfg.n, cfg.N
    rotate = cfg.positional != "none"
    if not rotate and model.log_u is None:
        return None
    dtype = model.E.dtype
    U = torch.eye(n, dtype=dtype, device=model.E.device)
    if rotate:
        cos, sin = rope_tables(cfg.positional, model.freqs, 1, 1)  # (1, N): position 1 = one step
        R1 = apply_rope(cfg.positional, torch.eye(N, dtype=torch.float32, device=model.E.device), cos, sin)
        # apply_rope rotates each row of the identity, so R1 holds M_1^T for the rotation matrix M_1 of one
        # step; U = M_1 gives x^T U^k x' = <M_tau x, M_(tau+k) x'>, the relative rotation of RoPE
        U = torch.block_diag(*([R1.T.to(dtype)] * cfg.n_head))
    if model.log_u is not None:
        u = torch.exp(model.log_u.float()).to(dtype).repeat_interleave(N)
        U = U * u.view(1, -1)
    return U


def from_gpu(model: BDH, max_neurons: int = 8192) -> BDHGraph:
    """The graph model of BDH-GPU (Observation 4, Eq. 9): G^e = (DE)^+, G^i = (-DE)^+, G_s ones, U the RoPE step
    and damping."""
    cfg = model.config
    if cfg.n > max_neurons:
        gib = 4 * cfg.n * cfg.n * 4 / 2**30
        raise UserError(
            f"from_gpu: the graph model holds n x n matrices; n = {cfg.n} needs about {gib:.1f} GiB "
            f"(raise max_neurons to force it, or use bdh.analysis, which works blockwise)"
        )
    if not cfg.causal:
        raise UserError("from_gpu: the graph model is causal; this BDH-GPU model is bidirectional")
    Dx, Dy, E = flat_decoders(model)
    Gx = Dx @ E
    Gy = Dy @ E
    return BDHGraph(
        F.relu(Gx),
        F.relu(-Gx),
        F.relu(Gy),
        F.relu(-Gy),
        n_layer=cfg.n_layer,
        n_head=cfg.n_head,
        Gs=None,
        U=state_update_matrix(model),
    )


def normfree_gpu(model: BDH, y0: torch.Tensor) -> GraphTrace:
    """BDH-Normfree (Eq. 7) with the model's low-rank matrices; ``y0`` (B, T, n) is y_{t,0}; returns x, y and rho (D
    x n)."""
    cfg = model.config
    cfg.require_paper_layer("normfree_gpu", allow=("no_expansion",))
    B, T, n = y0.shape
    if n != cfg.n:
        raise UserError(f"normfree_gpu: y0 must have n = {cfg.n} neurons, got {n}")
    H, N = cfg.n_head, cfg.N
    kind = cfg.positional
    cos, sin = rope_tables(kind, model.freqs, 0, T) if kind != "none" else (None, None)
    log_u = None if model.log_u is None else model.log_u.float()
    x = y0.new_zeros(B, H, T, N)
    y_prev = y0
    xs, ys, rhos = [], [], []
    for _ in range(cfg.n_layer):
        v = (y_prev @ model.E).unsqueeze(1)  # E y_{l-1}: (B, 1, T, D)
        x = x + F.relu(v @ model.Dx)  # (B, H, T, N)
        xr = apply_rope(kind, x, cos, sin)
        a, S = parallel(xr, xr, v, log_u=log_u, need_state=True)
        y = F.relu(a @ model.Dy) * x
        y_prev = y.transpose(1, 2).reshape(B, T, n)
        xs.append(x.transpose(1, 2).reshape(B, T, n))
        ys.append(y_prev)
        rhos.append(_absolute_to_relative(S, kind, model.freqs, T))
    return GraphTrace(torch.stack(xs), torch.stack(ys), rho=torch.stack(rhos))


def _absolute_to_relative(S: torch.Tensor, kind: str, freqs: torch.Tensor, T: int) -> torch.Tensor:
    """Our state S_h (B, H, N, D), keys rotated by absolute position, as the paper's rho (B, D, n): rho^T = M_(-T) S."""
    B, H, N, D = S.shape
    if kind != "none":
        cos, sin = rope_tables(kind, freqs, -T, 1)  # rotation by position -T
        S = apply_rope(kind, S.transpose(-1, -2), cos, sin).transpose(-1, -2)
    return S.permute(0, 3, 1, 2).reshape(B, D, H * N)


def sigma_to_rho(model: BDH, sigma: torch.Tensor) -> torch.Tensor:
    """E sigma (Eq. 9): (..., n, n) synapse states to (..., D, n) attention states."""
    model.config.require_paper_layer("sigma_to_rho", allow=("no_expansion", "ungated", "separate_keys"))  # one E
    return model.E.detach().T @ sigma
