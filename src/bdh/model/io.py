"""Model folders: ``config.json`` + ``model.safetensors`` (the Hugging Face layout), nothing unpickled, atomic writes.

The safetensors header records the architecture the weights were saved with (`SAVED_KEY`), so a ``config.json`` edited
to change what the weights mean is refused naming the field (``n_layer`` only warns); shapes are checked on the ``meta``
device first."""

from __future__ import annotations

import json
import os
import warnings
from pathlib import Path
from typing import Any, ClassVar

import torch

from bdh.errors import ConfigWarning, UserError
from bdh.model_api import runtime_fields
from bdh.outputs import input_file, write_bytes

CONFIG_NAME = "config.json"
WEIGHTS_NAME = "model.safetensors"
FORMAT_VERSION = 1
#: the key of model.safetensors' header that records the architecture (`architecture`, JSON) of its weights
SAVED_KEY = "bdh_architecture"
#: the architecture field a user may change on purpose (BDH: the layers share their weights): a warning
FREE_FIELD = "n_layer"


class CheckpointError(UserError):
    """A model folder or weights file that cannot be used; the message names the file and the problem."""


def save_tensors(
    tensors: dict[str, torch.Tensor], path: str | os.PathLike, metadata: dict[str, str] | None = None
) -> None:
    """Save tensors to a safetensors file atomically (contiguous CPU copies; shared storage is split)."""
    from safetensors.torch import save

    clean = {k: v.detach().to("cpu").contiguous().clone() for k, v in tensors.items()}
    write_bytes(path, save(clean, metadata=metadata))


def load_tensors(path: str | os.PathLike, device: str | torch.device = "cpu") -> dict[str, torch.Tensor]:
    """Load a safetensors file, turning every failure into a one-line `CheckpointError`."""
    from safetensors.torch import load_file

    path = checked_file(path)
    try:
        return load_file(str(path), device=str(device))
    except Exception as exc:  # safetensors raises several types for bad files
        raise _unreadable(path, exc) from None


def check_weights_file(path: str | os.PathLike) -> Path:
    """A safetensors file checked from its header alone, else the one-line `CheckpointError` `load_tensors`
    would raise."""
    from safetensors import safe_open

    path = checked_file(path)
    try:
        with safe_open(str(path), framework="pt") as f:
            f.keys()
    except Exception as exc:  # as load_tensors
        raise _unreadable(path, exc) from None
    return path


def _unreadable(path: Path, exc: Exception) -> CheckpointError:
    reason = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
    return CheckpointError(f"{path}: not a readable safetensors file (truncated or corrupted?): {reason}")


def checked_file(path: str | os.PathLike) -> Path:
    """``path`` checked to be a regular file, else a one-line `CheckpointError` saying what it is."""
    try:
        return input_file(path, missing="file not found")
    except (OSError, UserError) as exc:
        raise CheckpointError(str(exc)) from None


def read_json(path: str | os.PathLike) -> Any:
    path = checked_file(path)
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise CheckpointError(f"{path}: not valid JSON ({exc})") from None


def check_state_dict(module: torch.nn.Module, tensors: dict[str, torch.Tensor], source: str) -> None:
    """Refuse missing, unexpected or mis-shaped tensors with one line naming the first problem."""
    expected = module.state_dict()
    missing = sorted(set(expected) - set(tensors))
    if missing:
        raise CheckpointError(f"{source}: missing tensor {missing[0]!r} ({len(missing)} missing)")
    unexpected = sorted(set(tensors) - set(expected))
    if unexpected:
        raise CheckpointError(f"{source}: unexpected tensor {unexpected[0]!r} (not part of this model)")
    for name, ref in expected.items():
        got = tensors[name]
        if tuple(got.shape) != tuple(ref.shape):
            raise CheckpointError(
                f"{source}: tensor {name!r} has shape {tuple(got.shape)}, the config needs {tuple(ref.shape)}"
            )
        if got.is_floating_point() != ref.is_floating_point():
            raise CheckpointError(f"{source}: tensor {name!r} has dtype {got.dtype}, expected {ref.dtype}")


def architecture(config: Any) -> dict[str, Any]:
    """A config's ``to_dict()`` without the runtime fields: what two configs must share for weights to load."""
    runtime = runtime_fields(type(config))
    return {k: v for k, v in config.to_dict().items() if k not in runtime}


def folder_config(model_type: str, config: Any) -> dict[str, Any]:
    """What a model folder's ``config.json`` holds: ``model_type``, the format tags and every config field."""
    from bdh import __version__

    return {
        "model_type": model_type,
        "format_version": FORMAT_VERSION,
        "bdh_version": __version__,
        **config.to_dict(),
    }


def write_model_folder(
    directory: str | os.PathLike, model_type: str, config: Any, tensors: dict[str, torch.Tensor]
) -> Path:
    """Write ``config.json`` and ``model.safetensors`` into ``directory`` atomically: the one writer of
    model folders."""
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    record = json.dumps(architecture(config), sort_keys=True)
    save_tensors(
        tensors, directory / WEIGHTS_NAME, metadata={"format": "pt", "model_type": model_type, SAVED_KEY: record}
    )
    text = json.dumps(folder_config(model_type, config), indent=2, sort_keys=True) + "\n"
    write_bytes(directory / CONFIG_NAME, text.encode())
    return directory


def saved_architecture(path: str | os.PathLike) -> dict[str, Any] | None:
    """The architecture a weights file records in its header (`write_model_folder`), or None (none recorded)."""
    from safetensors import safe_open

    path = checked_file(path)
    try:
        with safe_open(str(path), framework="pt") as f:
            header = f.metadata() or {}
    except Exception as exc:  # as load_tensors
        raise _unreadable(path, exc) from None
    try:
        record = json.loads(header.get(SAVED_KEY, "null"))
    except json.JSONDecodeError:
        return None
    return record if isinstance(record, dict) else None


def config_changes(directory: str | os.PathLike, config: Any) -> dict[str, tuple[Any, Any]]:
    """``{field: (config value, saved value)}`` where ``config`` differs from what the weights were saved with."""
    saved = saved_architecture(Path(directory) / WEIGHTS_NAME)
    if saved is None:
        return {}
    ours = json.loads(json.dumps(architecture(config)))
    return {k: (ours[k], saved[k]) for k in sorted(ours.keys() & saved.keys()) if ours[k] != saved[k]}


def check_config_changes(directory: str | os.PathLike, config: Any) -> str | None:
    """`CheckpointError` naming the first field that changes what the weights mean; the `FREE_FIELD` warning,
    or None."""
    path = Path(directory) / CONFIG_NAME
    changes = config_changes(directory, config)
    for name, (now, saved) in changes.items():
        if name != FREE_FIELD:
            raise CheckpointError(
                f"{path}: {name} is {now!r} but the weights were saved with {saved!r}; an edit that changes what "
                f"the weights mean is refused: set {name} back to {saved!r}"
            )
    if FREE_FIELD not in changes:
        return None
    now, saved = changes[FREE_FIELD]
    return (
        f"{path}: {FREE_FIELD} is {now} but the weights were saved with {saved}; they load (the layers share them), "
        "but the model computes something other than what was trained"
    )


class PretrainedMixin:
    """``save_pretrained`` / ``from_pretrained`` for a module with ``model_type``, ``config_class``, built
    as ``cls(config)``."""

    model_type: ClassVar[str] = ""
    config_class: ClassVar[type]

    def save_pretrained(self, directory: str | os.PathLike, state_dict: dict[str, torch.Tensor] | None = None) -> Path:
        """`write_model_folder` into ``directory``; ``state_dict``: the weights instead of ``self.state_dict()``."""
        weights = self.state_dict() if state_dict is None else state_dict
        return write_model_folder(directory, self.model_type, self.config, weights)

    @classmethod
    def from_pretrained(cls, directory: str | os.PathLike, map_location: str | torch.device = "cpu"):
        """Rebuild the model saved by `save_pretrained` in ``directory``."""
        model = load_pretrained(directory, map_location=map_location)
        if not isinstance(model, cls):
            raise CheckpointError(
                f"{Path(directory) / CONFIG_NAME}: holds a {type(model).__name__} ({model.model_type!r}), "
                f"not a {cls.__name__}"
            )
        return model


def refuse_run_folder(path: Any) -> None:
    """`UserError` naming the folder to pass (``best/``) when ``path`` is a bdh run folder, not a model folder."""
    if not isinstance(path, (str, os.PathLike)):
        return
    folder = Path(path)
    try:
        if not folder.is_dir() or (folder / "config.json").exists():
            return
        has_best = (folder / "best" / "config.json").is_file()
        if not (has_best or (folder / "config.yaml").is_file()):
            return
    except OSError:  # a repo id such as "someone/model" that is no folder here
        return
    if has_best:
        raise UserError(f"{folder} is a bdh run folder, not a model folder: pass {folder / 'best'} to from_pretrained")
    raise UserError(
        f"{folder} is a bdh run folder with no saved model yet (best/ is written at its first evaluation); "
        "from_pretrained takes a model folder such as RUN/best"
    )


def read_model_config(directory: str | os.PathLike) -> tuple[type, Any]:
    """The model class and validated config of a model folder (defaults for fields an older ``config.json`` lacks)."""
    refuse_run_folder(directory)
    directory = Path(directory)
    if not directory.is_dir():
        what = "not a folder" if os.path.lexists(directory) else "no such model folder"
        raise CheckpointError(f"{directory}: {what}")
    path = directory / CONFIG_NAME
    raw = read_json(path)
    if not isinstance(raw, dict):
        raise CheckpointError(f"{path}: expected a JSON object")
    raw = dict(raw)
    model_type = raw.pop("model_type", None)
    version = raw.pop("format_version", None)
    raw.pop("bdh_version", None)
    from bdh import registry

    if model_type not in registry.names("model"):
        raise CheckpointError(
            f"{path}: unknown model_type {model_type!r} (known: {', '.join(registry.names('model'))})"
        )
    if version != FORMAT_VERSION:
        raise CheckpointError(f"{path}: format_version {version!r} is not supported (this bdh reads {FORMAT_VERSION})")
    cls = registry.get_model(model_type)
    try:
        config = cls.config_class.from_dict(raw)
    except (TypeError, ValueError) as exc:
        raise CheckpointError(f"{path}: {exc}") from None
    return cls, config


def load_pretrained(
    directory: str | os.PathLike, map_location: str | torch.device = "cpu", **runtime: Any
) -> torch.nn.Module:
    """Any registered model from a ``save_pretrained`` folder, in eval mode; ``runtime``: only ``RUNTIME_FIELDS``."""
    directory = Path(directory)
    cls, config = read_model_config(directory)
    if runtime:
        allowed = runtime_fields(cls.config_class)
        bad = sorted(set(runtime) - allowed)
        if bad:
            raise UserError(
                f"load_pretrained: {bad[0]!r} is not a runtime option of {cls.__name__} "
                f"(those are: {', '.join(sorted(allowed)) or 'none'}); the architecture comes from config.json"
            )
        config = config.replace(**runtime)
    note = check_config_changes(directory, config)
    tensors = load_tensors(directory / WEIGHTS_NAME)
    with torch.device("meta"):  # the shapes the config asks for, no memory taken (a config.json edited to 1e12)
        shaped = cls(config)
    check_state_dict(shaped, tensors, str(directory / WEIGHTS_NAME))
    if note is not None:
        warnings.warn(ConfigWarning(note), stacklevel=2)
    model = cls(config)
    model.load_state_dict(tensors)
    return model.to(map_location).eval()
