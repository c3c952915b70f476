"""``bdh info`` and ``bdh convert``: model sizes, and official checkpoints to model folders."""

from __future__ import annotations

import argparse
import json
import os
from pathlib import Path

from bdh.errors import UserError
from bdh.model.config import BDHConfig
from bdh.model.sizes import describe, describe_table
from bdh.model_api import complete

from .checks import (
    add_overwrite,
    checked_model_dir,
    config_flags,
    config_values,
    flag_errors,
    integer,
    load_model,
    number,
)

#: the BDHConfig fields `bdh info` and `bdh convert` take as flags (generated from the fields)
INFO_FIELDS = [
    "n_layer",
    "n_embd",
    "n_head",
    "n_neurons",
    "mlp_internal_dim_multiplier",
    "vocab_size",
    "attention",
    "positional",
]
#: the batch and window of `bdh info`'s memory estimate where neither a flag nor a run folder gives them
DEFAULT_BATCH, DEFAULT_BLOCK = 8, 256
#: the official config's fields (the attention form and chunk size are chosen when the folder is loaded)
CONVERT_FIELDS = ["n_layer", "n_embd", "n_head", "mlp_internal_dim_multiplier", "vocab_size", "dropout"]


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "info",
        help="parameters, state size and training-memory estimate of a model",
        description="Print the parameter count (3 n D + 2 V D), the recurrent state size per layer (n D) and an "
        "estimate of training memory for a batch and window. The model comes from a model folder, a JSON file "
        "of BDHConfig fields, or flags (official defaults otherwise).",
    )
    p.add_argument(
        "source", nargs="?", help="a save_pretrained folder, a run folder, or a JSON file of BDHConfig fields"
    )
    config_flags(p, BDHConfig, INFO_FIELDS)
    p.add_argument(
        "--batch-size",
        type=integer(1),
        default=None,
        help=f"batch for the memory estimate (default: a run folder's micro-batch, else {DEFAULT_BATCH})",
    )
    p.add_argument(
        "--block-size",
        type=integer(1),
        default=None,
        help=f"tokens per sequence for the memory estimate (default: a run folder's seq_len, else {DEFAULT_BLOCK})",
    )
    p.add_argument("--json", action="store_true", help="print JSON instead of a table")
    p.set_defaults(func=cmd_info)

    c = sub.add_parser(
        "convert",
        help="convert an official pathwaycom/bdh checkpoint into a model folder",
        description="Read an official checkpoint (.pt, loaded with weights_only=True: nothing is unpickled) and "
        "write a save_pretrained folder (config.json + model.safetensors). Config fields not stored in the "
        "file default to the official BDHConfig defaults; config.json keeps every field (the attention form and "
        "chunk size may be chosen again when the folder is loaded).",
    )
    c.add_argument("checkpoint", help="the official .pt file (a state dict, or a dict with 'model')")
    c.add_argument("out_dir", help="the model folder to write")
    config_flags(c, BDHConfig, CONVERT_FIELDS)
    add_overwrite(c, "OUT_DIR")
    c.set_defaults(func=cmd_convert)

    m = sub.add_parser(
        "merge",
        help="merge two BDH models by concatenating their neurons (paper section 7.1)",
        description="Concatenate two BDH models along the neuron dimension, head by head (E, Dx, Dy and the RoPE "
        "frequencies), averaging the token embedding and readout; no training. With --average, plain weight "
        "averaging of two models of the same size instead (a control). A and B are run folders or model folders.",
    )
    m.add_argument("a", help="first model: a run folder (its best/ or newest checkpoint) or a model folder")
    m.add_argument("b", help="second model")
    m.add_argument("out_dir", help="the model folder to write")
    m.add_argument("--average", action="store_true", help="average the weights instead of concatenating")
    m.add_argument(
        "--weight", type=number(0, 1), default=0.5, help="with --average: the weight of B, in [0, 1] (default 0.5)"
    )
    add_overwrite(m, "OUT_DIR")
    m.set_defaults(func=cmd_merge)


def _config_from_args(args: argparse.Namespace) -> BDHConfig:
    from bdh.model.io import read_json, read_model_config

    fields: dict = {}
    if args.source:
        src = Path(args.source)
        if src.is_dir():
            model_dir = (
                src / "best"
                if (src / "best" / "config.json").is_file() and not (src / "config.json").is_file()
                else src
            )
            _, config = read_model_config(model_dir)
            if not isinstance(config, BDHConfig):
                raise UserError(f"{src}: not a BDH model folder")
            fields = config.to_dict()
            _warn_damaged_weights(model_dir, config)
        elif not os.path.lexists(src):
            raise FileNotFoundError(f"{src}: no such file or folder")
        else:  # a file; a FIFO or device is refused by name (read_json)
            data = read_json(src)
            if not isinstance(data, dict):
                raise UserError(f"{src}: expected a JSON object of BDHConfig fields, got a JSON {type(data).__name__}")
            if "model_type" in data:
                data = {k: v for k, v in data.items() if k not in ("model_type", "format_version", "bdh_version")}
            fields = BDHConfig.from_dict(data).to_dict()
    given = config_values(args, INFO_FIELDS)
    with flag_errors(BDHConfig, given):
        return BDHConfig.from_dict(complete(BDHConfig, fields, given))


def _warn_damaged_weights(model_dir: Path, config: BDHConfig) -> None:
    """One warning line on stderr when the folder's model.safetensors is there but cannot be read (cut short,
    corrupted, not a regular file; its header checked, no tensor read), or was saved with another architecture
    than config.json now says (an edited config.json; `bdh.model.io.config_changes`): `bdh info` reads config.json."""
    import sys

    from bdh.model.io import CONFIG_NAME, WEIGHTS_NAME, CheckpointError, check_weights_file, config_changes

    weights = model_dir / WEIGHTS_NAME
    if not os.path.lexists(weights):
        return
    try:
        check_weights_file(weights)
        changes = config_changes(model_dir, config)
    except CheckpointError as exc:
        print(f"bdh: warning: {exc}; the sizes below come from config.json alone", file=sys.stderr, flush=True)
        return
    if changes:
        edits = ", ".join(
            f"{k} is {now!r} but the weights were saved with {saved!r}" for k, (now, saved) in changes.items()
        )
        print(
            f"bdh: warning: {model_dir / CONFIG_NAME}: {edits}; the sizes below describe config.json, not the weights",
            file=sys.stderr,
            flush=True,
        )


def _run_layout(source: str | None) -> tuple[int | None, int | None]:
    """(micro-batch, tokens per training sequence) of the run folder ``source`` (its config.yaml), or Nones
    for anything else."""
    from bdh.train.trainer import load_run_config

    if source is None or not (Path(source) / "config.yaml").is_file():
        return None, None
    run = load_run_config(source)
    train, task = run.get("train") or {}, run.get("task") or {}
    batch = train.get("micro_batch_size") or train.get("batch_size")
    block = task.get("train_seq_len") or task.get("seq_len")
    return (batch if isinstance(batch, int) else None), (block if isinstance(block, int) else None)


def cmd_info(args: argparse.Namespace) -> int:
    config = _config_from_args(args)
    run_batch, run_block = _run_layout(args.source)
    batch = args.batch_size or run_batch or DEFAULT_BATCH
    block = args.block_size or run_block or DEFAULT_BLOCK
    if args.json:
        print(json.dumps(describe(config, batch_size=batch, block_size=block), indent=2))
    else:
        print(describe_table(config, batch_size=batch, block_size=block))
    return 0


def cmd_convert(args: argparse.Namespace) -> int:
    from bdh.model.interop import load_official_file
    from bdh.outputs import atomic_folder, check_output

    out_dir = check_output(
        args.out_dir, overwrite=args.overwrite, inputs=[args.checkpoint], folder=True, flag="OUT_DIR"
    )
    given = config_values(args, CONVERT_FIELDS)
    with flag_errors(BDHConfig, given):
        model = load_official_file(args.checkpoint, **given)
    with atomic_folder(out_dir) as tmp:
        model.save_pretrained(tmp)
    print(f"wrote {out_dir} ({model.num_params():,} parameters, n={model.config.n}, D={model.config.n_embd})")
    return 0


def cmd_merge(args: argparse.Namespace) -> int:
    from bdh.model.merge import average, concatenate
    from bdh.outputs import atomic_folder, check_output

    dirs = [checked_model_dir(args.a), checked_model_dir(args.b)]
    out = check_output(
        args.out_dir, overwrite=args.overwrite, inputs=[args.a, args.b, *dirs], folder=True, flag="OUT_DIR"
    )
    a, b = (load_model(d) for d in dirs)
    merged = average(a, b, args.weight) if args.average else concatenate(a, b)
    with atomic_folder(out) as tmp:
        merged.save_pretrained(tmp)
    how = (
        f"averaged (weight of B {args.weight})"
        if args.average
        else f"n = {a.config.n} + {b.config.n} = {merged.config.n}"
    )
    print(f"wrote {out}: {how}, {merged.num_params():,} parameters")
    return 0
