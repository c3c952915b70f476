"""A board's structure for BDH (``attend: sudoku``, ``input_positions: sudoku``; `bdh.baselines.grid`): the kernels'
forms against `BDH.slow_forward` in values and gradients, the mask honoured (a cell reads its peers only), the
parameter count, and the one-line refusals of what cannot honour them."""

from __future__ import annotations

import pytest
import torch

from bdh import BDH, BDHConfig
from bdh.baselines.grid import peer_mask
from bdh.errors import UserError
from bdh.model.kernels import Pass, choose

from .helpers import rel_err, tiny_config

#: the board options alone and together, with and without damping and keys of their own
CASES = {
    "peers": dict(attend="sudoku"),
    "positions": dict(input_positions="sudoku"),
    "both": dict(attend="sudoku", input_positions="sudoku"),
    "both-damped": dict(attend="sudoku", input_positions="sudoku", damping="alibi"),
    "both-separate-keys": dict(attend="sudoku", input_positions="sudoku", separate_keys=True),
}


def board_model(case: str, seed: int = 0, **overrides) -> BDH:
    torch.manual_seed(seed)
    return BDH(tiny_config(causal=False, vocab_size=10, **CASES[case], **overrides))


def boards(batch: int = 2, T: int = 81, seed: int = 1) -> torch.Tensor:
    return torch.randint(0, 10, (batch, T), generator=torch.Generator().manual_seed(seed))


def grads_of(model: BDH, logits_fn) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    """Logits and the gradient of every parameter of a fixed weighted sum of them."""
    model.zero_grad()
    logits = logits_fn()
    weights = torch.linspace(-1, 1, logits.numel(), dtype=logits.dtype).view_as(logits)
    (logits * weights).sum().backward()
    return logits.detach(), {n: p.grad.clone() for n, p in model.named_parameters()}


@pytest.mark.parametrize("case", CASES)
def test_the_forward_equals_the_reference_in_values_and_gradients(case):
    """fp32: the training forward (the shared-keys kernel, or the plain parallel form with keys of their own) and the
    no-grad forward (the parallel form) against `BDH.slow_forward` (the mask and the grid written into Eq. 4's M and
    v_0). The same 21-term sums in another order, carried through two layers, stay far under 1e-5 of the scale; a
    mask left out or a grid not added changes the logits at O(1)."""
    model = board_model(case).train()  # dropout 0: train mode runs the autograd kernels and the reference alike
    idx = boards()
    fast, g_fast = grads_of(model, lambda: model(idx))
    slow, g_slow = grads_of(model, lambda: model.slow_forward(idx))
    assert rel_err(fast, slow) < 1e-5
    assert set(g_fast) == set(g_slow)
    for name in g_fast:
        assert rel_err(g_fast[name], g_slow[name]) < 1e-5, name
    with torch.no_grad():
        assert rel_err(model.eval()(idx), slow) < 1e-5


@pytest.mark.parametrize("case", ["peers", "both"])
def test_a_cell_reads_its_row_column_and_box_only(case):
    """One layer with ``attend: sudoku``: changing the tokens of every cell outside cell 40's peers leaves cell 40's
    logits as they were (exactly: its sums never read them), and changing a peer moves them; without the mask the
    same change moves them."""
    idx = boards(batch=1)
    far = ~peer_mask(81)[40]
    other = idx.clone()
    other[0, far] = (idx[0, far] + 1) % 10
    with torch.no_grad():
        masked = board_model(case, n_layer=1).eval()
        assert torch.equal(masked(idx)[0, 40], masked(other)[0, 40])
        peer = idx.clone()
        peer[0, 41] = (idx[0, 41] + 1) % 10
        assert not torch.equal(masked(idx)[0, 40], masked(peer)[0, 40])
        open_ = board_model("positions", n_layer=1).eval()
        assert not torch.equal(open_(idx)[0, 40], open_(other)[0, 40])


def test_input_positions_tell_cells_apart():
    """With ``input_positions: sudoku`` and no RoPE, the same digit on every cell gives different logits per cell;
    without them (no RoPE, no grid) every cell reads the same."""
    idx = torch.full((1, 81), 3)
    with torch.no_grad():
        plain = board_model("peers", positional="none").eval()(idx)[0]
        grid = board_model("both", positional="none").eval()(idx)[0]
    assert rel_err(plain, plain[:1].expand_as(plain)) < 1e-6  # identical sums: only float order could differ
    assert rel_err(grid, grid[:1].expand_as(grid)) > 1e-3


def test_parameters_and_defaults():
    """27 D parameters for the grid (rows, columns, boxes), none for the mask; both off by default."""
    cfg = BDHConfig()
    assert (cfg.attend, cfg.input_positions, cfg.board_options()) == ("all", "none", ())
    for case in CASES:
        model = board_model(case)
        assert model.num_params() == model.config.num_params()
    base, grid = board_model("peers"), board_model("both")
    assert grid.num_params() - base.num_params() == 27 * base.config.n_embd


@pytest.mark.parametrize("field", ["attend", "input_positions"])
def test_what_cannot_honour_the_board_is_refused_in_one_line(field):
    with pytest.raises(UserError, match=rf"BDHConfig\.{field}: .*causal=false") as err:
        tiny_config(**{field: "sudoku"})  # causal by default
    assert "\n" not in str(err.value)
    with pytest.raises(UserError, match="81 cells"):
        board_model("both")(boards(T=90))
    with pytest.raises(UserError, match="graph form"):
        board_model("peers").config.require_paper_layer("the graph form", allow=("no_expansion",))


def test_a_kernel_choice_with_a_mask_needs_the_bidirectional_parallel_form():
    """`choose` refuses a mask a form cannot honour (a causal pass, a carried state's chunked or recurrent form)."""
    mask = peer_mask(81)
    common = dict(
        positional="rope", log_u=None, chunk_size=16, dropout=0.0, dropout_rng="auto", training=False,
        autograd=False, device=torch.device("cpu"),
    )  # fmt: skip
    assert choose(Pass("parallel", 0, 81, mask=mask), causal=False, **common).mask is mask
    for mode in ("parallel", "chunked", "recurrent"):
        with pytest.raises(UserError, match="score mask"):
            choose(Pass(mode, 0, 81, mask=mask), causal=True, **common)
