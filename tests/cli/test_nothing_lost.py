"""Nothing lost, part two (issue 30): one writer per folder, every load verified, damaged files refused or
repaired, advice that works when followed, bounded inputs, leftovers of interrupted writes cleaned.

Each test drives the real command line (``bdh.cli.main`` in this process, or ``python -m bdh`` in a subprocess
where two processes or a kill are the point) on a tiny run built once per module (2 steps, `TINY_TRAIN`).
"""

from __future__ import annotations

import os
import re
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from bdh.cli import main
from bdh.outputs import LOCK_NAME, FolderBusy, folder_lock

from .bad_input_fixtures import TINY_TRAIN, cut_yaml, set_args

SRC = Path(__file__).resolve().parents[2] / "src"


def bdh(*argv: str, capsys=None) -> tuple[int, str, str]:
    """``bdh ARGV`` in this process: (exit status, stdout, stderr); ``capsys``: pytest's capsysbinary."""
    code = main(list(argv))
    if capsys is None:
        return code, "", ""
    out, err = capsys.readouterr()
    return code, out.decode("utf-8", "replace"), err.decode("utf-8", "replace")


def one_error(err: str, *names: str) -> str:
    """The single ``bdh: error:`` line of ``err``, checked to name each of ``names``."""
    lines = [line for line in err.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("bdh: error: "), err
    assert "Traceback" not in err
    for name in names:
        assert name in lines[0], (name, lines[0])
    return lines[0]


def env() -> dict[str, str]:
    e = dict(os.environ, OMP_NUM_THREADS="1", MKL_NUM_THREADS="1", PYTHONUNBUFFERED="1")
    e["PYTHONPATH"] = str(SRC) + (os.pathsep + e["PYTHONPATH"] if e.get("PYTHONPATH") else "")
    return e


def spawn(cwd: Path, *argv: str) -> subprocess.Popen:
    """``python -m bdh ARGV`` in the background (its own process group, text output captured)."""
    return subprocess.Popen(
        [sys.executable, "-m", "bdh", *argv],
        cwd=cwd,
        env=env(),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )


def wait_for(predicate, proc: subprocess.Popen | None = None, timeout: float = 120) -> None:
    deadline = time.time() + timeout
    while time.time() < deadline:
        if predicate():
            return
        if proc is not None and proc.poll() is not None:
            raise AssertionError(f"process ended first: {proc.communicate()}")
        time.sleep(0.05)
    raise AssertionError("timed out")


def lock_holder(folder: Path) -> bool:
    lock = folder / LOCK_NAME
    return lock.is_file() and "pid=" in lock.read_text(errors="replace")


#: a tiny run that trains for a long time (until stopped): the process holds its folder meanwhile
ENDLESS = set_args([*TINY_TRAIN, "train.max_steps=1000000", "checkpoint.every=0", "eval.every=0"])


@pytest.fixture(scope="module")
def pristine_run(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("nothing-lost")
    assert main(["train", "--run-dir", str(root / "run"), *set_args(TINY_TRAIN)]) == 0
    return root / "run"


@pytest.fixture
def run(pristine_run, tmp_path, monkeypatch) -> Path:
    """A fresh copy of the tiny run, the cwd its parent."""
    monkeypatch.chdir(tmp_path)
    shutil.copytree(pristine_run, tmp_path / "run")
    return tmp_path / "run"


# ---------------------------------------------------------------------------------------------- 1. one writer


LOCKER = """
import sys, time
from bdh.outputs import folder_lock
with folder_lock(sys.argv[1]):
    print("locked", flush=True)
    time.sleep(600)
"""


def test_a_second_process_is_refused_naming_the_holder_and_a_dead_holder_is_taken_over(tmp_path):
    folder = tmp_path / "out"
    holder = subprocess.Popen([sys.executable, "-c", LOCKER, str(folder)], env=env(), stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "locked"
        with pytest.raises(FolderBusy, match=f"pid {holder.pid} on host"):
            with folder_lock(folder):
                pass
    finally:
        holder.kill()  # SIGKILL: no cleanup, the lock file stays
        holder.wait()
    assert (folder / LOCK_NAME).is_file() and f"pid={holder.pid}" in (folder / LOCK_NAME).read_text()
    with folder_lock(folder):  # the kernel dropped the dead holder's lock: taken over
        assert f"pid={os.getpid()}" in (folder / LOCK_NAME).read_text()
    assert not (folder / LOCK_NAME).exists()


def test_a_lock_file_of_a_dead_pid_is_taken_over_and_the_lock_nests_in_one_process(tmp_path):
    folder = tmp_path / "out"
    folder.mkdir()
    (folder / LOCK_NAME).write_text("pid=999999999\nhost=elsewhere\ncommand=bdh train\ntime=0\n")
    with folder_lock(folder):
        with folder_lock(folder):  # the same process again (bdh bench, then its run_suite): nests
            pass
        assert (folder / LOCK_NAME).is_file()
    assert folder.is_dir() and not any(folder.iterdir())


def test_two_real_trainings_on_one_run_folder_one_is_refused_in_one_line(run, tmp_path, capsysbinary):
    first = spawn(tmp_path, "train", "--run-dir", "busy", *ENDLESS)
    try:
        wait_for(lambda: lock_holder(tmp_path / "busy"), first)
        # the second training is this process (the holder is another one either way; no second PyTorch to start)
        # (2 steps, and the resume below stops at 2: a missing lock fails the test rather than trains on)
        code, _, err = bdh("train", "--run-dir", "busy", *set_args(TINY_TRAIN), capsys=capsysbinary)
        assert code == 2, err
        one_error(err, "busy", f"pid {first.pid}", "one writer at a time")
        code, _, err = bdh("train", "--resume", "busy", "--set", "train.max_steps=2", capsys=capsysbinary)
        assert code == 2
        one_error(err, f"pid {first.pid}")
    finally:
        os.killpg(first.pid, signal.SIGKILL)
        first.wait()
    # killed without a word: its lock is taken over, and the run, which had no checkpoint yet, trains again
    code, _, err = bdh("train", "--resume", "busy", "--set", "train.max_steps=2", capsys=capsysbinary)
    assert code == 0, err
    assert (tmp_path / "busy" / "checkpoints" / "step-2").is_dir() and not (tmp_path / "busy" / LOCK_NAME).exists()


def test_two_trainings_started_together_only_one_trains(tmp_path):
    procs = [spawn(tmp_path, "train", "--run-dir", "x", *set_args([*TINY_TRAIN, f"train.seed={s}"])) for s in (1, 2)]
    results = [p.communicate(timeout=240) for p in procs]
    codes = sorted(p.returncode for p in procs)
    assert codes == [0, 2], results
    refused = results[[p.returncode for p in procs].index(2)][1]
    assert "one writer at a time" in refused or "already exists" in refused, refused
    seeds = {line for line in (tmp_path / "x" / "config.yaml").read_text().splitlines() if "seed:" in line}
    assert len(seeds) >= 1
    steps = [line for line in (tmp_path / "x" / "metrics.jsonl").read_text().splitlines() if '"train"' in line]
    assert len(steps) == 2  # one run's records, not both


def test_bench_and_experiment_output_folders_are_locked(tmp_path, monkeypatch, capsysbinary):
    monkeypatch.chdir(tmp_path)
    holder = subprocess.Popen(
        [sys.executable, "-c", LOCKER, str(tmp_path / "b")], env=env(), stdout=subprocess.PIPE, text=True
    )
    try:
        assert holder.stdout.readline().strip() == "locked"
        bench = ["bench", "recall", "--quick", "--models", "bdh", "--steps", "1", "--seeds", "0", "--lrs", "1e-3"]
        code, _, err = bdh(*bench, "--widths", "8", "--out", "b", "--resume", capsys=capsysbinary)
        assert code == 2
        one_error(err, f"pid {holder.pid}")
        code, _, err = bdh("experiment", "scaling", "--quick", "--out", "b", "--resume", capsys=capsysbinary)
        assert code == 2
        one_error(err, f"pid {holder.pid}")
    finally:
        holder.kill()
        holder.wait()


# ---------------------------------------------------------------------------------------------- 2. every load verified

#: every command that loads weights, on the run folder ``run`` (small settings: quick if a check is missing)
LOADERS = {
    "generate": ["generate", "run", "--prompt", "hi", "--max-new-tokens", "2", "--device", "cpu"],
    "eval": ["eval", "run", "--batches", "1", "--device", "cpu"],
    "viz": ["viz", "run", "--out", "out/v.html", "--prompt", "hi", "--device", "cpu"],
    "plot": ["plot", "run", "--out", "out/p", "--device", "cpu"],
    "inspect": [
        "inspect",
        "run",
        "--out",
        "out/i",
        "--no-figures",
        "--tokens",
        "8",
        "--windows",
        "1",
        "--max-nodes",
        "16",
        "--seeds",
        "1",
    ],
    "merge": ["merge", "run", "run", "out/m"],
    "dmft-probe": [
        "dmft",
        "probe",
        "run",
        "--out",
        "out/d",
        "--prompt",
        "hi",
        "--temperatures",
        "1",
        "--steps",
        "8",
        "--transient",
        "2",
        "--features",
        "2",
    ],
}


def _flip_bytes(run: Path) -> str:
    weights = run / "best" / "model.safetensors"
    data = bytearray(weights.read_bytes())
    data[-8:] = bytes(8 * [0x7F])  # still a readable safetensors file, not the recorded bytes
    weights.write_bytes(bytes(data))
    return "does not match its checksum"


def _missing_weights(run: Path) -> str:
    (run / "best" / "model.safetensors").unlink()
    return "model.safetensors: is missing"


def _looping_weights(run: Path) -> str:
    (run / "best" / "model.safetensors").unlink()
    (run / "best" / "model.safetensors").symlink_to("model.safetensors")
    return "loops"


def _config_is_a_folder(run: Path) -> str:
    (run / "best" / "config.json").unlink()
    (run / "best" / "config.json").mkdir()
    return "config.json: is a folder"


def _meta_is_a_fifo(run: Path) -> str:
    (run / "best" / "meta.json").unlink()
    os.mkfifo(run / "best" / "meta.json")
    return "meta.json: is a FIFO"


DAMAGE = [_flip_bytes, _missing_weights, _looping_weights, _config_is_a_folder, _meta_is_a_fifo]


@pytest.mark.parametrize("damage", DAMAGE, ids=[d.__name__.strip("_") for d in DAMAGE])
@pytest.mark.parametrize("command", list(LOADERS))
def test_every_loader_refuses_a_damaged_best_instead_of_using_another_model(run, command, damage, capsysbinary):
    said = damage(run)
    code, out, err = bdh(*LOADERS[command], capsys=capsysbinary)
    assert code == 2, (out, err)
    line = one_error(err, "run/best", said)
    assert "checkpoints/step-2" in line or "checksum" in line  # how to load the checkpoint on purpose
    assert not Path("out").exists()


@pytest.mark.parametrize("command", list(LOADERS))
def test_every_loader_verifies_and_names_the_folder_it_loads(run, command, capsysbinary):
    code, out, err = bdh(*LOADERS[command], capsys=capsysbinary)
    assert code == 0, err
    said = f"model: {Path('run') / 'best'}" + ("" if command == "eval" else " (checksums verified)")
    assert said in (err if command in ("generate", "viz", "plot") else out)  # viz and plot: stdout is what they wrote


def test_the_checkpoint_the_advice_names_loads(run, capsysbinary):
    _missing_weights(run)
    bdh(*LOADERS["merge"], capsys=capsysbinary)
    code, _, err = bdh("merge", "run/checkpoints/step-2", "run/checkpoints/step-2", "out/m", capsys=capsysbinary)
    assert code == 0, err


# ---------------------------------------------------------------------------------------------- 3. damaged files


@pytest.mark.parametrize("damage", ["half", "empty", "line-boundary", "mid-value"])
def test_a_cut_config_yaml_is_refused_on_resume_not_filled_with_defaults(run, capsysbinary, damage):
    cfg = run / "config.yaml"
    text = cfg.read_text()
    if damage == "half":  # inside a key: not YAML wherever half the length falls
        cut_yaml(cfg)
    elif damage == "empty":
        cfg.write_bytes(b"")
    elif damage == "line-boundary":  # whole lines lost: still valid YAML
        cfg.write_text("".join(text.splitlines(keepends=True)[:40]))
    else:  # cut inside a value: seed 1337 would read as 13
        cfg.write_text(text[: text.index("seed: 1337") + len("seed: 13")])
    before = cfg.read_bytes()
    code, _, err = bdh("train", "--resume", "run", "--set", "train.max_steps=3", capsys=capsysbinary)
    assert code == 2
    line = one_error(err, "config.yaml")
    said = {"half": "not valid YAML", "empty": "is empty", "line-boundary": "cut short", "mid-value": "cut short"}
    assert said[damage] in line and "checkpoint" not in line
    assert cfg.read_bytes() == before and not (run / "checkpoints" / "step-3").exists()


def test_a_bad_byte_in_config_yaml_is_one_line_for_every_reader(run, capsysbinary):
    cfg = run / "config.yaml"
    cfg.write_bytes(cfg.read_bytes().replace(b"seed: 1337", b"seed: 13\xff7"))
    for argv in (["train", "--resume", "run"], LOADERS["viz"], LOADERS["eval"]):
        code, _, err = bdh(*argv, capsys=capsysbinary)
        assert code == 2, argv
        one_error(err, "config.yaml", "not a text file")


def _bad_byte_in_metrics(run: Path) -> None:
    metrics = run / "metrics.jsonl"
    lines = metrics.read_bytes().splitlines(keepends=True)
    metrics.write_bytes(lines[0].replace(b'"kind"', b'"k\xffind"') + b"".join(lines[1:]))


def test_a_bad_byte_in_metrics_is_skipped_with_a_count_and_repaired_on_resume(run, capsysbinary):
    _bad_byte_in_metrics(run)
    code, out, err = bdh("runs", ".", capsys=capsysbinary)
    assert code == 0 and "run" in out
    assert "bdh: warning:" in err and "1 damaged line(s) skipped" in err
    code, out, err = bdh(*LOADERS["plot"], capsys=capsysbinary)
    assert code == 0 and "1 damaged line(s) skipped" in err
    code, _, err = bdh("train", "--resume", "run", "--set", "train.max_steps=3", capsys=capsysbinary)
    assert code == 0, err
    assert "1 damaged line(s) dropped (repaired" in err
    records = (run / "metrics.jsonl").read_bytes().splitlines()
    assert b"\xff" not in b"".join(records) and len(records) == 4  # step 2: train + eval; step 3 likewise
    assert bdh("runs", ".", capsys=capsysbinary)[2] == ""  # repaired: no warning any more


def test_a_fifo_in_place_of_metrics_is_refused_without_hanging(run, capsysbinary):
    (run / "metrics.jsonl").unlink()
    os.mkfifo(run / "metrics.jsonl")
    cfg = (run / "config.yaml").read_bytes()
    for argv in (["train", "--resume", "run", "--set", "train.max_steps=3"], LOADERS["plot"], ["runs", "run"]):
        start = time.time()
        code, _, err = bdh(*argv, capsys=capsysbinary)
        assert code == 2 and time.time() - start < 30, argv
        one_error(err, "metrics.jsonl", "is a FIFO")
    assert (run / "config.yaml").read_bytes() == cfg


# ---------------------------------------------------------------------------------------------- 4. dead ends


def test_advice_after_a_kill_before_the_first_checkpoint_works_when_followed(run, tmp_path, capsysbinary):
    """A run killed before its first checkpoint: a plain rerun advises --resume or --overwrite; both work."""
    shutil.rmtree(run / "checkpoints")
    shutil.rmtree(run / "best")
    code, _, err = bdh("train", "--run-dir", "run", *set_args(TINY_TRAIN), capsys=capsysbinary)
    assert code == 2
    line = one_error(err, "bdh train --resume run", "--overwrite")
    assert "resume" in line
    code, _, err = bdh("train", "--resume", "run", "--set", "log.progress=lines", capsys=capsysbinary)
    assert code == 0, err  # followed: trains it from step 0
    assert "no checkpoint yet" in err and (run / "checkpoints" / "step-2").is_dir()
    code, _, err = bdh("train", "--run-dir", "run", "--overwrite", *set_args(TINY_TRAIN), capsys=capsysbinary)
    assert code == 0, err  # the other advice: start anew in the same folder
    assert (run / "checkpoints" / "step-2").is_dir() and len((run / "metrics.jsonl").read_text().splitlines()) == 3
    code, _, err = bdh("train", "--resume", "run", "--overwrite", capsys=capsysbinary)
    assert code == 2
    one_error(err, "--overwrite", "--resume")


# ---------------------------------------------------------------------------------------------- 6. leftovers

#: a writer killed (SIGKILL, by itself) inside an atomic folder swap: after the old folder was moved aside
#: (``.old``) and before the new one (``.tmp``, complete) was renamed into place, so best/ is gone
KILLED_MID_SWAP = """
import os, signal, sys
from bdh import outputs
real = os.replace
def replace(src, dst):
    real(src, dst)
    if str(dst).endswith("/x"):
        os.kill(os.getpid(), signal.SIGKILL)
outputs.os.replace = replace
with outputs.atomic_folder(sys.argv[1]) as tmp:
    (tmp / "config.json").write_text("new")
"""

#: a writer killed while it fills a temporary file and a temporary folder
KILLED_WHILE_WRITING = """
import sys, time
from bdh import outputs
with outputs.atomic_folder(sys.argv[1] + "/checkpoints/step-9") as tmp, outputs.atomic_path(sys.argv[1] + "/x.json"):
    print("writing", flush=True)
    time.sleep(600)
"""


def test_leftovers_of_killed_writes_are_cleaned_by_the_next_run_and_nothing_is_lost(run, tmp_path, capsysbinary):
    best = (run / "best" / "model.safetensors").read_bytes()
    killed = subprocess.run([sys.executable, "-c", KILLED_MID_SWAP, str(run / "best")], env=env())
    assert killed.returncode == -signal.SIGKILL and not (run / "best").exists()
    writer = subprocess.Popen([sys.executable, "-c", KILLED_WHILE_WRITING, str(run)], env=env(), stdout=subprocess.PIPE)
    assert writer.stdout.readline().strip() == b"writing"
    writer.kill()
    writer.wait()
    leftovers = sorted(p.name for p in [*run.iterdir(), *(run / "checkpoints").iterdir()] if p.name.startswith("."))
    assert len(leftovers) == 4, leftovers  # best's .old and .tmp, step-9's .tmp, x.json's .tmp
    other = run / f".notes.txt.{os.getpid()}-abc.tmp"  # a live process's temporary: not a leftover
    other.write_text("mine")
    code, out, err = bdh("train", "--resume", "run", capsys=capsysbinary)  # finished: nothing to train, all cleaned
    assert code == 0 and "nothing to do" in out, err
    left = sorted(p.name for p in [*run.iterdir(), *(run / "checkpoints").iterdir()] if p.name.startswith("."))
    assert left == [other.name]
    assert (run / "best" / "model.safetensors").read_bytes() == best  # the old best/ was put back


# ---------------------------------------------------------------------------------------------- 5. bounded inputs


def test_a_long_prompt_is_read_in_chunks_with_the_same_result():
    """Reading the prompt into the state chunk by chunk continues as reading it whole (greedy tokens equal:
    the logits agree to float rounding, far below the gaps between a random model's top logits)."""
    import torch

    import bdh as bdh_pkg

    torch.manual_seed(0)
    model = bdh_pkg.BDH(bdh_pkg.BDHConfig(n_layer=2, n_embd=16, n_head=2, n_neurons=64, dropout=0.0))
    prompt = torch.randint(0, 256, (100,))
    whole = list(model.stream(prompt, 8, temperature=0, prompt_chunk=10**6))
    chunked = list(model.stream(prompt, 8, temperature=0, prompt_chunk=7))
    assert [int(t) for t in whole] == [int(t) for t in chunked]


#: the peak resident memory after a generation from each prompt file in turn, smallest first: the peak is a high
#: water mark of this process, so a later, longer prompt raises it only by what it needs beyond the earlier one
PEAK = """
import resource, sys
from bdh.cli import main
for prompt in sys.argv[1:]:
    code = main(["generate", "run", "--prompt-file", prompt, "--max-new-tokens", "1", "--device", "cpu"])
    print("peak", code, resource.getrusage(resource.RUSAGE_SELF).ru_maxrss, file=sys.stderr)
"""


def test_generate_memory_does_not_grow_with_the_prompt(run):
    # read whole (PROMPT_CHUNK unbounded), 100 kB of prompt raises the peak well past the bound; in chunks, it stays
    sizes = (4_000, 100_000)
    for n in sizes:
        Path(f"p{n}.txt").write_bytes(b"to be or not " * (n // 13))
    # one process for both (one PyTorch to start, not two)
    done = subprocess.run(
        [sys.executable, "-c", PEAK, *(f"p{n}.txt" for n in sizes)], env=env(), capture_output=True, timeout=300
    )
    peaks = [line.split()[1:] for line in done.stderr.decode().splitlines() if line.startswith("peak ")]
    assert len(peaks) == 2, done.stderr
    (small_code, small), (large_code, large) = peaks
    assert small_code == large_code == "0", done.stderr
    assert int(large) - int(small) < 150_000, (small, large)  # KiB


@pytest.mark.parametrize(
    "argv,flag",
    [
        (["--set", "optim.weight_decay=" + "9" * 400], "optim.weight_decay"),
        (["--set", "train.max_steps=" + "9" * 400], "train.max_steps"),
        (["--set", "sample.seed=" + "9" * 30], "sample.seed"),
    ],
)
def test_numbers_too_large_for_their_type_are_one_line(tmp_path, monkeypatch, capsysbinary, argv, flag):
    monkeypatch.chdir(tmp_path)
    code, _, err = bdh("train", "--run-dir", "r", *set_args(TINY_TRAIN), *argv, capsys=capsysbinary)
    assert code == 2
    one_error(err, flag)
    assert not Path("r").exists()


@pytest.mark.parametrize(
    "argv,flag",
    [
        (["--seed", str(2**64)], "--seed"),
        (["--seed", "-1"], "--seed"),
        (["--top-k", "257"], "--top-k"),
        (["--temperature", "1e-30"], "--temperature"),
        (["--temperature", "1e30"], "--temperature"),
    ],
)
def test_generate_refuses_absurd_sampling_settings(run, capsysbinary, argv, flag):
    code, out, err = bdh(*LOADERS["generate"], *argv, capsys=capsysbinary)
    assert code == 2 and out == ""
    one_error(err, flag)


# ---------------------------------------------------------------------------------------------- 7. the small ones


@pytest.mark.parametrize(
    "override, said",
    [
        ("train.init_from=abc", "abc: no such run or model folder"),
        ("model.n_layer=4294967296", "model: its weights, gradients and AdamW moments alone need"),
    ],
)
def test_print_config_refuses_what_the_run_refuses_with_the_same_line(
    tmp_path, monkeypatch, capsysbinary, override, said
):
    """--print-config makes the run's own checks (plan_run, check_run_config): the same one line as the run."""
    monkeypatch.chdir(tmp_path)
    argv = ["train", "--run-dir", "r", *set_args(TINY_TRAIN), "--set", override]
    code, out, err = bdh(*argv, "--print-config", capsys=capsysbinary)
    assert code == 2 and out == ""
    printed = one_error(err, said)
    code, out, err = bdh(*argv, capsys=capsysbinary)
    # the same line, but for the free memory it quotes, which other processes change between the two calls
    free = re.compile(r"only [0-9.]+ GiB")
    assert code == 2 and free.sub("only N GiB", one_error(err)) == free.sub("only N GiB", printed)
    assert not Path("r").exists()


def test_print_config_accepts_a_model_to_start_from_and_prints_the_resolved_model(run, capsysbinary):
    code, out, err = bdh(
        "train", *set_args(TINY_TRAIN), "--set", "train.init_from=run", "--print-config", capsys=capsysbinary
    )
    assert code == 0, err
    assert "init_from: run" in out and "vocab_size: 256" in out  # the model section completed from the task


def _not_a_file(kind: str, where: Path) -> tuple[str, str]:
    """A folder, a FIFO or a device where a file is wanted: (its path, what the message must say)."""
    if kind == "device":
        return os.devnull, "is a device"
    path = where / f"a-{kind}"
    if kind == "folder":
        path.mkdir()
        (path / "inside.txt").write_text("text\n")
        return str(path), "is a folder"
    os.mkfifo(path)
    return str(path), "is a FIFO"


#: commands given a path where a file is wanted (P: the path); the run folder ``run`` is there
FILE_INPUTS = {
    "train-config": ["train", "P", "--print-config"],
    "train-data": ["train", *set_args(TINY_TRAIN), "--set", "task.data=@", "--print-config"],
    "generate-prompt-file": ["generate", "run", "--prompt-file", "P", "--max-new-tokens", "1", "--device", "cpu"],
    "inspect-data": ["inspect", "run", "--out", "out/i", "--data", "P", "--no-figures"],
    "eval-data": ["eval", "run", "--data", "P", "--batches", "1", "--device", "cpu"],
    "info-config": ["info", "P"],
    "convert-checkpoint": ["convert", "P", "out/c"],
    "plot-bench": ["plot", "run", "--out", "out/p", "--bench", "P"],
}


@pytest.mark.parametrize("kind", ["folder", "fifo", "device"])
@pytest.mark.parametrize("command", list(FILE_INPUTS))
def test_a_folder_fifo_or_device_given_as_a_file_is_named_for_what_it_is(run, tmp_path, capsysbinary, command, kind):
    if kind == "folder" and command in ("train-data", "eval-data", "info-config"):
        pytest.skip("a folder is valid there (of text files; a model folder)")
    path, said = _not_a_file(kind, tmp_path)
    argv = [path if a == "P" else a.replace("=@", f"={path}") for a in FILE_INPUTS[command]]
    start = time.time()
    code, _, err = bdh(*argv, capsys=capsysbinary)
    assert code == 2 and time.time() - start < 30
    line = one_error(err, path, said)
    assert "no such" not in line


class _FullDisk:
    """A file whose writes stop half-way with ENOSPC (the low-level writer of a full disk)."""

    def __init__(self, real):
        self._real = real

    def write(self, data) -> int:
        import errno

        self._real.write(bytes(data)[: max(1, len(data) // 2)])
        self._real.flush()
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    def __enter__(self):
        return self

    def __exit__(self, *exc) -> None:
        self._real.close()

    def __getattr__(self, name):
        return getattr(self._real, name)


def _full_disk_for(monkeypatch, wanted) -> None:
    """Every file `bdh.outputs` opens for writing whose name ``wanted`` accepts is on a full disk."""
    import builtins

    from bdh import outputs

    def fake_open(file, mode="r", *args, **kwargs):
        real = builtins.open(file, mode, *args, **kwargs)
        return _FullDisk(real) if any(m in mode for m in "wa") and wanted(str(file)) else real

    monkeypatch.setattr(outputs, "open", fake_open, raising=False)


@pytest.mark.parametrize(
    "target, named",
    [
        ("checkpoint", "run/checkpoints/step-4/model.safetensors"),
        ("config", "run/config.yaml"),
        ("metrics", "run/metrics.jsonl"),
    ],
)
def test_a_full_disk_names_the_file_and_keeps_the_previous_one(run, monkeypatch, capsysbinary, target, named):
    from .bad_input_fixtures import snapshot

    pieces = {
        "checkpoint": lambda f: "step-4" in f and f.endswith(".tmp") and "model.safetensors" in f,
        "config": lambda f: "config.yaml" in f,
        "metrics": lambda f: f.endswith("metrics.jsonl"),
    }
    before = snapshot(run)
    argv = ["train", "--resume", "run", "--set", "train.max_steps=4", "--set", "checkpoint.every=4"]
    with monkeypatch.context() as full:
        _full_disk_for(full, pieces[target])
        code, _, err = bdh(*argv, capsys=capsysbinary)
    assert code == 2, err
    one_error(err, named, "No space left on device", "nothing was replaced")
    after = snapshot(run)
    kept = [p for p in before if p.startswith("checkpoints/step-2")]  # the checkpoint resumed from
    kept += {"checkpoint": [], "config": ["config.yaml", "best/model.safetensors"], "metrics": ["metrics.jsonl"]}[
        target
    ]  # the file not written, as it was (metrics: the line being appended cut back)
    for path in kept:
        assert after.get(path) == before[path], path
    leftovers = [p for p in after if Path(p).name.startswith(".") and p.endswith((".tmp", ".old"))]
    assert leftovers == [], leftovers
    code, _, err = bdh(*argv, capsys=capsysbinary)  # space again: the same command goes on from step 2
    assert code == 0, err
    assert (run / "checkpoints" / "step-4" / "model.safetensors").is_file()


def test_info_warns_in_one_line_about_cut_weights(run, capsysbinary):
    weights = run / "best" / "model.safetensors"
    weights.write_bytes(weights.read_bytes()[:-100])
    code, out, err = bdh("info", "run", capsys=capsysbinary)
    assert code == 0 and "parameters" in out
    lines = err.splitlines()
    assert len(lines) == 1 and lines[0].startswith("bdh: warning: ") and "run/best/model.safetensors" in lines[0], err
    assert "truncated or corrupted" in lines[0]
    weights.write_bytes(b"")
    assert "bdh: warning: " in bdh("info", "run", capsys=capsysbinary)[2]
    weights.unlink()
    weights.mkdir()
    assert "is a folder" in bdh("info", "run", capsys=capsysbinary)[2]


def test_a_full_disk_in_a_new_run_advises_the_resume_that_continues_it(tmp_path, monkeypatch, capsysbinary):
    """Running the same command again would refuse the run folder it made: the advice is --resume."""
    monkeypatch.chdir(tmp_path)
    argv = ["train", "--run-dir", "new", *set_args(TINY_TRAIN)]
    with monkeypatch.context() as full:
        _full_disk_for(full, lambda f: "step-2" in f and f.endswith(".tmp") and "model.safetensors" in f)
        code, _, err = bdh(*argv, capsys=capsysbinary)
    assert code == 2, err
    line = one_error(err, "No space left on device", "continue with: bdh train --resume new")
    code, _, err = bdh(*line.split("continue with: bdh ", 1)[1].split(), capsys=capsysbinary)  # as advised
    assert code == 0, err
    assert (tmp_path / "new" / "checkpoints" / "step-2" / "model.safetensors").is_file()


def test_a_full_disk_under_tensorboard_is_one_line_naming_its_folder(run, monkeypatch, capsysbinary):
    """TensorBoard writes its event file itself, not through bdh.outputs: a full disk there was not named."""
    import errno

    from torch.utils.tensorboard import SummaryWriter

    def full(*args, **kwargs):
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    monkeypatch.setattr(SummaryWriter, "add_scalar", full)
    argv = ["train", "--resume", "run", "--set", "train.max_steps=4", "--set", "log.tensorboard=true"]
    code, _, err = bdh(*argv, capsys=capsysbinary)
    assert code == 2, err
    one_error(err, "run/tensorboard", "No space left on device", "free some space")
