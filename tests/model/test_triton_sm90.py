"""The delta rule's, the gate's and the generation step's Triton kernels (`bdh.model.kernels.triton.delta_jit`,
`gate_jit`, `step_jit`, `encode_step_jit`, `read_in_step_jit`) compiled the way a
launch on an H100 / H200 would (sm_90) at paper size (N = 8,192, D = 256, chunks of 64, bf16), in a process of its own
without the interpreter, within Hopper's shared memory, and ptxas (-v) reporting no register spilled. The
interpreter does not compile: this does. (The chunked attention's kernels with a chunk state every 2 or 4 chunks
too; at every chunk, R = 1: tests/model/test_chunked_triton.py.)"""

import pytest

from .helpers import compile_without_interpreter

pytestmark = pytest.mark.extra  # the gpu extra
pytest.importorskip("triton", reason="Triton (the gpu extra) is not installed")

AHEAD_OF_TIME = r"""
import os, re, subprocess, sys, tempfile
os.environ.pop("TRITON_INTERPRET", None)
import torch, triton, triton.language as tl
from triton.backends.compiler import GPUTarget
from triton.backends.nvidia.compiler import get_ptxas
from triton.compiler import ASTSource
from bdh.model.kernels.triton import chunked_jit as A, delta_jit as K, gate_jit as G, step_jit as S
from bdh.model.kernels.triton import encode_step_jit as E, read_in_step_jit as R
from bdh.model.kernels.triton.chunked import NUM_WARPS, _plan as attention_plan, grad_keys_constants
from bdh.model.kernels.triton.delta import _plan
from bdh.model.kernels.triton import encode_step, gate, read_in_step, step

POINTER = {torch.bfloat16: "*bf16", torch.float32: "*fp32", torch.float64: "*fp64"}
LOW = {"q_ptr", "k_ptr", "v_ptr", "out_ptr", "dq_ptr", "dk_ptr"}  # in the inputs' dtype; every other tensor in ACC
STEP_LOW = {"q_ptr", "k_ptr", "v_ptr"}  # the generation step: the state, its partial reads and u in fp32
ENCODE_LOW = {"v_ptr", "w_ptr", "x_ptr", "xr_ptr"}  # the generation step's encoder: the RoPE tables in fp32
READ_IN_LOW = {"z_ptr", "x_ptr"}  # the generation step's read-in: E fp32 (autocast's weight), its partial sums fp32
OWN_LOW = {"delta_jit": LOW, "step_jit": STEP_LOW, "encode_step_jit": ENCODE_LOW, "read_in_step_jit": READ_IN_LOW}
PTXAS = get_ptxas(90).path  # the ptxas Triton compiles sm_90 with (run below with its register allocation flag)
spilled = []
STRIDES = [int(r) for r in sys.argv[2:]]  # the chunked attention's chunk-state strides R to compile (instead)
for name in sys.argv[1:2]:
    dtype = getattr(torch, name)
    plan = _plan(torch.empty(2, 4, 2048, 8192, dtype=dtype, device="meta"),
                 torch.empty(2, 1, 2048, 256, dtype=dtype, device="meta"), 64)
    x, acc = POINTER[dtype], POINTER[plan.acc]
    drop, p = dict(BLOCK=gate.BLOCK, ACC=tl.float32, DROP=True), {"p": "fp32"}
    # the generation step's encoder at its largest tile (a batch of 64 or more; batch 1 takes 16 rows)
    encoder = encode_step._plan(dtype, 64, 4096, 256, encode_step.TILES).constants()
    # the chunked attention's kernels with a chunk state every R chunks (R = 1: tests/model/test_chunked_triton.py),
    # at their own plan's tiles, damped, BDH's shared keys; the carried states and log u in fp32
    a_plan = attention_plan(torch.empty(2, 4, 2048, 8192, dtype=dtype, device="meta"),
                            torch.empty(2, 1, 2048, 256, dtype=dtype, device="meta"), 64)
    a = dict(a_plan.constants(), HAS_U=True)
    wide = {"init_ptr": acc, "final_ptr": acc, "log_u_ptr": acc}
    strided = [
        entry
        for R in STRIDES
        for entry in [
            (A.scan_kernel, dict(a, REVERSE=False, HAS_INIT=True, STRIDE=R), wide, NUM_WARPS),
            (A.scan_kernel, dict(a, REVERSE=True, HAS_INIT=False, STRIDE=R), wide, NUM_WARPS),
            (A.read_kernel, dict(a, BACKWARD=False, STRIDE=R), wide, NUM_WARPS),
            (A.read_kernel, dict(a, BACKWARD=True, STRIDE=R), {**wide, "out_ptr": acc}, NUM_WARPS),
            (A.grad_keys_kernel, dict(a, **grad_keys_constants(a_plan, R), SHARED=True, STRIDE=R), wide, NUM_WARPS),
        ]
    ]
    kernels = [
        (K.gram_kernel, {}, {}, NUM_WARPS),
        (K.scan_kernel, dict(HAS_INIT=True, STORE_ALL=False), {}, NUM_WARPS),
        (K.scan_kernel, dict(HAS_INIT=False, STORE_ALL=True), {}, NUM_WARPS),
        (K.grad_scan_kernel, dict(HAS_FINAL=True), {}, NUM_WARPS),
        (K.grad_keys_kernel, {}, {}, NUM_WARPS),
        (G.gate_kernel, drop, p, gate.NUM_WARPS),
        (G.gate_backward_kernel, drop, p, gate.NUM_WARPS),
        (S.step_kernel, dict(SHARED=True, HAS_U=True, BN=step.BN, BD=64), {}, step.NUM_WARPS),
        (E.encode_step_kernel, encoder, {}, encode_step.NUM_WARPS),
        (R.read_in_step_kernel, dict(BK=read_in_step.BK, BD=64, ACC=tl.float32), {}, read_in_step.NUM_WARPS),
    ]
    kernels = strided or kernels  # with strides given, the chunked attention's kernels only
    for fn, own, scalars, warps in kernels:
        names = fn.arg_names
        constants = {n: v for n, v in {**plan.constants(), **own}.items() if n in names}
        low = OWN_LOW.get(fn.__module__.rsplit(".", 1)[-1])
        low = set(n for n in names if n.endswith("_ptr")) if low is None else low
        pointer = {n: x if n in low else acc for n in names if n.endswith("_ptr")}
        signature = {n: "constexpr" if n in constants else scalars.get(n, pointer.get(n, "i32")) for n in names}
        src = ASTSource(fn=fn, signature=signature, constexprs={(names.index(n),): v for n, v in constants.items()})
        kernel = triton.compile(src, target=GPUTarget("cuda", 90, 32), options={"num_warps": warps})
        assert kernel.metadata.shared <= 227 * 1024, (fn.__name__, kernel.metadata.shared)  # Hopper's maximum
        ptx = kernel.asm["ptx"]
        arch = re.search(r"\.target\s+(sm_\w+)", ptx).group(1)
        with tempfile.NamedTemporaryFile("w", suffix=".ptx") as f:
            f.write(ptx)
            f.flush()
            command = [PTXAS, "-v", "--regAllocOptLevel=2", f"--gpu-name={arch}", f.name, "-o", f.name + ".cubin"]
            log = subprocess.run(command, capture_output=True, text=True, check=True).stderr
            os.remove(f.name + ".cubin")
        spills = [int(b) for b in re.findall(r"(\d+) bytes spill (?:stores|loads)", log)]
        regs = re.findall(r"Used (\d+) registers", log)
        print(name, fn.__name__, own, f"shared {kernel.metadata.shared} B", "registers", regs, "spills", spills)
        spilled += [(fn.__name__, own, log)] if not spills or any(spills) else []
assert not spilled, spilled
print("compiled")
"""


def test_the_kernels_compile_for_hopper_without_spilling():
    """Every kernel of a bf16 training step (the delta rule forward and backward, the gate with dropout), and the
    generation step's (bf16 queries, fp32 state), its encoder with RoPE (bf16, fp32 tables) and its gated read-in
    (bf16 z and x, fp32 E)."""
    print(compile_without_interpreter(AHEAD_OF_TIME, "bfloat16"))


@pytest.mark.parametrize("stride", ["2", pytest.param("4", marks=pytest.mark.slow)])  # ~30 s a stride on 2 cores
def test_the_attention_kernels_with_a_chunk_state_every_r_chunks_compile_for_hopper_without_spilling(stride):
    """The chunked attention's scans, reads and key gradients with a chunk state kept every 2 or 4 chunks
    (`bdh.model.kernels.triton.chunked`, ``BDH_TRITON_STATE_STRIDE``): bf16, paper size, BDH's shared keys, damped."""
    print(compile_without_interpreter(AHEAD_OF_TIME, "bfloat16", stride))
