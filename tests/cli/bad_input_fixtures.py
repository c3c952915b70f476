"""Fixture files of the bad-input suite (`test_bad_input.py`): built once, copied into every case's cwd.

`build_fixtures(root)` writes the tree below into ``root``; every case then runs in a fresh folder holding
a copy of it as ``fx/`` (relative paths in the case table), and its outputs go to ``out/`` beside it.

    fx/run/                      a tiny trained run (2 steps): config.yaml, metrics.jsonl, best/, checkpoints/step-2/
    fx/tampered-run/             the same run with best/model.safetensors changed after its checksum was recorded
    fx/models/bdh, bdh-b         BDH model folders (2 layers; bdh-b another seed), the merge inputs
    fx/models/bdh-1layer         a 1-layer BDH model folder (no sigma for `bdh synapses`)
    fx/models/gpt                a GPT model folder (bdh.baselines)
    fx/models/board              a bidirectional BDH of 5 tokens (board pathfinding)
    fx/my models/modèle ü        a BDH model folder whose path has spaces and non-ASCII characters
    fx/bad/random-weights        config.json + model.safetensors of random bytes
    fx/bad/truncated             config.json + model.safetensors cut in half
    fx/bad/empty-weights         config.json + an empty model.safetensors
    fx/bad/not-json              config.json that is not JSON + good weights
    fx/bad/unknown-type          config.json of model_type 'llama9000' + good weights
    fx/bad/empty-folder          an empty folder
    fx/bad/image.pt              PNG bytes named .pt;  fx/bad/empty.pt, fx/bad/empty.txt: empty files
    fx/bad/truncated.pt          an official checkpoint cut in half
    fx/official.pt               an official (pathwaycom/bdh) checkpoint of a tiny model
    fx/data/text.txt             some text;  fx/prompt.bin: bytes that are not UTF-8
    fx/cfg/*.yaml|json           broken / unknown-key / wrong-type configs
    fx/bench/empty.csv, nosuite.csv   files that are not bdh bench results
    fx/board.txt                 a 4 x 4 board;  fx/board-bad.txt: an unknown cell;  fx/board-ragged.txt: a short row
    fx/long-prompt.txt           26,000 bytes of text (over every prompt limit)
    fx/precious.txt, fx/notes.txt, fx/full/keep.txt, fx/my models/notes ü.txt   existing unrelated outputs
"""

from __future__ import annotations

import hashlib
import json
import os
import random
from pathlib import Path

import torch

#: the tiny sizes of every model of the suite
TINY_MODEL = {"n_layer": 2, "n_embd": 16, "n_head": 2, "n_neurons": 64, "vocab_size": 256, "dropout": 0.0}

#: ``--set`` overrides of a tiny, quick training run (2 steps, no sample, no tensorboard)
TINY_TRAIN = [
    "model.n_layer=2",
    "model.n_embd=16",
    "model.n_head=2",
    "model.n_neurons=64",
    "model.dropout=0.0",
    "model.damping=null",  # the official model, as the model folders below (merge takes them together)
    "task.seq_len=16",
    "train.batch_size=2",
    "train.threads=1",
    "optim.warmup_steps=1",
    "train.max_steps=2",
    "eval.batches=1",
    "eval.every=2",
    "checkpoint.every=2",
    "log.progress=none",
    "sample.max_new_tokens=0",
    "log.tensorboard=false",
    "train.max_minutes=null",
    "train.device=cpu",
]

PNG = b"\x89PNG\r\n\x1a\n" + b"\x00\x00\x00\rIHDR" + bytes(range(64)) * 4

TEXT = "First Citizen:\nBefore we proceed any further, hear me speak.\n\nAll:\nSpeak, speak.\n\n" * 40


def set_args(overrides: list[str]) -> list[str]:
    out: list[str] = []
    for item in overrides:
        out += ["--set", item]
    return out


def _bdh(seed: int, **changes):
    import bdh

    torch.manual_seed(seed)
    return bdh.BDH(bdh.BDHConfig(**{**TINY_MODEL, **changes}))


def _train_run(run_dir: Path) -> None:
    """A real 2-step run through the library trainer (the same code path as ``bdh train``)."""
    from bdh.train import load_config, train

    config = load_config(None, [*TINY_TRAIN, f"run_dir={run_dir}"])
    torch.manual_seed(0)
    train(config)


def _model_folder_with(
    root: Path, name: str, good: Path, *, weights: bytes | None = None, config: bytes | None = None
) -> None:
    folder = root / name
    folder.mkdir(parents=True)
    (folder / "config.json").write_bytes(config if config is not None else (good / "config.json").read_bytes())
    (folder / "model.safetensors").write_bytes(
        weights if weights is not None else (good / "model.safetensors").read_bytes()
    )


def build_fixtures(root: Path) -> Path:
    """Write the fixture tree into ``root`` (see the module doc); return ``root``."""
    from bdh.baselines import GPT, GPTConfig
    from bdh.model.interop import to_official

    fx = root
    fx.mkdir(parents=True, exist_ok=True)
    rng = random.Random(1234)

    # a trained run, and a copy whose best/ weights were changed after the checksums were written
    _train_run(fx / "run")
    import shutil

    shutil.copytree(fx / "run", fx / "tampered-run")
    weights = bytearray((fx / "tampered-run" / "best" / "model.safetensors").read_bytes())
    weights[-8:] = bytes(8 * [0x7F])  # still a readable safetensors file, but not the recorded bytes
    (fx / "tampered-run" / "best" / "model.safetensors").write_bytes(bytes(weights))

    # model folders
    models = fx / "models"
    _bdh(1).save_pretrained(models / "bdh")
    _bdh(2).save_pretrained(models / "bdh-b")
    _bdh(3, n_layer=1).save_pretrained(models / "bdh-1layer")
    torch.manual_seed(4)
    GPT(GPTConfig(vocab_size=256, seq_len=32, n_layer=1, n_embd=16, n_head=2)).save_pretrained(models / "gpt")
    _bdh(7, vocab_size=5, causal=False).save_pretrained(models / "board")  # a board pathfinding model (5 cell tokens)
    _bdh(5).save_pretrained(fx / "my models" / "modèle ü")
    (fx / "my models" / "notes ü.txt").write_text("mes notes\n", encoding="utf-8")

    # corrupt and foreign files
    good = models / "bdh"
    bad = fx / "bad"
    good_weights = (good / "model.safetensors").read_bytes()
    _model_folder_with(bad, "random-weights", good, weights=rng.randbytes(4096))
    _model_folder_with(bad, "truncated", good, weights=good_weights[: len(good_weights) // 2])
    _model_folder_with(bad, "empty-weights", good, weights=b"")
    _model_folder_with(bad, "not-json", good, config=b'{"model_type": "bdh", "n_layer": 2,,, oops\n')
    cfg = json.loads((good / "config.json").read_text(encoding="utf-8"))
    cfg["model_type"] = "llama9000"
    _model_folder_with(bad, "unknown-type", good, config=json.dumps(cfg).encode())
    (bad / "empty-folder").mkdir()
    (bad / "image.pt").write_bytes(PNG)
    (bad / "empty.pt").write_bytes(b"")
    (bad / "empty.txt").write_bytes(b"")

    # an official checkpoint (pathwaycom/bdh names): 1 layer, n = 4 * 16
    official = _bdh(6, n_layer=1, n_neurons=64)
    buf = fx / "official.pt"
    torch.save(to_official(official), buf)
    data = buf.read_bytes()
    (bad / "truncated.pt").write_bytes(data[: len(data) // 2])

    # data, prompts, configs, bench results, boards
    (fx / "data").mkdir()
    (fx / "data" / "text.txt").write_text(TEXT, encoding="utf-8")
    (fx / "prompt.bin").write_bytes(b"\xff\xfe ROMEO\xc3")
    (fx / "long-prompt.txt").write_bytes(b"to be or not " * 2000)  # 26,000 bytes
    cfgs = fx / "cfg"
    cfgs.mkdir()
    (cfgs / "broken.yaml").write_text("model:\n  n_layer: [1, 2\n  : :\n", encoding="utf-8")
    (cfgs / "unknown-key.yaml").write_text("optim:\n  lrr: 0.001\n", encoding="utf-8")
    (cfgs / "wrong-type.yaml").write_text("train:\n  max_steps: lots\n", encoding="utf-8")
    (cfgs / "list.yaml").write_text("- 1\n- 2\n", encoding="utf-8")
    (cfgs / "ok.yaml").write_text("optim:\n  lr: 0.001\n", encoding="utf-8")
    (cfgs / "unknown-field.json").write_text(json.dumps({"n_layers": 2, "n_embd": 16}), encoding="utf-8")
    (cfgs / "bad-type.json").write_text(json.dumps({"n_layer": "two"}), encoding="utf-8")
    (cfgs / "list.json").write_text("[1, 2, 3]\n", encoding="utf-8")
    (fx / "bench").mkdir()
    (fx / "bench" / "empty.csv").write_bytes(b"")
    (fx / "bench" / "nosuite.csv").write_text("model,width,accuracy\nbdh,32,0.5\n", encoding="utf-8")
    (fx / "board-bad.txt").write_text("S.#\n.X.\n..E\n", encoding="utf-8")
    (fx / "board-ragged.txt").write_text("S.#.\n...\n..E.\n....\n", encoding="utf-8")
    (fx / "board.txt").write_text("S.#.\n.#..\n....\n..#E\n", encoding="utf-8")

    # existing outputs that must survive
    (fx / "precious.txt").write_text("do not lose me\n", encoding="utf-8")
    (fx / "notes.txt").write_text("my notes, not a corpus\n", encoding="utf-8")
    (fx / "full").mkdir()
    (fx / "full" / "keep.txt").write_text("keep me\n", encoding="utf-8")
    return fx


def snapshot(root: Path) -> dict[str, str]:
    """relative path -> sha256 of every file under ``root`` ('<dir>' for folders, '-> target' for links,
    '<not a regular file>' for a FIFO or socket, which is never opened: it would block)."""
    import stat

    out: dict[str, str] = {}
    for dirpath, dirnames, filenames in os.walk(root):
        base = Path(dirpath)
        for d in dirnames:
            p = base / d
            out[str(p.relative_to(root))] = f"-> {os.readlink(p)}" if p.is_symlink() else "<dir>"
        for f in filenames:
            p = base / f
            if p.is_symlink():
                out[str(p.relative_to(root))] = f"-> {os.readlink(p)}"
            elif not stat.S_ISREG(p.lstat().st_mode):
                out[str(p.relative_to(root))] = "<not a regular file>"
            else:
                out[str(p.relative_to(root))] = hashlib.sha256(p.read_bytes()).hexdigest()
    return out


# ---------------------------------------------------------------------------------------------- the sweep's own


def dead_pid() -> int:
    """The pid of a process that has ended (the writer of a leftover temporary)."""
    import subprocess
    import sys

    proc = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    return int(proc.stdout)


def _damaged_copy(src: Path, dst: Path, damage) -> None:
    import shutil

    shutil.copytree(src, dst, symlinks=True)
    damage(dst)


def _cut(path: Path, keep: float = 0.5) -> None:
    data = path.read_bytes()
    path.write_bytes(data[: int(len(data) * keep)])


def cut_yaml(path: Path, keep: float = 0.5) -> None:
    """Cut a YAML file near ``keep`` of its length inside a key (after the first letter of the key of the line the
    cut falls in), moving the cut up a line at a time until the rest no longer parses: a cut inside the first key
    of a section still parses (``train:`` then ``  d`` is ``train: d``), and which key the middle falls in depends
    on the number of fields the config has."""
    import yaml

    data = path.read_bytes()
    end = int(len(data) * keep)
    while True:
        start = data.rfind(b"\n", 0, end) + 1
        indent = len(data[start:]) - len(data[start:].lstrip(b" -"))
        cut = data[: start + indent + 1]
        try:
            yaml.safe_load(cut)
        except yaml.YAMLError:
            break
        assert start > 0, f"{path}: no cut of it is unreadable YAML"
        end = start - 1
    path.write_bytes(cut)


def _flip(path: Path) -> None:
    data = bytearray(path.read_bytes())
    data[-8:] = bytes(8 * [0x7F])  # still a readable safetensors file, not the recorded bytes
    path.write_bytes(bytes(data))


#: a bench recall runs.csv: its header, a row and another run's row
LEDGER = (
    "suite,model,setting,width,params,state_size,lr,seed,steps,batch_size,val_loss,accuracy\n",
    "recall,bdh,N32-D2,8,2560,512,0.001,0,1,16,4.1,0.016\n",
    "recall,gpt,N32-D2,8,2560,512,0.001,0,1,16,4.1,0.5\n",
)


#: a length experiment's results/<run>.json as written: one read row
LENGTH_ROW = {"length": 32, "read": "state", "status": "ok", "accuracy": 0.5, "low": 0.4, "high": 0.6}
LENGTH_RECORD = {"model": "bdh", "task": "induction", "seed": 0, "params": 1, "final": {}, "rows": [LENGTH_ROW]}


def _length_records(sw: Path) -> None:
    """sw/len-{cut,empty,list,object,binary,dup,nan}: a --quick length folder whose first record is damaged (its
    model folder there, so that --resume reads the record)."""
    from bdh.experiments.length import Config

    marker = json.dumps({"experiment": "length", "config": Config.preset("quick").to_dict()}, indent=1) + "\n"
    good = json.dumps(LENGTH_RECORD).encode()
    for name, data in (
        ("cut", good[: len(good) // 2]),
        ("empty", b""),
        ("list", b"[]"),
        ("object", b"{}"),
        ("binary", PNG),
        ("dup", json.dumps({**LENGTH_RECORD, "rows": [LENGTH_ROW, LENGTH_ROW]}).encode()),
        ("nan", json.dumps({**LENGTH_RECORD, "rows": [{**LENGTH_ROW, "accuracy": float("nan")}]}).encode()),
    ):
        folder = sw / f"len-{name}"
        (folder / "models" / "bdh-induction-s0").mkdir(parents=True)
        (folder / "results").mkdir()
        (folder / "length.json").write_text(marker)
        (folder / "results" / "bdh-induction-s0.json").write_bytes(data)


def build_sweep_fixtures(fx: Path) -> Path:
    """Add ``fx/sw/``, the states an unlucky user leaves behind, to a copy of the fixture tree:

    sw/run4                  a tiny run of 4 steps with checkpoints step-2 and step-4 (best/ too)
    sw/ckpt-cut, ckpt-state-flipped, ckpt-meta-bad   run4 with step-4's weights cut in half, its trainer
                             state's bytes changed, its meta.json not JSON
    sw/no-ckpt               a run killed before its first checkpoint (config.yaml and metrics.jsonl only)
    sw/cut-config, empty-config   a run whose config.yaml is cut in half (inside a key) / empty
    sw/best-config-changed   a run whose best/config.json is not the recorded bytes
    sw/best-no-weights       a run whose best/model.safetensors is gone (its checkpoint is there)
    sw/metrics-folder, metrics-cut   metrics.jsonl a folder / its last line cut in the middle
    sw/foreign-hf            a model folder of another library (config.json of model_type gpt2)
    sw/foreign-shapes        a BDH config.json with the weights of a GPT
    sw/edited-damping, edited-n-layer   a model folder whose config.json changes damping / n_layer (same shapes)
    sw/best-damping-edited, best-n-layer-edited   a run whose best/config.json changes damping / n_layer (its
                             checksum fails: a checkpoint is the record of its run)
    sw/pt-as-safetensors     an official .pt checkpoint named model.safetensors
    sw/leftovers             a run with the temporaries of a dead writer (a file and a checkpoint folder)
    sw/mid-swap              a run whose writer died while swapping best/ (best/ is in .best.PID-x.old)
    sw/bench-cut             a bench folder interrupted during its first run (runs/ only)
    sw/bench-bad-ledger, bench-foreign-ledger   a bench folder whose runs.csv is binary / another table
    sw/bench-ledger-{dup,nan,abc,no-metric}   a bench runs.csv with a row repeated, lr nan, accuracy abc, no
                             accuracy column
    sw/bench-ledger-acc-{nan,5,1e308}   a bench runs.csv whose best row's accuracy is nan, 5.0, 1e308
    sw/len-*                 a --quick length folder whose first record is cut, empty, [], {}, binary, a row twice,
                             an accuracy nan (`_length_records`)
    sw/scaling-cut           a scaling folder interrupted after its marker (scaling.json, runs/)
    sw/lc-bad-marker         a long-context folder whose long-context.json is not JSON
    sw/foreign.pt            a PyTorch file of tensors that is not an official checkpoint
    sw/texts/                a folder of text files (valid data)
    """
    import shutil

    from bdh.train import load_config, train

    sw = fx / "sw"
    sw.mkdir()
    config = load_config(None, [*TINY_TRAIN, "train.max_steps=4", "checkpoint.keep=2", f"run_dir={sw / 'run4'}"])
    torch.manual_seed(0)
    train(config)
    run, run4 = fx / "run", sw / "run4"
    step4 = Path("checkpoints") / "step-4"
    _damaged_copy(run4, sw / "ckpt-cut", lambda d: _cut(d / step4 / "model.safetensors"))
    _damaged_copy(run4, sw / "ckpt-state-flipped", lambda d: _flip(d / step4 / "trainer_state.safetensors"))
    _damaged_copy(run4, sw / "ckpt-meta-bad", lambda d: (d / step4 / "meta.json").write_text("{oops"))
    _damaged_copy(run, sw / "no-ckpt", lambda d: (shutil.rmtree(d / "checkpoints"), shutil.rmtree(d / "best")))
    _damaged_copy(run, sw / "cut-config", lambda d: cut_yaml(d / "config.yaml"))
    _damaged_copy(run, sw / "empty-config", lambda d: (d / "config.yaml").write_bytes(b""))
    _damaged_copy(run, sw / "best-config-changed", lambda d: (d / "best" / "config.json").write_text("{}\n"))
    _damaged_copy(run, sw / "best-no-weights", lambda d: (d / "best" / "model.safetensors").unlink())

    def metrics_folder(d: Path) -> None:
        (d / "metrics.jsonl").unlink()
        (d / "metrics.jsonl").mkdir()

    _damaged_copy(run, sw / "metrics-folder", metrics_folder)
    _damaged_copy(run, sw / "metrics-cut", lambda d: _cut(d / "metrics.jsonl", 0.8))
    good = fx / "models" / "bdh"
    hf = json.dumps({"model_type": "gpt2", "n_layer": 2, "n_embd": 16, "vocab_size": 256}).encode()
    _model_folder_with(sw, "foreign-hf", good, config=hf)
    other = (fx / "models" / "gpt" / "model.safetensors").read_bytes()
    _model_folder_with(sw, "foreign-shapes", good, weights=other)
    for name, edit in (("damping", {"damping": 0.5}), ("n-layer", {"n_layer": 3})):
        config = {**json.loads((good / "config.json").read_text()), **edit}
        _model_folder_with(sw, f"edited-{name}", good, config=json.dumps(config).encode())

    for name, edit in (("damping", {"damping": 0.5}), ("n-layer", {"n_layer": 3})):

        def best_edited(d: Path, edit: dict = edit) -> None:
            best = d / "best" / "config.json"
            best.write_text(json.dumps({**json.loads(best.read_text()), **edit}))

        _damaged_copy(run, sw / f"best-{name}-edited", best_edited)
    _model_folder_with(sw, "pt-as-safetensors", good, weights=(fx / "official.pt").read_bytes())
    pid = dead_pid()

    def leftovers(d: Path) -> None:
        (d / f".config.yaml.{pid}-ab12.tmp").write_text("half a conf")
        shutil.copytree(d / "checkpoints" / "step-2", d / "checkpoints" / f".step-9.{pid}-cd34.tmp")

    _damaged_copy(run, sw / "leftovers", leftovers)

    def mid_swap(d: Path) -> None:
        old = d / f".best.{pid}-ef56.old"
        old.mkdir()
        (d / "best").rename(old / "x")

    _damaged_copy(run, sw / "mid-swap", mid_swap)
    cut = sw / "bench-cut" / "runs" / "bdh" / "N32-D2-w8-lr0.001-s0"
    cut.mkdir(parents=True)
    (cut / "config.yaml").write_text("model:\n  name: bdh\n")
    for name, data in (("bench-bad-ledger", PNG), ("bench-foreign-ledger", b"a,b\n1,2\n")):
        (sw / name).mkdir()
        (sw / name / "runs.csv").write_bytes(data)
    head, row, other = LEDGER
    for name, text in (
        ("dup", head + row + other + row),
        ("nan", head + row.replace(",0.001,", ",nan,")),
        ("abc", head + row.replace(",0.016", ",abc")),
        ("no-metric", head.replace(",accuracy", "") + row.replace(",0.016", "")),
        ("acc-nan", head + row.replace(",0.016", ",nan") + other),
        ("acc-5", head + row.replace(",0.016", ",5.0") + other),
        ("acc-1e308", head + row.replace(",0.016", ",1e308") + other),
    ):
        (sw / f"bench-ledger-{name}").mkdir()
        (sw / f"bench-ledger-{name}" / "runs.csv").write_text(text)
    _length_records(sw)
    (sw / "scaling-cut" / "runs").mkdir(parents=True)
    (sw / "scaling-cut" / "scaling.json").write_text('{"experiment": "scaling", "config": {}}\n')
    (sw / "lc-bad-marker").mkdir()
    (sw / "lc-bad-marker" / "long-context.json").write_text("{oops")
    torch.save({"weight": torch.zeros(3)}, sw / "foreign.pt")
    (sw / "texts").mkdir()
    (sw / "texts" / "a.txt").write_text(TEXT, encoding="utf-8")
    (sw / "texts" / "b.txt").write_text(TEXT[::-1], encoding="utf-8")
    return fx
