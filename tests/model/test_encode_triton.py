"""The encoder's Triton kernel (`bdh.model.kernels.triton.encode`: x = ReLU(v W) with the ReLU and the cast in the
matmul's epilogue) against the PyTorch form ``F.relu(v @ W)`` (autograd) in values and gradients, run by Triton's CPU
interpreter; the model with it against today's path; its choice; and its compile for sm_90 at paper size."""

import pytest
import torch
import torch.nn.functional as F

from .helpers import compile_without_interpreter, interpreted, rel_err, tiny_model

pytestmark = pytest.mark.extra  # the gpu extra
triton = pytest.importorskip("triton", reason="Triton (the gpu extra) is not installed")


@pytest.fixture(scope="module")
def encode_triton():
    return interpreted("bdh.model.kernels.triton.encode", "encode_triton")


def _inputs(B=2, T=19, D=40, H=3, N=70, dtype=torch.float64, seed=0):
    """v (B, 1, T, D) with one token all zeros (its pre-activations exactly 0: ReLU's kink), W (H, D, N), a weight
    for the loss. At fp64 (tiles 32 x 32 x 16) the B T = 38 rows take two row tiles, one across the batch boundary,
    N = 70 three column tiles and D = 40 three inner steps, the last of each partly masked."""
    g = torch.Generator().manual_seed(seed)
    v = torch.randn(B, 1, T, D, generator=g, dtype=torch.float64)
    v[:, :, 3] = 0.0
    W = torch.randn(H, D, N, generator=g, dtype=torch.float64) / D**0.5
    w = torch.randn(B, H, T, N, generator=g, dtype=torch.float64)
    return v.to(dtype), W.to(dtype), w.to(dtype)


def _grads(fn, v, W, w):
    v, W = v.clone().requires_grad_(), W.clone().requires_grad_()
    x = fn(v, W)
    (x * w).sum().backward()
    return x.detach(), v.grad, W.grad


@pytest.mark.parametrize("dtype, tol", [(torch.float64, 1e-12), (torch.float32, 1e-5), (torch.bfloat16, 2e-2)])
def test_values_and_gradients_equal_the_pytorch_form(encode_triton, dtype, tol):
    """Both sum the same D products in fp32 (fp64) and round once, in another order: fp64 and fp32 differ by rounding
    in a 40-term sum (~1e-15, ~1e-6 relative). bf16: x differs by at most an ulp (2^-8 = 3.9e-3) where the two sums
    round to neighbours, and the gradients, computed by the same torch ops from x, by what such an ulp moves through
    a 70- or 38-term bf16 sum: bound 2e-2 of the largest. The zero token has x = 0 and no gradient in both."""
    v, W, w = _inputs(dtype=dtype)
    got = _grads(encode_triton, v, W, w)
    want = _grads(lambda v, W: F.relu(v @ W), v, W, w)
    for a, b in zip(got, want):
        assert a.dtype == dtype and a.shape == b.shape and rel_err(a.double(), b.double()) < tol
    assert (got[0][:, :, 3] == 0).all() and (got[1][:, :, 3] == want[1][:, :, 3]).all()


def test_autocast_casts_the_inputs_as_the_matmul_would(encode_triton):
    """Under autocast the output is in autocast's dtype and equals autocast's ``F.relu(v @ W)`` within the bf16 bound
    above; the gradients reach the fp32 leaves in fp32."""
    v, W, w = _inputs(dtype=torch.float32)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        got = _grads(encode_triton, v, W, w)
        want = _grads(lambda v, W: F.relu(v @ W), v, W, w)
    assert got[0].dtype == want[0].dtype == torch.bfloat16 and got[1].dtype == got[2].dtype == torch.float32
    for a, b in zip(got, want):
        assert rel_err(a.double(), b.double()) < 2e-2


def test_the_backward_keeps_v_w_and_x_only(encode_triton):
    """No pre-activation is kept for the backward pass: the tensors autograd keeps are v, W and the output x."""
    v, W, _ = _inputs(dtype=torch.float32)
    v, W = v.requires_grad_(), W.requires_grad_()
    saved = []
    with torch.autograd.graph.saved_tensors_hooks(lambda t: saved.append(t) or t, lambda t: t):
        x = encode_triton(v, W)
    assert [s.shape for s in saved] == [v.shape, W.shape, x.shape] and saved[2].data_ptr() == x.data_ptr()


def test_bad_input_is_refused_with_one_line(encode_triton, monkeypatch):
    v, W, _ = _inputs(dtype=torch.float32)
    for bad in ((v.expand(-1, 3, -1, -1), W), (v, W[:, :5]), (v, W.double()), (v.long(), W.long()), (v[0], W)):
        with pytest.raises(ValueError, match=r"encode_triton: needs v \(B, 1, T, D\) and W \(H, D, N\)"):
            encode_triton(*bad)
    monkeypatch.setenv("TRITON_INTERPRET", "0")
    with pytest.raises(ValueError, match="on one CUDA device"):
        encode_triton(v, W)


@pytest.mark.parametrize("overrides", [{}, {"separate_keys": True, "positional": "rope-standard"}])
def test_the_model_with_the_triton_encoder_computes_todays_path(encode_triton, monkeypatch, overrides):
    """The choice table takes the Triton encoder (forced on the CPU here, the compiled loops off): the logits and
    every parameter's gradient equal today's path's (fp64, the same sums in another order: 1e-12), with the queries'
    RoPE and with keys of their own (D_k)."""
    from bdh.model.kernels import Pass, choice

    monkeypatch.setenv("BDH_NATIVE", "0")
    idx = torch.randint(0, 256, (2, 9), generator=torch.Generator().manual_seed(0))
    results = {}
    for on in (False, True):
        monkeypatch.setattr(choice, "use_triton", lambda device, on=on: on)
        model = tiny_model(seed=1, **overrides).double().train()
        assert model.kernels(Pass("parallel", 0, 9)).choice.encode == ("triton" if on else "heads-relu")
        logits = model(idx)
        logits.pow(2).mean().backward()
        results[on] = [logits.detach()] + [p.grad for p in model.parameters()]
    for a, b in zip(results[True], results[False]):
        assert rel_err(a, b) < 1e-12


def test_the_choice_is_triton_on_cuda_for_a_training_step_only(monkeypatch):
    from bdh.model.kernels import Pass, choose

    def chosen(device: str, autograd: bool = True) -> str:
        options = dict(log_u=None, causal=True, chunk_size=8, dropout=0.0, dropout_rng="auto", training=autograd)
        p = Pass("parallel", 0, 16)
        return choose(p, positional="rope", autograd=autograd, device=torch.device(device), **options).encode

    assert chosen("cuda") == "triton" and chosen("cpu") == "heads-relu" and chosen("cuda", False) == "heads-relu"
    monkeypatch.setenv("BDH_TRITON", "0")
    assert chosen("cuda") == "heads-relu"


AHEAD_OF_TIME = r"""
import os, re, subprocess, sys, tempfile
os.environ.pop("TRITON_INTERPRET", None)
import torch, triton
from triton.backends.compiler import GPUTarget
from triton.backends.nvidia.compiler import get_ptxas
from triton.compiler import ASTSource
from bdh.model.kernels.triton import encode
from bdh.model.kernels.triton.encode_jit import encode_kernel

POINTER = {"bfloat16": "*bf16", "float32": "*fp32"}
for name in sys.argv[1:]:
    plan = encode._plan(getattr(torch, name), 8 * 2048, 8192, 256)  # paper size: B 8, T 2048, N 8192, D 256
    names, constants = encode_kernel.arg_names, plan.constants()
    signature = {n: "constexpr" if n in constants else POINTER[name] if n.endswith("_ptr") else "i32" for n in names}
    aligned = {(names.index(n),): [["tt.divisibility", 16]] for n in names if n not in constants}  # as a launch
    src = ASTSource(fn=encode_kernel, signature=signature,  # at paper size specialises its pointers and sizes
                    constexprs={(names.index(n),): v for n, v in constants.items()}, attrs=aligned)
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
    print(name, plan, f"shared {kernel.metadata.shared} B", re.findall(r"Used \d+ registers", log), "spills", spills)
    assert spills and not any(spills), log
    assert name != "bfloat16" or "wgmma.mma_async" in kernel.asm["ptx"]  # bf16 runs on Hopper's tensor cores
print("compiled")
"""


def test_the_kernel_compiles_for_hopper_without_spilling():
    """bf16 (the training step's dtype under autocast) and fp32 tiles at paper size."""
    print(compile_without_interpreter(AHEAD_OF_TIME, "bfloat16", "float32"))
