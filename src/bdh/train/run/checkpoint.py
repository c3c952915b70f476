"""Checkpoints: ``RUN_DIR/checkpoints/step-N/`` and ``RUN_DIR/best/``, each a model folder,
``trainer_state.safetensors`` and ``meta.json`` (checksums); nothing pickled, written atomically (docs/training.md)."""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import re
import shutil
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from bdh.errors import UserError

from ...model.io import (
    CONFIG_NAME,
    FREE_FIELD,
    WEIGHTS_NAME,
    CheckpointError,
    architecture,
    check_state_dict,
    config_changes,
    load_tensors,
    read_json,
    read_model_config,
    runtime_fields,
    save_tensors,
)
from ...outputs import atomic_folder, file_problem, write_text
from ..runtime.sharded import is_sharded, load_full_state_dict, shard_optimizer_tensors

FORMAT = "bdh-train-checkpoint"
FORMAT_VERSION = 1
STATE_NAME = "trainer_state.safetensors"
META_NAME = "meta.json"
STEP_DIR = re.compile(r"^step-(\d+)$")


@dataclass
class Checkpoint:
    """What `load_checkpoint` returns besides the weights it loads into the model and optimiser."""

    path: Path
    meta: dict[str, Any]
    tensors: dict[str, torch.Tensor]  # trainer state: rng.*, carry.*, ...

    @property
    def step(self) -> int:
        return int(self.meta["step"])


def _sha256(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def _write_json(path: Path, data: Any) -> None:
    write_text(path, json.dumps(data, indent=2, sort_keys=True) + "\n")


def optimizer_tensors(
    optimizer: torch.optim.Optimizer, state_dict: dict[str, Any] | None = None
) -> tuple[dict[str, torch.Tensor], dict[str, Any]]:
    """An optimiser's state dict (or ``state_dict``, a sharded one's gathered) as tensors ``optimizer.{param}.{name}``
    and JSON."""
    sd = optimizer.state_dict() if state_dict is None else state_dict
    tensors: dict[str, torch.Tensor] = {}
    scalars: dict[str, dict[str, Any]] = {}
    for idx, state in sd["state"].items():
        for name, value in state.items():
            if isinstance(value, torch.Tensor):
                tensors[f"optimizer.{idx}.{name}"] = value
            else:
                scalars.setdefault(str(idx), {})[name] = value
    groups = [{k: (list(v) if isinstance(v, tuple) else v) for k, v in g.items()} for g in sd["param_groups"]]
    return tensors, {"param_groups": groups, "scalars": scalars}


def load_optimizer(
    optimizer: torch.optim.Optimizer, tensors: dict[str, torch.Tensor], meta: dict[str, Any], source: str
) -> None:
    """Inverse of `optimizer_tensors`, with one-line errors for a state that does not fit."""
    state: dict[int, dict[str, Any]] = {}
    for key, value in tensors.items():
        if key.startswith("optimizer."):
            _, idx, name = key.split(".", 2)
            state.setdefault(int(idx), {})[name] = value
    for idx, extra in meta.get("scalars", {}).items():
        state.setdefault(int(idx), {}).update(extra)
    groups = meta["param_groups"]
    for g in groups:
        if "betas" in g:
            g["betas"] = tuple(g["betas"])
    try:
        optimizer.load_state_dict({"state": state, "param_groups": groups})
    except (ValueError, KeyError, RuntimeError) as exc:
        raise CheckpointError(
            f"{source}: optimiser state does not fit this model ({str(exc).splitlines()[0]})"
        ) from None
    params = [p for g in optimizer.param_groups for p in g["params"]]
    for i, p in enumerate(params):
        st = optimizer.state.get(p, {})
        for name, value in st.items():
            if isinstance(value, torch.Tensor) and value.dim() > 0 and value.shape != p.shape:
                raise CheckpointError(
                    f"{source}: optimiser tensor {name} of parameter {i} has shape {tuple(value.shape)}, "
                    f"expected {tuple(p.shape)}"
                )


def _write_folder(
    final: Path,
    model: torch.nn.Module,
    tensors: dict[str, torch.Tensor],
    meta: dict[str, Any],
    weights: dict[str, torch.Tensor] | None = None,
) -> Path:
    """Assemble a checkpoint under a temporary name, then rename it ``final``; ``weights``: a sharded model's
    full tensors."""
    with atomic_folder(final) as tmp:
        model.save_pretrained(tmp, state_dict=weights)
        save_tensors(tensors, tmp / STATE_NAME, metadata={"format": FORMAT})
        meta = dict(meta, format=FORMAT, format_version=FORMAT_VERSION, time=time.time())
        meta["files"] = {name: _sha256(tmp / name) for name in (CONFIG_NAME, WEIGHTS_NAME, STATE_NAME)}
        _write_json(tmp / META_NAME, meta)
    return final


def save_checkpoint(
    run_dir: Path,
    step: int,
    model: torch.nn.Module,
    optimizer: torch.optim.Optimizer,
    state: dict[str, torch.Tensor],
    meta: dict[str, Any],
    keep: int,
    weights: dict[str, torch.Tensor] | None = None,
    optimizer_state: dict[str, Any] | None = None,
) -> Path:
    """Write ``checkpoints/step-{step}`` atomically and keep the last ``keep``; ``weights``,
    ``optimizer_state``: gathered."""
    opt_tensors, opt_meta = optimizer_tensors(optimizer, optimizer_state)
    path = _write_folder(
        run_dir / "checkpoints" / f"step-{step}",
        model,
        {**opt_tensors, **state},
        dict(meta, step=step, optimizer=opt_meta),
        weights,
    )
    for old in list_checkpoints(run_dir)[:-keep]:
        shutil.rmtree(old, ignore_errors=True)
    return path


def save_best(
    run_dir: Path, model: torch.nn.Module, meta: dict[str, Any], weights: dict[str, torch.Tensor] | None = None
) -> Path:
    """Write ``best/`` (a model folder, meta.json with the metric) atomically."""
    return _write_folder(run_dir / "best", model, {}, meta, weights)


def list_checkpoints(run_dir: Path) -> list[Path]:
    """The step-N folders of a run, oldest first (temporary folders are ignored)."""
    folder = Path(run_dir) / "checkpoints"
    if not folder.is_dir():
        return []
    found = [(int(m.group(1)), p) for p in folder.iterdir() if p.is_dir() and (m := STEP_DIR.match(p.name))]
    return [p for _, p in sorted(found)]


def holds_model(folder: Path) -> bool:
    """Whether ``folder`` is a complete model folder (config.json and model.safetensors)."""
    return (folder / CONFIG_NAME).is_file() and (folder / WEIGHTS_NAME).is_file()


def _model_files(folder: Path, fallback: str) -> bool:
    """Whether ``folder`` holds a model (both files: True, neither: False); a damaged one is refused in one line."""
    problems = {name: file_problem(folder / name) for name in (CONFIG_NAME, WEIGHTS_NAME)}
    if all(p == "is missing" for p in problems.values()):
        return False
    for name, problem in problems.items():
        if problem is not None:
            raise CheckpointError(f"{folder / name}: {problem}; {folder} cannot be loaded{fallback}")
    return True


def verified(folder: Path) -> Path:
    """``folder`` after checking the checksums its meta.json records (none for a plain model folder)."""
    problem = file_problem(folder / META_NAME)
    if problem == "is missing":
        return folder
    if problem is not None:
        raise CheckpointError(f"{folder / META_NAME}: {problem}; the checksums of {folder} cannot be checked")
    verify(folder)
    return folder


def resolve_model_dir(source: str | os.PathLike, checkpoint: str | None = None) -> Path:
    """The model folder of ``source``, checksums verified: for a run, ``checkpoint`` if given, else ``best/``, else the
    newest complete checkpoint. A damaged file is refused, never passed over."""
    src = Path(source)
    if not src.exists():
        raise FileNotFoundError(f"{src}: no such run or model folder")
    if not src.is_dir():
        raise UserError(f"{src}: not a folder (give a run folder or a model folder)")
    if checkpoint:
        path = src / "checkpoints" / checkpoint
        if not path.is_dir() or not _model_files(path, ""):
            raise FileNotFoundError(f"{path}: no such checkpoint (or it is incomplete)")
        return verified(path)
    found = [p for p in list_checkpoints(src) if holds_model(p)]
    fallback = (
        f"; to load its newest checkpoint instead, give --checkpoint {found[-1].name} (or the folder {found[-1]})"
        if found
        else ""
    )
    if _model_files(src, ""):
        return verified(src)
    best = src / "best"
    if os.path.lexists(best):
        if not best.is_dir() or not _model_files(best, fallback):
            raise CheckpointError(f"{best}: {file_problem(best) or 'holds no model'}; not loaded{fallback}")
        return verified(best)
    if found:
        return verified(found[-1])
    runs = sorted((p for p in src.iterdir() if (p / "config.yaml").is_file()), key=lambda p: p.stat().st_mtime)
    inside = f"; it holds {len(runs)} run folder(s), the newest {runs[-1]}: give one of them" if runs else ""
    raise UserError(
        f"{src}: holds no model (neither config.json + model.safetensors, best/, nor checkpoints/step-N/){inside}"
    )


def verify(path: Path) -> dict[str, Any]:
    """The meta.json of a checkpoint folder after checking its format tag and file checksums."""
    meta_path = path / META_NAME
    problem = file_problem(meta_path)
    if problem == "is missing":
        raise CheckpointError(f"{path}: not a bdh training checkpoint (no {META_NAME}; incomplete or foreign)")
    if problem is not None:
        raise CheckpointError(f"{meta_path}: {problem}; not a bdh training checkpoint")
    meta = read_json(meta_path)
    if not isinstance(meta, dict) or meta.get("format") != FORMAT:
        raise CheckpointError(f"{path}: not a bdh training checkpoint ({META_NAME} has no format {FORMAT!r}; foreign?)")
    if meta.get("format_version") != FORMAT_VERSION:
        raise CheckpointError(
            f"{path}: checkpoint format_version {meta.get('format_version')!r} is not supported "
            f"(this bdh reads {FORMAT_VERSION})"
        )
    files = meta.get("files")
    if not isinstance(files, dict) or not {CONFIG_NAME, WEIGHTS_NAME} <= set(files):
        raise CheckpointError(f"{meta_path}: records no checksums of {CONFIG_NAME} and {WEIGHTS_NAME} (damaged?)")
    for name, digest in files.items():
        file = path / name
        problem = file_problem(file)
        if problem is not None:
            raise CheckpointError(f"{file}: {problem}; the checkpoint {path} is damaged")
        if _sha256(file) != digest:
            how = _config_edit(path) if name == CONFIG_NAME else "corrupted"
            raise CheckpointError(f"{path}: {name} does not match its checksum ({how})")
    return meta


def _config_edit(path: Path) -> str:
    """What an edit of a checkpoint's config.json changed in its weights' meaning: any edit is refused."""
    try:
        changes = config_changes(path, read_model_config(path)[1])
    except CheckpointError:
        return "corrupted"
    if not changes:
        return "edited or corrupted"
    name, (now, saved) = next(iter(changes.items()))
    on_purpose = (
        f"; for another {FREE_FIELD} on purpose, copy config.json and model.safetensors to a folder of their own"
        if changes.keys() == {FREE_FIELD}
        else ""
    )
    return f"edited: {name} is {now!r}, the weights were saved with {saved!r}{on_purpose}"


def field_defaults(config: Any, missing: set[str]) -> dict[str, Any]:
    """The defaults (as JSON reads them) of the ``missing`` fields of ``config``'s class: a checkpoint written before
    a field existed reads as its default, as `read_model_config` reads an older model folder."""
    out = {}
    for f in dataclasses.fields(config):
        if f.name in missing and f.default is not dataclasses.MISSING:
            out[f.name] = f.default
        elif f.name in missing and f.default_factory is not dataclasses.MISSING:
            out[f.name] = f.default_factory()
    return json.loads(json.dumps(out))


def load_checkpoint(
    path: Path, model: torch.nn.Module, optimizer: torch.optim.Optimizer | None, device: torch.device
) -> Checkpoint:
    """Verify a checkpoint and load it into ``model`` (and ``optimizer``); return the rest. Its architecture must be the
    run's; runtime fields are not compared."""
    meta = verify(path)
    config = read_json(path / CONFIG_NAME)
    if not isinstance(config, dict):
        raise CheckpointError(f"{path / CONFIG_NAME}: expected a JSON object")
    free = runtime_fields(type(model.config))
    expected = json.loads(json.dumps({"model_type": getattr(model, "model_type", None), **architecture(model.config)}))
    theirs = {k: v for k, v in config.items() if k not in ("format_version", "bdh_version") and k not in free}
    theirs = {**field_defaults(model.config, missing=set(expected) - set(theirs)), **theirs}
    if theirs != expected:
        diff = sorted(k for k in set(theirs) | set(expected) if theirs.get(k) != expected.get(k))
        raise CheckpointError(
            f"{path}: written for another model ({', '.join(diff[:3])} differ from the run's config; "
            "foreign checkpoint?)"
        )
    weights = load_tensors(path / WEIGHTS_NAME)
    check_state_dict(model, weights, str(path / WEIGHTS_NAME))
    sharded = is_sharded(model)  # full tensors (any process count wrote them) cut into this process's shards
    if sharded:
        load_full_state_dict(model, weights)
    else:
        model.load_state_dict(weights)
    tensors = load_tensors(path / STATE_NAME, device="cpu")
    if optimizer is not None:
        opt = {
            k: v.to(device) if k.endswith(("exp_avg", "exp_avg_sq")) else v
            for k, v in tensors.items()
            if k.startswith("optimizer.")
        }
        if sharded:
            opt = shard_optimizer_tensors(optimizer, opt)
        load_optimizer(optimizer, opt, meta["optimizer"], str(path / STATE_NAME))
    return Checkpoint(path, meta, {k: v for k, v in tensors.items() if not k.startswith("optimizer.")})


def latest_good(run_dir: Path, before: Path | None = None) -> Path | None:
    """The newest checkpoint that verifies (older than ``before`` if given), or None."""
    candidates = list_checkpoints(run_dir)
    if before is not None:
        candidates = [p for p in candidates if int(p.name.split("-")[1]) < int(before.name.split("-")[1])]
    for path in reversed(candidates):
        try:
            verify(path)
            return path
        except CheckpointError:
            continue
    return None
