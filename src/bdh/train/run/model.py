"""The model of a run or model folder, loaded as the run ran it (``bdh eval``, ``bdh generate``)."""

from __future__ import annotations

from pathlib import Path
from typing import Any


def load_run_model(
    source: str | Path, checkpoint: str | None = None, device: Any = "auto", **runtime: Any
) -> tuple[Any, Path]:
    """The model of a run or model folder (`bdh.train.run.checkpoint.resolve_model_dir`: checksums verified) and
    that folder, on ``device``: the one door through which every command and script loads a model. A run folder's
    model runs as the run ran it (the runtime fields of its config.yaml: the attention form, the chunk size; an older
    config.json kept the architecture only); a model folder's as its config.json says; ``runtime`` replaces runtime
    fields (`bdh.model.io.load_pretrained`: any other field is refused)."""
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
    """`load_run_model` for ``bdh generate``: the model and its folder, refused in one line (`bdh.errors.UserError`)
    unless it can generate bytes on a recurrent state (a `bdh.train.recurrent.StreamingModel` of 256 tokens) with
    ``top_k`` (at most its vocabulary)."""
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
    """The warning for generating ``length`` bytes (prompt included) with an undamped model (no U, Eq. 8) of the
    text run ``source`` past the longest context it was trained on (`bdh.train.run.model.trained_context`): its
    state then sums more tokens than it ever met, and the text degrades (docs/long-context.md). None otherwise,
    and for a model folder (no config.yaml to say what it met)."""
    from ..config import RunConfig
    from .folder import load_run_config

    if getattr(model.config, "damping", None) is not None or not (Path(source) / "config.yaml").is_file():
        return None
    config = RunConfig.from_dict(load_run_config(source))
    if config.task_name != "text":
        return None
    trained = trained_context(config)
    if length <= trained:
        return None
    return (
        f"warning: this model has no state damping and met contexts of at most {trained:,} bytes in training; "
        f"past that its text degrades (train with --set model.damping=alibi: docs/long-context.md)"
    )


def trained_context(config) -> int:
    """The longest context a run's model met in training, in tokens (``config``: a `RunConfig` of the text
    task): ``seq_len`` for window training, the stream length for truncated BPTT (``train.tbptt_windows``
    windows, else a whole lane of the training split)."""
    T = int(getattr(config.task, "seq_len", 256))
    t = config.train
    if t.bptt != "tbptt":
        return T
    if t.tbptt_windows is not None:
        return T * t.tbptt_windows
    from bdh.registry import get_task

    task = get_task(config.task_name)(config.task)
    return T * task.lane_windows("train", t.batch_size)
