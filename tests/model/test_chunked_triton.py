"""The fused Triton chunked attention (`bdh.model.kernels.triton.chunked`) against the naive sum and the recurrent form,
in values and every gradient, run by Triton's CPU interpreter (``TRITON_INTERPRET=1``).

The interpreter runs each program of a kernel in Python, so the cases in CI are small (each covers a chunk shorter
than the others, masked rows and columns of the tiles, and the options of BDH's form); the cases with several
tiles of N, D and the chunk are marked slow. On CUDA, tests/cuda/test_cuda.py runs the compiled kernels.
"""

import pytest
import torch

from bdh.model.kernels import Pass, choose, use_triton
from bdh.model.kernels.naive import naive_linear_attention
from bdh.model.kernels.pytorch import attention

from .helpers import compile_without_interpreter, interpreted, rel_err, tiny_model

pytestmark = pytest.mark.extra  # the gpu extra
triton = pytest.importorskip("triton", reason="Triton (the gpu extra) is not installed")


@pytest.fixture(scope="module")
def chunked_triton():
    """`chunked_triton`, its kernels run by Triton's CPU interpreter (tests/conftest.py turns it on without a GPU)."""
    return interpreted("bdh.model.kernels.triton.chunked", "chunked_triton")


def _inputs(B, H, T, N, D, dtype=torch.float64, damped=False, with_state=False, shared_v=True, seed=0):
    g = torch.Generator().manual_seed(seed)
    q = torch.randn(B, H, T, N, generator=g, dtype=dtype)
    k = torch.randn(B, H, T, N, generator=g, dtype=dtype)
    v = torch.randn(B, 1 if shared_v else H, T, D, generator=g, dtype=dtype)
    s0 = torch.randn(B, H, N, D, generator=g, dtype=dtype) if with_state else None
    log_u = torch.tensor([0.9, 0.5, 1.0, 0.99][:H], dtype=dtype).log() if damped else None
    return q, k, v, s0, log_u


def _run(fn, q, k, v, s0, shared_keys: bool, w_out, w_state):
    """Output, final state and the gradients of q, k (None with shared keys), v and S0 of a weighted sum."""
    q = q.clone().requires_grad_()
    k = q if shared_keys else k.clone().requires_grad_()
    v = v.clone().requires_grad_()
    s0 = None if s0 is None else s0.clone().requires_grad_()
    out, state = fn(q, k, v, s0)
    loss = (out * w_out).sum() + (0 if state is None else (state * w_state).sum())
    loss.backward()
    grads = [q.grad, None if shared_keys else k.grad, v.grad, None if s0 is None else s0.grad]
    return out.detach(), None if state is None else state.detach(), grads


# (B, H, T, N, D, chunk, damped, with_state, shared_keys, shared_v): T is never a multiple of the chunk, N and D
# never a power of two (masked tiles), the chunk smaller and larger than the 16-row tile
CASES = [
    (2, 2, 13, 24, 5, 4, False, False, True, True),  # BDH: keys = queries, values shared by the heads
    (1, 3, 13, 24, 5, 5, True, True, True, True),  # damped, with a carried state
    (2, 2, 9, 20, 6, 16, True, False, False, False),  # one chunk, shorter than it; separate keys, values per head
    (1, 2, 11, 18, 7, 3, False, True, False, True),
]
SLOW = [
    (1, 2, 150, 80, 70, 100, True, True, True, True),  # 3 chunks of 64 (the kernels' largest), 2 tiles of N and of D
    (2, 1, 70, 130, 20, 64, False, False, False, False),
]


def _compare(chunked_triton, case, tol: float) -> None:
    B, H, T, N, D, chunk, damped, with_state, shared_keys, shared_v = case
    q, k, v, s0, log_u = _inputs(B, H, T, N, D, damped=damped, with_state=with_state, shared_v=shared_v)
    g = torch.Generator().manual_seed(1)
    w_out = torch.randn(B, H, T, D, generator=g, dtype=q.dtype)
    w_state = torch.randn(B, H, N, D, generator=g, dtype=q.dtype)
    u = None if log_u is None else log_u.exp()

    def ours(q, k, v, s0):
        return chunked_triton(q, k, v, chunk_size=chunk, log_u=log_u, state=s0, need_state=True)

    def recurrent(q, k, v, s0):
        return attention.recurrent(q, k, v, log_u=log_u, state=s0, need_state=True)

    def naive(q, k, v, s0):
        return naive_linear_attention(q, k, v, retention=u, state=s0), None

    got = _run(ours, q, k, v, s0, shared_keys, w_out, w_state)
    ref = _run(recurrent, q, k, v, s0, shared_keys, w_out, w_state)
    assert rel_err(got[0], ref[0]) < tol and rel_err(got[1], ref[1]) < tol
    for a, b in zip(got[2], ref[2]):
        assert (a is None) == (b is None) and (a is None or rel_err(a, b) < tol)
    # the output and its gradients against the term-by-term sum of Eq. 4
    got = _run(ours, q, k, v, s0, shared_keys, w_out, torch.zeros_like(w_state))
    ref = _run(naive, q, k, v, s0, shared_keys, w_out, None)
    assert rel_err(got[0], ref[0]) < tol
    for a, b in zip(got[2], ref[2]):
        assert (a is None) == (b is None) and (a is None or rel_err(a, b) < tol)


@pytest.mark.parametrize("case", CASES)
def test_values_and_every_gradient_equal_the_naive_sum_and_the_recurrent_form(chunked_triton, case):
    # fp64 throughout: the forms differ only in summation order, ~1e-15 of the scale
    _compare(chunked_triton, case, 1e-12)


@pytest.mark.slow
@pytest.mark.parametrize("case", SLOW)
def test_several_tiles_of_every_dimension(chunked_triton, case):
    _compare(chunked_triton, case, 1e-12)


# (B, H, T, N, D, chunk, damped, with_state, shared_keys, shared_v): 7 chunks, not a multiple of R = 2 or 4, the
# last one shorter; masked tiles of N and D
STRIDED = [
    (1, 2, 20, 20, 6, 3, True, True, True, True),
    (2, 1, 19, 18, 20, 3, False, False, False, False),  # D = 20: two D-blocks of the key gradients at R > 1
]
# each case at one R in CI (the interpreter takes ~8 s a case), the other two pairs marked slow
STRIDED_RUNS = [(STRIDED[0], 4), (STRIDED[1], 2)]
STRIDED_RUNS += [pytest.param(c, r, marks=pytest.mark.slow) for c, r in ((STRIDED[0], 2), (STRIDED[1], 4))]


@pytest.mark.parametrize("case, stride", STRIDED_RUNS)
def test_a_chunk_state_every_r_chunks_gives_the_same_values_and_gradients(chunked_triton, monkeypatch, case, stride):
    """R = 2, 4 (``BDH_TRITON_STATE_STRIDE``; R = 1, the default, is every other test of this file): the readers
    rebuild the states not kept from the scan's inputs."""
    monkeypatch.setenv("BDH_TRITON_STATE_STRIDE", str(stride))
    # fp64 throughout: a rebuilt state differs from a kept one only in summation order, ~1e-15 of the scale
    _compare(chunked_triton, case, 1e-12)


@pytest.mark.parametrize("reverse", [False, True])
def test_the_scan_keeps_every_r_th_state_only(reverse):
    """With R = 3 the scan writes ceil(NC / 3) states: those of steps 0, 3, 6 of the R = 1 scan (steps count from
    the last chunk in reverse), the same values; the state past the scan is R = 1's."""
    from bdh.model.kernels.triton.chunked import _plan

    scan = interpreted("bdh.model.kernels.triton.chunked", "_scan")
    q, k, v, s0, log_u = _inputs(1, 2, 20, 20, 6, damped=True, with_state=True)
    plan = _plan(q, v, 3)
    vh = v.expand(1, 2, 20, 6)
    every, final = scan(plan, k, vh, s0, log_u, reverse, 1)
    kept, final_kept = scan(plan, k, vh, s0, log_u, reverse, 3)
    steps = torch.tensor([0, 3, 6])
    chunks = plan.NC - 1 - steps if reverse else steps
    assert plan.NC == 7 and kept.shape == (2, 3, 20, 6)
    # the same kernel's same sums in the same order: a tolerance only for the compiler's freedom to fuse them
    assert rel_err(kept, every[:, chunks]) < 1e-14 and rel_err(final_kept, final) < 1e-14


def test_a_bad_state_stride_is_refused_with_one_line(chunked_triton, monkeypatch):
    from bdh.errors import UserError

    q, k, v, _, _ = _inputs(1, 1, 5, 4, 3)
    for bad in (0, -1, 1.5, True):
        with pytest.raises(UserError, match="state_stride must be a positive integer"):
            chunked_triton(q, q, v, chunk_size=2, state_stride=bad)
    monkeypatch.setenv("BDH_TRITON_STATE_STRIDE", "two")
    with pytest.raises(UserError, match="BDH_TRITON_STATE_STRIDE must be a positive integer"):
        chunked_triton(q, q, v, chunk_size=2)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_low_precision_stays_close_to_fp64_like_the_lean_form(chunked_triton, dtype):
    """fp32 and bf16 inputs (bf16 through autocast, as training runs), every sum in fp32: the error against fp64 is
    that of rounding the inputs and a few intermediates (the chunk states, the scores) to the inputs' dtype.

    Measured at this size (4 seeds): fp32 ~1.5e-7 of the largest value for both forms; bf16 ~1e-2 for these kernels
    and ~6e-3 for the lean form, whose mean error is half these kernels' here because Triton's CPU interpreter
    rounds fp32 to bf16 by truncation (half of its conversions differ from round-to-nearest, measured), about twice
    the error of the rounding to nearest that the GPU and torch use. Bounds: 1e-6 (fp32), 3e-2 (bf16) of the
    largest value, and a mean error at most 3x the lean form's (2x from truncation, with a margin)."""
    from bdh.model.kernels.pytorch.chunked_lean import chunked_lean

    B, H, T, N, D = 2, 2, 37, 24, 8
    q, _, v, _, log_u = _inputs(B, H, T, N, D, dtype=torch.float64, damped=True)
    q = q.relu()
    ref = attention.recurrent(q, q, v, log_u=log_u, need_state=True)
    errors = {}
    for name, fn in [("triton", chunked_triton), ("lean", chunked_lean)]:
        x, vv = q.float(), v.float()
        options = {"need_state": True} if name == "triton" else {}
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=dtype == torch.bfloat16):
            out, state = fn(x, x, vv, chunk_size=8, log_u=log_u.float(), **options)
        mean = ((out.double() - ref[0]).abs().mean() / ref[0].abs().mean()).item()
        errors[name] = (rel_err(out.double(), ref[0]), rel_err(state.double(), ref[1]), mean)
    bound = 1e-6 if dtype == torch.float32 else 3e-2
    assert max(errors["triton"][:2]) < bound, errors
    assert errors["triton"][2] <= 3 * errors["lean"][2] + 1e-7, errors


@pytest.mark.parametrize("damping, tol", [(None, 1e-10), (0.9, 1e-6)])
def test_the_model_with_the_triton_kernels_computes_the_parallel_form(chunked_triton, monkeypatch, damping, tol):
    """`choose` swaps the kernels in for the chunked form (forced on the CPU here): the same logits and gradients.

    fp64: undamped, the forms differ only in summation order (1e-10). Damped, the model hands the kernels log u in
    fp32 and the parallel form takes u^(t - tau) in fp32 too, the kernels in fp64: ~1e-7 of the scale apart."""
    from bdh.model.kernels import choice

    monkeypatch.setattr(choice, "use_triton", lambda device: True)
    grads = {}
    for mode in ("parallel", "chunked"):
        model = tiny_model(seed=3, damping=damping).double()
        idx = torch.randint(0, 256, (2, 11), generator=torch.Generator().manual_seed(0))
        chosen = model.kernels(Pass(mode, 0, 11)).choice.attention
        assert chosen == ("chunked-triton" if mode == "chunked" else "shared-keys")
        logits = model(idx, mode=mode)
        logits.pow(2).mean().backward()
        grads[mode] = (logits.detach(), [p.grad for p in model.parameters()])
    assert rel_err(grads["chunked"][0], grads["parallel"][0]) < tol
    for a, b in zip(grads["chunked"][1], grads["parallel"][1]):
        assert rel_err(a, b) < tol


def test_choose_takes_the_kernels_on_cuda_only_and_when_not_turned_off(monkeypatch):
    def chosen(device: str, mode: str = "chunked") -> str:
        choice = choose(
            Pass(mode, 0, 16),
            positional="rope",
            log_u=None,
            causal=True,
            chunk_size=8,
            dropout=0.0,
            dropout_rng="auto",
            training=False,
            autograd=True,
            device=torch.device(device),
        )
        return choice.attention

    assert use_triton(torch.device("cuda")) and not use_triton(torch.device("cpu"))
    assert chosen("cuda") == "chunked-triton" and chosen("cpu") == "chunked-lean"
    assert chosen("cuda", "parallel") == "shared-keys" and chosen("cuda", "recurrent") == "recurrent"
    monkeypatch.setenv("BDH_TRITON", "0")
    assert chosen("cuda") == "chunked-lean"


def test_bad_input_is_refused_with_one_line(monkeypatch):
    from bdh.model.kernels.triton.chunked import chunked_triton

    q, k, v, s0, _ = _inputs(1, 2, 5, 8, 3, dtype=torch.float32, with_state=True)
    monkeypatch.setenv("TRITON_INTERPRET", "0")
    with pytest.raises(ValueError, match="need CUDA tensors"):
        chunked_triton(q, k, v, chunk_size=4)
    monkeypatch.setenv("TRITON_INTERPRET", "1")
    with pytest.raises(ValueError, match="must share a dtype"):
        chunked_triton(q, k, v.double(), chunk_size=4)
    with pytest.raises(ValueError, match="chunk_size must be a positive integer"):
        chunked_triton(q, k, v, chunk_size=0)
    with pytest.raises(ValueError, match="state must be"):
        chunked_triton(q, k, v, chunk_size=4, state=s0[:, :, :4])


def test_the_package_imports_without_triton():
    """Nothing imports Triton until a kernel runs: the package works where it is not installed."""
    import subprocess
    import sys

    code = (
        "import sys; sys.modules['triton'] = None\n"  # any import of triton now fails
        "import torch, bdh\n"
        "m = bdh.BDH(bdh.BDHConfig(n_layer=1, n_embd=16, n_head=2, n_neurons=64))\n"
        "m(torch.zeros(1, 9, dtype=torch.long), mode='chunked').sum().backward()\n"
        "from bdh.model.kernels.triton import chunked as chunked_triton\n"
        "print('ok')\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0 and out.stdout.strip() == "ok", out.stderr[-2000:]


# Compiles every kernel the way a launch on an H100 / H200 would (sm_90, the launch's warps and the plan's
# constants), in a process of its own without the interpreter; prints shared memory and registers per kernel.
AHEAD_OF_TIME = r"""
import os, subprocess, sys, tempfile
os.environ.pop("TRITON_INTERPRET", None)
import torch, triton, triton.language as tl
from triton.backends.compiler import GPUTarget
from triton.compiler import ASTSource
from bdh.model.kernels.triton import chunked_jit as K
from bdh.model.kernels.triton.chunked import NUM_WARPS, _plan

POINTER = {torch.bfloat16: "*bf16", torch.float32: "*fp32", torch.float64: "*fp64"}
TOOLS = os.path.join(os.path.dirname(triton.__file__), "backends", "nvidia", "bin")
for name in sys.argv[1:]:
    dtype = getattr(torch, name)
    q = torch.empty(2, 4, 2048, 8192, dtype=dtype, device="meta")
    plan = _plan(q, torch.empty(2, 1, 2048, 256, dtype=dtype, device="meta"), 64)
    x, acc = POINTER[dtype], POINTER[plan.acc]
    flags = [  # today's kernels (a chunk state kept at every chunk: STRIDE = 1; tests/model/test_triton_sm90.py: > 1)
        (K.scan_kernel, dict(init_ptr=acc, final_ptr=acc), dict(REVERSE=False, HAS_INIT=True, HAS_U=True)),
        (K.scan_kernel, dict(init_ptr=acc, final_ptr=acc), dict(REVERSE=True, HAS_INIT=False, HAS_U=False)),
        (K.read_kernel, dict(), dict(BACKWARD=False, HAS_U=True)),
        (K.read_kernel, dict(out_ptr=acc), dict(BACKWARD=True, HAS_U=True)),
        (K.grad_keys_kernel, dict(), dict(SHARED=True, HAS_U=True)),
        (K.grad_keys_kernel, dict(), dict(SHARED=False, HAS_U=True)),
    ]
    flags = [(fn, pointers, {**own, "STRIDE": 1}) for fn, pointers, own in flags]
    for fn, pointers, own in flags:
        constants = {**plan.constants(), **own}
        names = fn.arg_names
        signature = {
            n: "constexpr" if n in constants else pointers.get(n, acc if n == "log_u_ptr" else x)
            if n.endswith("_ptr") else "i32"
            for n in names
        }
        src = ASTSource(fn=fn, signature=signature, constexprs={(names.index(n),): v for n, v in constants.items()})
        kernel = triton.compile(src, target=GPUTarget("cuda", 90, 32), options={"num_warps": NUM_WARPS})
        assert kernel.metadata.shared <= 227 * 1024, (fn.__name__, kernel.metadata.shared)  # Hopper's maximum
        with tempfile.NamedTemporaryFile(suffix=".cubin") as f:
            f.write(kernel.asm["cubin"])
            f.flush()
            dump = [os.path.join(TOOLS, "cuobjdump"), "-res-usage", f.name]
            usage = subprocess.run(dump, capture_output=True, text=True)
        regs = " ".join(w for line in usage.stdout.splitlines() for w in line.split() if w.startswith(("REG", "STACK")))
        print(name, fn.__name__, own, f"shared {kernel.metadata.shared} B", regs)
print("compiled")
"""


def _compile_ahead_of_time(*dtypes: str) -> str:
    return compile_without_interpreter(AHEAD_OF_TIME, *dtypes)


def test_the_kernels_compile_for_hopper_without_a_gpu():
    """Every kernel of a bf16 training step (forward and backward, BDH's shared keys and separate ones) compiles for
    sm_90 as a launch there would, within Hopper's shared memory. The interpreter does not compile: this does."""
    _compile_ahead_of_time("bfloat16")


@pytest.mark.slow
def test_the_kernels_compile_for_hopper_in_fp32_and_fp64():
    """The same for fp32 and fp64 inputs (slow: twice the compile time; on a GPU, tests/cuda runs the fp32 kernels)."""
    _compile_ahead_of_time("float32", "float64")
