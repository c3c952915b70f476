"""The model of a run or model folder, loaded as the run ran it (``bdh eval``, ``bdh generate``)."""

from __future__ import annotations

from pathlib import Path
from typing import Any


def load_run_model(
    source: str | Path, checkpoint: str | None = None, device: Any = "auto", **runtime: Any
) -> tuple[Any, Path]:
    """The model of a run or model folder and that folder, on ``device``: the one door every command loads through. A
    run's model runs as the run ran it; ``runtime`` replaces runtime fields only."""
    from bdh.devices import resolve_device
    from bdh.model.io import load_pretrained, read_model_config, runtime_fields

    from .checkpoint import resolve_model_dir
    from .folder import load_run_config

    folder = resolve_model_dir(source, checkpoint)
    ran: dict[str, Any] = {}
    if folder != Path(source) and (Path(source) / "config.yaml").is_file():
        section = load_run_config(source).get("model")
        cls, _ = read_model_config(folder)
        if isinstance(section, dict):
            ran = {k: section[k] for k in sorted(runtime_fields(cls.config_class)) if k in section}
    return load_pretrained(folder, map_location=resolve_device(str(device)), **{**ran, **runtime}), folder


def load_generator(
    source: str | Path, checkpoint: str | None = None, device: Any = "auto", *, top_k: int | None = None
) -> tuple[Any, Path]:
    """`load_run_model` for ``bdh generate``: refused in one line unless it streams 256-token bytes, with
    ``top_k`` valid."""
    from bdh.errors import UserError

    from ..recurrent import StreamingModel

    model, folder = load_run_model(source, checkpoint, device)
    if not isinstance(model, StreamingModel):
        raise UserError(f"{source}: this model cannot generate on a recurrent state")
    if getattr(model.config, "vocab_size", 256) < 256:
        raise UserError(f"{source}: a byte-level prompt needs vocab_size 256, the model has {model.config.vocab_size}")
    if top_k is not None and top_k > model.config.vocab_size:
        raise UserError(f"--top-k {top_k}: the model has {model.config.vocab_size} tokens; give at most that")
    return model, folder


def past_training_warning(source: str | Path, model: Any, length: int) -> str | None:
    """The warning for ``length`` bytes from an undamped model (no U, Eq. 8) past the longest context it trained on
    (docs/long-context.md); else None, also for a model folder."""
    from ..config import RunConfig
    from .folder import load_run_config

    if getattr(model.config, "damping", None) is not None or not (Path(source) / "config.yaml").is_file():
        return None
    config = RunConfig.from_dict(load_run_config(source))
    if config.task.name != "text":
        return None
    trained = trained_context(config)
    if length <= trained:
        return None
    return (
        f"warning: this model has no state damping and met contexts of at most {trained:,} bytes in training; "
        f"past that its text degrades (train with --set model.damping=alibi: docs/long-context.md)"
    )


def trained_context(config) -> int:
    """The longest context a run's model met in training: ``seq_len``, or the stream length for truncated BPTT."""
    T = int(getattr(config.task.config, "seq_len", 256))
    t = config.train
    if t.bptt != "tbptt":
        return T
    if t.tbptt_windows is not None:
        return T * t.tbptt_windows
    task = config.make_task()
    return T * task.lane_windows("train", t.batch_size)
