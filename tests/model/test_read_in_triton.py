"""The gate and the decoder product in one Triton kernel (`bdh.model.kernels.triton.read_in`: E y with y = ReLU(z) * x
formed in the prologue, dropout drawn inside) against the PyTorch form (`relu_mul`, then the per-head E y summed over
the heads, through autograd) in values and gradients, run by Triton's CPU interpreter; the model with it against
today's path; its choice; and its compile for sm_90 at paper size."""

import pytest
import torch

from bdh.model.kernels.pytorch.fused import relu_mul

from .helpers import compile_without_interpreter, interpreted, rel_err, tiny_model

pytestmark = pytest.mark.extra  # the gpu extra
triton = pytest.importorskip("triton", reason="Triton (the gpu extra) is not installed")


@pytest.fixture(scope="module")
def kernels():
    read_in = interpreted("bdh.model.kernels.triton.read_in", "gated_read_in_triton")
    return read_in, interpreted("bdh.model.kernels.triton.gate", "gate_triton")


def _inputs(B=2, H=3, T=19, N=40, D=37, dtype=torch.float64, seed=0):
    """z (some exactly 0: ReLU's kink), x, E (H N, D), a weight for the loss. At fp64 (tiles 32 x 32 x 16) every
    product of the three kernels takes two or three tiles of each dimension, the last partly masked, and a row tile
    crosses the batch boundary (B T = 38)."""
    g = torch.Generator().manual_seed(seed)
    z = torch.randn(B, H, T, N, generator=g, dtype=torch.float64)
    z[..., ::7] = 0.0
    x = torch.randn(B, H, T, N, generator=g, dtype=torch.float64)
    E = torch.randn(H * N, D, generator=g, dtype=torch.float64) / (H * N) ** 0.5
    w = torch.randn(B, 1, T, D, generator=g, dtype=torch.float64)
    return z.to(dtype), x.to(dtype), E.to(dtype), w.to(dtype)


def _grads(fn, z, x, E, w):
    z, x, E = (t.clone().requires_grad_() for t in (z, x, E))
    out = fn(z, x, E)
    (out * w).sum().backward()
    return out.detach(), z.grad, x.grad, E.grad


def _reference(keep, p):
    def form(z, x, E):
        H, N = z.shape[1], z.shape[3]
        return (relu_mul(z, x) * keep @ E.view(H, N, -1)).sum(dim=1, keepdim=True) / (1 - p)

    return form


@pytest.mark.parametrize("p", [0.0, 0.3])
@pytest.mark.parametrize("dtype, tol", [(torch.float64, 1e-12), (torch.float32, 1e-5), (torch.bfloat16, 1e-2)])
def test_values_and_gradients_equal_the_pytorch_form(kernels, dtype, tol, p):
    """Against the PyTorch form with the gate kernel's mask at the same seed (the same entries dropped). fp64 and
    fp32: the same sums in another order (a 120-term sum: ~1e-15, ~1e-6 relative). bf16: against the PyTorch form in
    fp64 on the same bf16 inputs, the kernel rounding y (2^-9 relative an entry, as the gate writes it) and each
    output once, the sums in fp32: bound 1e-2 of the largest (the bf16 PyTorch form itself, rounding per head and
    summing the heads in bf16, is as far)."""
    read_in, gate = kernels
    z, x, E, w = _inputs(dtype=dtype)
    keep = gate(torch.ones_like(z), torch.ones_like(z), p=p, seed=5) != 0
    got = _grads(lambda z, x, E: read_in(z, x, E, p=p, seed=5), z, x, E, w)
    wide = (t.double() for t in (z, x, E, w))
    want = _grads(_reference(keep, p), *wide)
    for a, b in zip(got, want):
        assert a.dtype == dtype and a.shape == b.shape and rel_err(a.double(), b) < tol
    assert (got[1][~keep] == 0).all() and (got[2][~keep] == 0).all()


def test_the_backward_keeps_z_x_and_e_only(kernels):
    """Neither y nor a mask is kept: the tensors autograd keeps are z, x and E."""
    read_in, _ = kernels
    z, x, E, _ = _inputs(dtype=torch.float32)
    leaves = [t.requires_grad_() for t in (z, x, E)]
    saved = []
    with torch.autograd.graph.saved_tensors_hooks(lambda t: saved.append(t) or t, lambda t: t):
        read_in(*leaves, p=0.5, seed=3)
    assert [s.data_ptr() for s in saved] == [t.data_ptr() for t in leaves]


def test_bad_input_is_refused_with_one_line(kernels, monkeypatch):
    read_in, _ = kernels
    z, x, E, _ = _inputs(dtype=torch.float32)
    for bad in ((z, x[..., :3], E), (z, x, E[:5]), (z, x.double(), E), (z.long(), x.long(), E.long()), (z[0], x, E)):
        with pytest.raises(ValueError, match=r"gated_read_in_triton: needs z, x \(B, H, T, N\) of one shape"):
            read_in(*bad)
    with pytest.raises(ValueError, match=r"p must be in \[0, 1\)"):
        read_in(z, x, E, p=1.0)
    with pytest.raises(ValueError, match="seed must be an int"):
        read_in(z, x, E, p=0.1, seed=-1)
    monkeypatch.setenv("TRITON_INTERPRET", "0")
    with pytest.raises(ValueError, match="CUDA device"):
        read_in(z, x, E)


def test_the_model_with_the_triton_read_in_computes_todays_path(kernels, monkeypatch):
    """The choice table takes it (forced on the CPU here, the compiled loops off): without dropout the logits and
    every parameter's gradient equal today's path's (fp64, the same sums in another order: 1e-12); a hooked pass
    keeps the gate and y. With dropout drawn inside, the pass is reproducible from torch's seed and differs between
    seeds (which entries it drops: the next test)."""
    from bdh.model.kernels import Pass, choice

    monkeypatch.setenv("BDH_NATIVE", "0")
    idx = torch.randint(0, 256, (2, 9), generator=torch.Generator().manual_seed(0))
    results = {}
    for on in (False, True):
        monkeypatch.setattr(choice, "use_triton", lambda device, on=on: on)
        model = tiny_model(seed=1).double().train()
        assert model.kernels(Pass("parallel", 0, 9)).choice.read_in == ("gated-triton" if on else "per-head")
        logits = model(idx)
        logits.pow(2).mean().backward()
        results[on] = [logits.detach()] + [p.grad for p in model.parameters()]
    for a, b in zip(results[True], results[False]):
        assert rel_err(a, b) < 1e-12
    assert model.kernels(Pass("parallel", 0, 9, hooked=True)).choice.read_in == "per-head"
    _, cap = model(idx, capture=True)
    assert len(cap.y) == 2 and all(y.shape == cap.x[0].shape for y in cap.y)  # the gate ran, y kept
    model = tiny_model(seed=1, dropout=0.3).double().train()
    runs = []
    for seed in (4, 4, 5):
        torch.manual_seed(seed)
        runs.append(model(idx).detach())
    assert torch.equal(runs[0], runs[1]) and not torch.equal(runs[0], runs[2])


def _philox_dropout(gate, kept: list):
    """``F.dropout`` as the fused read-in draws it: a seed from torch's generator (one draw, as the kernel's caller
    draws it), the mask of the gate kernel at that seed (the read-in's, `test_values_and_gradients_equal_the_pytorch
    _form`), scaled by 1 / (1 - p); each mask appended to ``kept``."""
    from bdh.model.kernels.triton.gate import MAX_SEED

    def dropout(y: torch.Tensor, p: float, training: bool = True) -> torch.Tensor:
        assert training and 0 < p < 1
        seed = int(torch.randint(MAX_SEED, ()).item())
        keep = gate(torch.ones_like(y), torch.ones_like(y), p=p, seed=seed) != 0
        kept.append(keep)
        return y * keep / (1 - p)

    return dropout


def test_the_models_dropout_drawn_inside_equals_the_pytorch_step_with_the_same_masks(kernels, monkeypatch):
    """The CUDA training step's dropout (issue 58, point 2): CUDA's choice forced on the CPU (the compiled loops off,
    masks ``torch`` as on CUDA), a chunked training pass draws its masks inside the read-in and writes none, no
    ``F.dropout``. Against today's path (``BDH_TRITON=0``: the fused gate, ``F.dropout`` on y, the per-head E y) with
    ``F.dropout``'s masks replaced by the kernel's at the seed the kernel draws (the mask recovered): the logits and
    every parameter gradient within 1e-12 (fp64; the same sums in another order, one factor 1 / (1 - p) applied
    before the product instead of after); the masks drop p of the entries (5 standard deviations: 0.024 at 0.3 and
    the 2 x 2 x 12 x 64 entries of both layers' y)."""
    from bdh.model.kernels import Pass, choice, dispatch

    _, gate = kernels
    monkeypatch.setenv("BDH_NATIVE", "0")
    idx = torch.randint(0, 256, (2, 12), generator=torch.Generator().manual_seed(0))
    results, kept = {}, []
    monkeypatch.setattr(dispatch.F, "dropout", _philox_dropout(gate, kept))
    for on in (True, False):
        monkeypatch.setattr(choice, "use_triton", lambda device, on=on: on)
        model = tiny_model(seed=1, dropout=0.3, dropout_rng="torch").double().train()
        c = model.kernels(Pass("chunked", 0, 12)).choice
        assert (c.masks, c.read_in) == ("torch", "gated-triton" if on else "per-head")
        torch.manual_seed(6)
        logits = model(idx, mode="chunked")
        logits.pow(2).mean().backward()
        results[on] = [logits.detach()] + [p.grad for p in model.parameters()]
        assert len(kept) == (0 if on else model.config.n_layer)  # the fused pass calls no F.dropout; today's, L
    for a, b in zip(results[True], results[False]):
        assert rel_err(a, b) < 1e-12
    dropped = torch.cat([~k.flatten() for k in kept]).double().mean().item()
    assert abs(dropped - 0.3) < 5 * (0.3 * 0.7 / (2 * 2 * 2 * 12 * 64)) ** 0.5


def test_the_choice_is_triton_on_cuda_for_an_unhooked_training_step(monkeypatch):
    from bdh.model.kernels import Pass, choose

    def chosen(device: str, autograd: bool = True, **fields) -> str:
        options = dict(log_u=None, causal=True, chunk_size=8, dropout=0.1, dropout_rng="auto", training=autograd)
        p = Pass("parallel", 0, 16, **fields)
        return choose(p, positional="rope", autograd=autograd, device=torch.device(device), **options).read_in

    assert chosen("cuda") == "gated-triton" and chosen("cpu") == "per-head" and chosen("cuda", False) == "per-head"
    assert chosen("cuda", hooked=True) == "per-head"
    monkeypatch.setenv("BDH_TRITON", "0")
    assert chosen("cuda") == "per-head"


AHEAD_OF_TIME = r"""
import os, re, subprocess, sys, tempfile
os.environ.pop("TRITON_INTERPRET", None)
import torch, triton
from triton.backends.compiler import GPUTarget
from triton.backends.nvidia.compiler import get_ptxas
from triton.compiler import ASTSource
from bdh.model.kernels.triton import encode, read_in, read_in_jit as K

M, N, D = 8 * 2048, 8192, 256  # paper size: B 8, T 2048, N 8192 a head, D 256
tiles = {K.read_in_kernel: (M, D, N), K.read_in_grad_kernel: (M, N, D), K.read_in_grad_weight_kernel: (N, D, M)}
for fn, tile in tiles.items():
    plan = encode._plan(torch.bfloat16, *tile, read_in.TILES)
    names, constants = fn.arg_names, {**plan.constants(), "DROP": True}
    scalars = {"seed": "i32", "p": "fp32", "scale": "fp32"}
    signature = {n: "constexpr" if n in constants else "*bf16" if n.endswith("_ptr") else scalars.get(n, "i32")
                 for n in names}
    aligned = {(names.index(n),): [["tt.divisibility", 16]] for n in names  # as a launch at paper size
               if n not in constants and n not in scalars}  # specialises its pointers and sizes
    src = ASTSource(fn=fn, signature=signature, constexprs={(names.index(n),): v for n, v in constants.items()},
                    attrs=aligned)
    options = {"num_warps": encode.NUM_WARPS, "num_stages": encode.NUM_STAGES}
    kernel = triton.compile(src, target=GPUTarget("cuda", 90, 32), options=options)
    assert kernel.metadata.shared <= 227 * 1024, kernel.metadata.shared  # Hopper's maximum
    with tempfile.NamedTemporaryFile("w", suffix=".ptx") as f:
        f.write(kernel.asm["ptx"])
        f.flush()
        command = [get_ptxas(90).path, "-v", "--gpu-name=sm_90a", f.name, "-o", f.name + ".cubin"]
        log = subprocess.run(command, capture_output=True, text=True, check=True).stderr
        os.remove(f.name + ".cubin")
    spills = [int(b) for b in re.findall(r"(\d+) bytes spill (?:stores|loads)", log)]
    tensor_cores = "wgmma.mma_async" in kernel.asm["ptx"] or "mma.sync" in kernel.asm["ptx"]
    print(fn.__name__, plan, f"shared {kernel.metadata.shared} B", re.findall(r"Used \d+ registers", log),
          "spills", spills, "wgmma" if "wgmma.mma_async" in kernel.asm["ptx"] else "mma" if tensor_cores else "-")
    assert spills and not any(spills) and tensor_cores, log
print("compiled")
"""


def test_the_kernels_compile_for_hopper_without_spilling():
    """The forward and both backward kernels, bf16 with dropout (the training step's), at paper size."""
    print(compile_without_interpreter(AHEAD_OF_TIME))
