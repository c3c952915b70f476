"""Everything the first GPU run has to measure, in one command, into one folder, within 10 minutes.

    python benchmarks/gpu_all.py PATH/TO/pathwaycom-bdh --out gpu-run [--tar]      # on a CUDA machine
    python benchmarks/gpu_all.py PATH/TO/pathwaycom-bdh --device cpu --quick --out DIR   # a check of the script

Each step is a process of its own with a time limit (`LIMITS`); a step that fails or runs out of time is
recorded and the next one runs. Every child process reads this checkout's ``src`` first on its import path, so
the measurements run this tree's code even where the install fails. The steps, and what they write into the
output folder:

===========  ========================================================  ===========================================
step         what runs                                                 files
===========  ========================================================  ===========================================
environment  (here) Python, torch, CUDA, Triton, GPU, driver, commit   ``environment.txt``
install      ``pip install --no-deps --no-build-isolation -e .``       ``install.log``
cuda-tests   ``python -m pytest -m cuda`` (every GPU test, except the  ``cuda_tests.log``, ``cuda_tests.xml``
             one that runs gpu.py --quick: the steps below run it)     (JUnit)
training     ``benchmarks/gpu.py OFFICIAL --part training``            ``training.log`` (tables), ``training.json``
fused-       ``benchmarks/fused_kernels.py``: the encoder's and the    ``fused_kernels.log`` (its table)
kernels      gated read-in's Triton matmuls against today's step
delta-       ``benchmarks/delta_kernels.py``: the delta rule's Triton  ``delta_kernels.log`` (its table)
kernels      kernels against its PyTorch form and the plain rule's
             (also with a chunk state every 2 and 4 chunks)
step-kernel  ``benchmarks/step_kernel.py``: the generation step's      ``step_kernel.log`` (its table)
             state read and write in one Triton kernel against
             PyTorch's, batches 1, 8, 64, CUDA graphs
profile      ``benchmarks/gpu_profile.py``: one bf16 training step at  ``profile_T512.json.gz`` (Chrome trace),
             T = 512 and 2048 at the paper's size, torch.profiler      ``profile_T512.txt`` (top operators), the
                                                                       same for 2048, ``profile.log``
generation   ``benchmarks/gpu.py OFFICIAL --part generation``          ``generation.log``, ``generation.json``
summary      (here) each step's status and seconds, the test counts,   ``summary.md``
             the tables of training, the kernels and generation
===========  ========================================================  ===========================================

The steps run in this order, their rank: the GPU tests first (a kernel that is wrong makes its timing moot), then
the headline table, then the fused, delta-rule and generation-step kernels (never yet run on a GPU), then the
profile and generation (both measured once before). The kernel steps need Triton: without it they are recorded as
skipped.

``--tar [FILE]`` also packs the folder into FILE (default ``OUT.tar.gz``): one file to copy off the machine.
Without an official checkout (none given, or no ``bdh.py`` in it) the official rows are left out and the summary
says so.
``--device cpu --quick`` runs the same steps at tiny sizes on the CPU (the install is skipped there: a check of
the script leaves the environment alone; the GPU tests are collected and skipped); tests/test_gpu_benchmark.py
runs it in CI.

``--plan science`` runs, with the same machinery (a process and a time limit a step, one folder, ``summary.md``,
``--tar``), the package's questions at the paper's size instead (`benchmarks/gpu_science.py`: Fig. 7 against a
GPT, one fact to 2^20, the state on text, the ``torch.compile`` rows), each step's answer in the summary;
``--plan science --device cpu --quick`` runs every one of them at tiny sizes (tests/test_gpu_science.py).
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import platform
import signal
import subprocess
import sys
import tarfile
import time
import xml.etree.ElementTree as ET
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
BENCHMARKS = ROOT / "benchmarks"

#: seconds each step may take, in the steps' order (their rank): on the GPU (540 s in all, inside the 10 minutes;
#: the first GPU run took install 7 s, cuda-tests 99 s, training 41 s, profile 19 s, generation 26 s; the 30 s
#: delta-kernels gained for its rows of the chunk-state stride R = 2, 4 came from training's 110), and --quick
LIMITS = {
    "install": 30,
    "cuda-tests": 160,
    "training": 80,
    "fused-kernels": 50,
    "delta-kernels": 90,
    "step-kernel": 25,
    "profile": 50,
    "generation": 55,
}
QUICK_LIMITS = dict(LIMITS, install=40, training=90, profile=60, generation=60)
QUICK_LIMITS.update({"cuda-tests": 180, "fused-kernels": 120, "delta-kernels": 120, "step-kernel": 120})
#: the steps that run Triton kernels (recorded as skipped where Triton is not installed)
TRITON_STEPS = ("fused-kernels", "delta-kernels", "step-kernel")
#: seconds each step of ``--plan science --quick`` may take (the GPU limits are the plan's own, `gpu_science.PLAN`)
QUICK_SCIENCE_LIMIT = 240
#: the GPU test that runs benchmarks/gpu.py --quick itself (the training and generation steps run gpu.py)
SELF_TEST = "tests/cuda/test_cuda.py::test_the_gpu_benchmark_runs_in_quick_mode"


@dataclass(frozen=True)
class Step:
    """One step: its name, the command (run in the checkout's root), its time limit and its log file."""

    name: str
    argv: list[str]
    limit: float
    log: str


def science():
    """benchmarks/gpu_science.py, the science plan."""
    return _sibling("gpu_science")


def _sibling(name: str):
    """benchmarks/NAME.py as a module (loaded from this folder, however this file was loaded; the folder goes on the
    import path, as when NAME.py runs as a file, for the modules it imports from it)."""
    if str(BENCHMARKS) not in sys.path:
        sys.path.append(str(BENCHMARKS))
    spec = importlib.util.spec_from_file_location(f"bdh_{name}", BENCHMARKS / f"{name}.py")
    module = sys.modules.get(spec.name)
    if module is None:
        module = importlib.util.module_from_spec(spec)
        sys.modules[spec.name] = module  # its dataclasses look their module up there
        spec.loader.exec_module(module)
    return module


def science_steps(args: argparse.Namespace, official: Path | None) -> list[Step]:
    """The steps of ``--plan science``, in their rank order (`gpu_science.PLAN`)."""
    plan = science()
    out = []
    for s in plan.PLAN:
        argv = plan.argv(s, sys.executable, args.out, args.quick, args.device, official)
        out.append(Step(s.name, argv, QUICK_SCIENCE_LIMIT if args.quick else s.limit, f"{s.name}.log"))
    return out


def steps(args: argparse.Namespace, official: Path | None) -> list[Step]:
    """The steps of a run, in order."""
    if args.plan == "science":
        return science_steps(args, official)
    py, out = sys.executable, args.out
    limits = QUICK_LIMITS if args.quick else LIMITS
    size = ["--device", args.device] + (["--quick"] if args.quick else [])
    checkout = [] if official is None else [str(official)]
    # -v: one line per test as it ends, so a step stopped at its limit still shows what passed and what failed
    tests = [py, "-m", "pytest", "-m", "cuda", "-v", "-rfE", "--durations=15", "-p", "no:cacheprovider"]
    tests += ["--deselect", SELF_TEST, "--junitxml", str(out / "cuda_tests.xml")]
    if importlib.util.find_spec("pytest_timeout") is not None:
        tests.append("--timeout=90")  # one hung test does not take the whole step
    tests += ["tests/cuda"] if args.device == "cpu" else []
    gpu = [py, str(BENCHMARKS / "gpu.py"), *checkout, *size]
    pip = [py, "-m", "pip", "install", "--no-deps", "--no-build-isolation", "-e", str(ROOT)]
    table = {
        "install": (pip, "install.log"),
        "cuda-tests": (tests, "cuda_tests.log"),
        "training": ([*gpu, "--part", "training", "--out", str(out / "training.json")], "training.log"),
        "fused-kernels": ([py, str(BENCHMARKS / "fused_kernels.py"), *kernel_size(args)], "fused_kernels.log"),
        "delta-kernels": ([py, str(BENCHMARKS / "delta_kernels.py"), *kernel_size(args)], "delta_kernels.log"),
        "step-kernel": ([py, str(BENCHMARKS / "step_kernel.py"), *step_size(args)], "step_kernel.log"),
        "profile": ([py, str(BENCHMARKS / "gpu_profile.py"), "--out", str(out), *size], "profile.log"),
        "generation": ([*gpu, "--part", "generation", "--out", str(out / "generation.json")], "generation.log"),
    }
    return [Step(name, table[name][0], limits[name], table[name][1]) for name in LIMITS]


def kernel_size(args: argparse.Namespace) -> list[str]:
    """The kernel benchmarks' size: paper size on the GPU, a quarter of its tokens with --quick there, and their own
    --quick (tiny, Triton's interpreter) on the CPU."""
    if args.device == "cpu":
        return ["--quick", "--repeats", "1"]
    return ["--batch", "2", "--length", "2048", "--repeats", "3"] if args.quick else []


def step_size(args: argparse.Namespace) -> list[str]:
    """The generation step's benchmark: batches 1, 8, 64 on the GPU (batch 1 alone with --quick there), tiny on the
    CPU."""
    if args.device == "cpu":
        return ["--quick"]
    return ["--batches", "1", "--repeats", "3"] if args.quick else []


def child_env() -> dict[str, str]:
    """The environment of every step: this checkout's ``src`` first on the import path, unbuffered output."""
    env = dict(os.environ, PYTHONUNBUFFERED="1")
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(ROOT / "src"), env.get("PYTHONPATH", "")) if p)
    return env


def run_step(step: Step, out: Path) -> dict:
    """Run ``step`` with its output in its log; stop it (and every process it started) at its time limit."""
    t0 = time.monotonic()
    with open(out / step.log, "w") as log:
        log.write("$ " + " ".join(step.argv) + "\n")
        log.flush()
        proc = subprocess.Popen(
            step.argv, cwd=ROOT, env=child_env(), stdout=log, stderr=subprocess.STDOUT, start_new_session=True
        )
        try:
            rc = proc.wait(timeout=step.limit)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)  # its own process group: the step and its children, nothing else
            proc.wait()
            rc = None
    if rc is None:
        status = f"timed out after {step.limit:.0f} s"
    elif rc == 0:
        status = "ok"
    elif rc == 5 and step.name == "cuda-tests":
        status = "no tests ran"
    else:
        status = f"failed (exit status {rc})"
    return {"step": step.name, "status": status, "seconds": time.monotonic() - t0, "log": step.log}


def environment(args: argparse.Namespace, official: Path | None) -> str:
    """Python, torch, CUDA, Triton, the GPU and its driver, the commit, the command: for environment.txt."""
    import torch

    lines = [
        f"command: {' '.join([sys.executable, *sys.argv])}",
        f"date (UTC): {time.strftime('%Y-%m-%d %H:%M:%S', time.gmtime())}",
        f"python: {sys.version.split()[0]} ({platform.platform()})",
        f"torch: {torch.__version__} (CUDA {torch.version.cuda})",
        f"triton: {_version('triton')}",
        f"official checkout: {official if official is not None else 'none (official rows left out)'}",
        f"commit: {_output(['git', '-C', str(ROOT), 'rev-parse', 'HEAD']) or 'unknown'}",
    ]
    if torch.cuda.is_available():
        props = torch.cuda.get_device_properties(0)
        lines.append(f"GPU: {props.name}, {props.total_memory / 2**30:.0f} GiB, {props.multi_processor_count} SMs")
    smi = _output(["nvidia-smi", "--query-gpu=name,driver_version,memory.total", "--format=csv,noheader"])
    lines.append(f"nvidia-smi: {smi or 'not available'}")
    lines.append(f"CPU threads: {os.cpu_count()}; device asked for: {args.device}{' (--quick)' if args.quick else ''}")
    return "\n".join(lines) + "\n"


def _version(package: str) -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version(package)
    except PackageNotFoundError:
        return "not installed"


def _output(argv: list[str]) -> str:
    """The stripped output of a small command, or '' where it cannot run."""
    try:
        return subprocess.run(argv, capture_output=True, text=True, timeout=30).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return ""


def test_counts(xml: Path) -> str:
    """'N tests: P passed, F failed, E errors, S skipped' and the failing tests, from a JUnit file."""
    if not xml.is_file():
        return "no JUnit file (the test step did not finish)"
    suites = ET.parse(xml).getroot()
    suite = suites if suites.tag == "testsuite" else suites.find("testsuite")
    n, failed, errors, skipped = (int(suite.get(k, 0)) for k in ("tests", "failures", "errors", "skipped"))
    bad = [
        f"{case.get('classname')}::{case.get('name')}"
        for case in suite.iter("testcase")
        if case.find("failure") is not None or case.find("error") is not None
    ]
    text = f"{n} tests: {n - failed - errors - skipped} passed, {failed} failed, {errors} errors, {skipped} skipped"
    return text + "".join(f"\n  - {b}" for b in bad)


def summary(args: argparse.Namespace, official: Path | None, results: list[dict]) -> str:
    """summary.md: what ran, how it ended, how long it took, and the test counts; the tables are in the logs.
    With ``--plan science``: each step's question and answer instead."""
    lines = [
        "# GPU run" + (" (science plan)" if args.plan == "science" else ""),
        "",
        f"Command: `{' '.join(['python', *sys.argv])}`; the environment is in `environment.txt`.",
        "" if official is not None else "No official checkout: the official rows are left out.",
        "",
        "| step | status | seconds | log |",
        "|---|---|---:|---|",
        *(f"| {r['step']} | {r['status']} | {r['seconds']:.0f} | `{r['log']}` |" for r in results),
        "",
    ]
    if args.plan == "science":
        return "\n".join(lines + science().answers(args.out, results)) + "\n"
    lines += [
        "GPU tests: " + test_counts(args.out / "cuda_tests.xml"),
        "",
        "The tables below are copied from the logs named in their headings (the training and generation numbers are",
        "also in their JSON files); the profiles are in `profile_T*.txt` (top operators) and `profile_T*.json.gz`",
        "(Chrome traces).",
    ]
    for log in ("training.log", "fused_kernels.log", "delta_kernels.log", "step_kernel.log", "generation.log"):
        lines += ["", f"## {log}", "", *tables(args.out / log)]
    lines += ["", "## The roofline's prediction (benchmarks/roofline.py) against the training table", ""]
    training = args.out / "training.json"
    if training.is_file():
        lines += _sibling("roofline").versus(json.loads(training.read_text()))
    else:
        lines.append("(no training.json: the training step did not finish)")
    return "\n".join(lines) + "\n"


def tables(log: Path) -> list[str]:
    """What a benchmark printed (its header, its tables): the log without the command and the progress lines;
    a note instead where it printed no table."""
    text = log.read_text().splitlines() if log.is_file() else []
    if not any(line.startswith("|") for line in text):
        return ["(no table: see the log)"]
    return [line for line in text if line.strip() and not line.startswith(("$ ", "  measured"))]


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("official", nargs="?", type=Path, help="path of a pathwaycom/bdh checkout (omit: no official rows)")
    p.add_argument("--out", type=Path, required=True, help="output folder (must not exist, or be empty)")
    p.add_argument("--device", choices=["cuda", "cpu"], default="cuda", help="cpu: with --quick, a check of the script")
    p.add_argument("--quick", action="store_true", help="gpu.py --quick (on the CPU: tiny sizes)")
    p.add_argument("--plan", choices=["perf", "science"], default="perf", help="the benchmarks, or the science plan")
    names = sorted(set(LIMITS) | {s.name for s in science().PLAN})
    p.add_argument("--skip", nargs="+", default=[], choices=names, help="steps to leave out")
    p.add_argument("--tar", nargs="?", const="", type=str, help="also pack the folder into this file (OUT.tar.gz)")
    args = p.parse_args(argv)
    args.out = args.out.resolve()  # the steps run in the checkout's root
    if args.device == "cpu" and not args.quick:
        print("error: --device cpu runs only with --quick (a check of the script, not a measurement)", file=sys.stderr)
        return 2
    if args.out.exists() and (not args.out.is_dir() or any(args.out.iterdir())):
        print(f"error: {args.out} exists and is not an empty folder", file=sys.stderr)
        return 2
    official = args.official.resolve() if args.official is not None and (args.official / "bdh.py").is_file() else None
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "environment.txt").write_text(environment(args, official))
    skip = set(args.skip) | ({"install"} if args.device == "cpu" else set())
    results = []
    no_triton = args.plan == "perf" and importlib.util.find_spec("triton") is None
    for step in steps(args, official):
        if step.name in skip or (no_triton and step.name in TRITON_STEPS):
            status = "skipped" if step.name in skip else "skipped (no Triton)"
            results.append({"step": step.name, "status": status, "seconds": 0.0, "log": "-"})
            continue
        print(f"gpu_all: {step.name} (at most {step.limit:.0f} s) ...", file=sys.stderr, flush=True)
        results.append(run_step(step, args.out))
        print(f"gpu_all: {step.name}: {results[-1]['status']}", file=sys.stderr, flush=True)
    (args.out / "summary.md").write_text(summary(args, official, results))
    print((args.out / "summary.md").read_text())
    if args.tar is not None:
        with tarfile.open(args.tar or f"{args.out}.tar.gz", "w:gz") as tar:
            tar.add(args.out, arcname=args.out.name)
    return 0


if __name__ == "__main__":
    sys.exit(main())
