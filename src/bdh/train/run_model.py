"""The model of a run or model folder, loaded as the run ran it (``bdh eval``, ``bdh generate``)."""

from __future__ import annotations

from pathlib import Path
from typing import Any


def load_run_model(source: str | Path, checkpoint: str | None = None, device: Any = "auto") -> tuple[Any, Path]:
    """The model of a run or model folder and the folder it came from (`bdh.train.checkpoint.resolve_model_dir`:
    the run's best checkpoint, else the latest, or ``checkpoint``; damaged files refused, checksums verified), on
    ``device`` (a name or `torch.device`, checked by `bdh.devices.resolve_device`).

    The model of a run folder runs as the run ran it (the runtime fields of the ``model`` section of its
    config.yaml: the attention form, the chunk size; the same as its config.json unless that was written by an
    older bdh, which kept the architecture only), that of a model folder as its config.json says."""
    from bdh.devices import resolve_device
    from bdh.model.io import load_pretrained, read_model_config, runtime_fields

    from .checkpoint import resolve_model_dir
    from .run_folder import load_run_config

    folder = resolve_model_dir(source, checkpoint)
    runtime = {}
    if folder != Path(source) and (Path(source) / "config.yaml").is_file():
        section = load_run_config(source).get("model")
        cls, _ = read_model_config(folder)
        if isinstance(section, dict):
            runtime = {k: section[k] for k in sorted(runtime_fields(cls.config_class)) if k in section}
    return load_pretrained(folder, map_location=resolve_device(str(device)), **runtime), folder
