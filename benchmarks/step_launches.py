"""Kernels a layer in one generation step at batch 1 (`bdh.model.decoder.StateDecoder`'s step, the one its CUDA graph
replays): the aten calls that run device work and the Triton launches, today's kernels against CUDA's choice with
Triton (issue 58, point 5). Counted on the CPU: CUDA's choice is forced and its Triton kernels run in Triton's
interpreter; the count is of the calls, which the sizes do not change.

    python benchmarks/step_launches.py                  # RoPE (the default), damped and not
    python benchmarks/step_launches.py --positional none

A row: the path, the aten calls of one step that are not views or allocations (each launches a kernel on CUDA), the
Triton launches, and both per layer once the step's own (the embedding, the RoPE tables, the readout, sampling: the
step's calls at 0 layers) are taken off.
"""

from __future__ import annotations

import os
import sys
from collections import Counter

import torch
from _shared import Parser, run
from torch.utils._python_dispatch import TorchDispatchMode

#: aten calls that launch no kernel: views, reshapes of metadata, allocations
NO_KERNEL = {
    "view", "_unsafe_view", "expand", "t", "transpose", "permute", "unsqueeze", "squeeze", "slice", "select",
    "detach", "alias", "as_strided", "empty", "new_empty", "empty_like", "empty_strided", "lift_fresh", "split",
    "view_as_real", "view_as_complex", "_reshape_alias", "unbind", "chunk", "reshape",
}  # fmt: skip


#: the paths counted: the kernels chosen without Triton; CUDA's with Triton without the one-token encoder and
#: read-in (`triton.encode_step`, `triton.read_in_step`: the state step's and the gate's kernels only); with the
#: encoder; with both
PATHS = {
    "today": "without Triton (BDH_TRITON=0, the CPU)",
    "step-only": "Triton: the state step and the gate",
    "encoder": "Triton: and the encoder with RoPE",
    "triton": "Triton: and the gate with E y",
}
#: the one-token kernels each path turns off (their ``takes`` refusing)
OFF = {"today": (), "step-only": ("encode_step", "read_in_step"), "encoder": ("read_in_step",), "triton": ()}


class _Calls(TorchDispatchMode):
    """The aten calls made while active, by name, outside Triton's launches (the interpreter's own tensor work)."""

    def __init__(self):
        super().__init__()
        self.calls: Counter = Counter()
        self.paused = False

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        name = func.overloadpacket.__name__.rstrip("_")
        if not self.paused and name not in NO_KERNEL:
            self.calls[name] += 1
        return func(*args, **(kwargs or {}))


def count(n_layer: int, path: str, positional: str, damped: bool) -> tuple[Counter, list[str]]:
    """(aten calls by name, Triton launches) of one decoder step at batch 1 of a small model of ``n_layer`` layers
    on ``path`` (`PATHS`)."""
    from triton.runtime.interpreter import InterpretedFunction

    import bdh.model.kernels.choice as choice
    import bdh.model.kernels.triton.encode_step as encode_step
    import bdh.model.kernels.triton.read_in_step as read_in_step
    from bdh.model import BDH, BDHConfig

    torch.manual_seed(0)
    damping = dict(damping=(0.9, 0.8)) if damped else {}
    config = BDHConfig(n_layer=n_layer, n_embd=16, n_head=2, n_neurons=64, positional=positional, **damping)
    original, launch, launches, mode = choice.use_triton, InterpretedFunction.run, [], _Calls()
    modules = {"encode_step": encode_step, "read_in_step": read_in_step}
    takes = {name: module.takes for name, module in modules.items()}

    def counted(self, *args, **kwargs):
        launches.append(self.fn.__name__)
        mode.paused = True  # the interpreter's own tensor work is no kernel of the step
        try:
            return launch(self, *args, **kwargs)
        finally:
            mode.paused = False

    choice.use_triton = lambda device: path != "today"
    for name in OFF[path]:
        modules[name].takes = lambda *args: False
    InterpretedFunction.run = counted
    try:
        dec = BDH(config).decoder(1, temperature=0)
        dec.prefill(torch.tensor([[1, 2, 3]]))
        dec.step()  # a first step outside the count (as the graph's warm-up)
        launches.clear()
        with torch.no_grad(), mode:
            dec.step()
    finally:
        choice.use_triton, InterpretedFunction.run = original, launch
        for name, module in modules.items():
            module.takes = takes[name]
    return mode.calls, launches


def main(argv: list[str] | None = None) -> int:
    parser = Parser(description=__doc__.splitlines()[0])
    parser.add_argument("--positional", choices=("rope", "rope-standard", "none"), default="rope")
    parser.add_argument("--ops", action="store_true", help="and a layer's calls by name")
    args = parser.parse_args(argv)
    if "triton" in sys.modules and not os.environ.get("TRITON_INTERPRET"):
        parser.error("the count needs Triton's interpreter, set before Triton is imported (TRITON_INTERPRET=1)")
    os.environ.setdefault("TRITON_INTERPRET", "1")
    os.environ["BDH_NATIVE"] = "0"  # the CPU's compiled loops off: CUDA has none, its PyTorch path is the count
    print(f"| path ({args.positional}) | damped | aten calls a step (2 layers) | Triton launches | aten a layer | "
          "Triton a layer | kernels a layer |")  # fmt: skip
    print("|---|---|---:|---:|---:|---:|---:|")
    for damped in (False, True):
        for path, name in PATHS.items():
            (a1, t1), (a2, t2) = count(1, path, args.positional, damped), count(2, path, args.positional, damped)
            aten, launches = sum(a2.values()) - sum(a1.values()), len(t2) - len(t1)
            row = f"| {name} | {damped} | {sum(a2.values())} | {len(t2)} | {aten} | {launches} | {aten + launches} |"
            print(row, flush=True)
            if args.ops:
                print(f"|  | a layer: {dict(a2 - a1)} {t2[len(t1) :]} |", flush=True)
    return 0


if __name__ == "__main__":
    run(main)
