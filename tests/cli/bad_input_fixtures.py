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
    """relative path -> sha256 of every file under ``root`` ('<dir>' for folders, '-> target' for links)."""
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
            else:
                out[str(p.relative_to(root))] = hashlib.sha256(p.read_bytes()).hexdigest()
    return out
