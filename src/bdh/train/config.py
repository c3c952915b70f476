"""`RunConfig`: one typed configuration of a training run, read from YAML or JSON with ``--set`` overrides.

`load_config` makes it, once: the defaults (the main job, `bdh.train.main_job`), a config file, a preset and the
``--set`` overrides, or a resumed run's config.yaml and the overrides, into one mapping that `RunConfig.from_dict`
builds and checks. ``model`` and ``task`` name a registered model and task and carry the fields of their config
classes; the model's is completed from the task (``vocab_size``, ``causal``, ``seq_len`` where the run leaves
them out; `run_sections`) and handed to the model as it is. The other sections are the dataclasses below.
Every key is checked, one line naming it: an unknown key, a wrong type (``optim.lr: expected a finite number, got
'fast'``), a value outside its declared range (``optim.lr: must be a number > 0, got -1``). What a run checks
against this machine and its task is `bdh.train.build.plan_run`'s. The defaults are what ``bdh train`` runs
without arguments: a small BDH on the embedded Shakespeare corpus, about ten minutes on a 2-core CPU.

    model:    {name: bdh, n_layer: 4, n_embd: 128, ...}     fields of the model's config class
    task:     {name: text, seq_len: 128, data: null, ...}    fields of the task's config class
    optim:    lr, min_lr, warmup_steps, decay, weight_decay, betas, eps, grad_clip
    train:    batch_size, micro_batch_size, max_steps, max_tokens, target, bptt, seed, device, precision,
              parallel, ...
    eval:     every, batches, batch_size
    log:      every, progress, tensorboard, wandb, wandb_project, wandb_mode
    checkpoint: every, keep
    sample:   prompt, max_new_tokens, temperature, top_k, seed
    run_dir:  where the run folder goes (default runs/<timestamp>)
"""

from __future__ import annotations

import dataclasses
import json
import math
import os
import typing
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar, Literal

import yaml

from bdh.errors import UserError, did_you_mean
from bdh.outputs import file_problem

from ..model_api import complete
from ..registry import get_model, get_task
from ..tasks.base import MODEL_FIELDS, decided_fields
from ..typed_config import ConfigError, TypedConfig, apply_overrides, apply_values, bounded, check_value, plain
from . import main_job
from .errors import TrainingError


@dataclass
class OptimConfig(TypedConfig):
    """AdamW with linear warmup, then linear or cosine decay to ``min_lr`` (paper: 1e-3 -> 1e-4, wd 0.1)."""

    lr: float = bounded(1e-3, gt=0)  # peak learning rate after warmup.
    min_lr: float = bounded(1e-4, ge=0)  # the floor the decay ends at (at the last step).
    warmup_steps: int = bounded(100, ge=0)  # steps of linear warmup from 0 to ``lr``.
    # ``linear`` (the paper), ``cosine`` or ``constant`` after warmup.
    decay: Literal["linear", "cosine", "constant"] = "linear"
    weight_decay: float = bounded(0.1, ge=0)  # applied to matrices only (parameters with 2 or more dimensions).
    # betas, eps: AdamW's.
    betas: tuple[float, float] = bounded((0.9, 0.95), ge=0, lt=1)
    eps: float = bounded(1e-8, gt=0)
    grad_clip: float | None = bounded(1.0, gt=0)  # clip the global gradient norm to this value; null for no clipping.


@dataclass
class TrainConfig(TypedConfig):
    """How long and how to train."""

    batch_size: int = bounded(8, ge=1)  # sequences per optimiser step, over all processes (the global batch).
    # sequences per forward/backward on one process; the gradient is accumulated over ``batch_size / (micro_batch_size *
    # processes)`` micro-batches. Null: no accumulation.
    micro_batch_size: int | None = bounded(None, ge=1)
    max_steps: int = bounded(2000, ge=1)  # stop after this many optimiser steps.
    # or stop after this many training tokens (whichever comes first); null for no limit.
    max_tokens: int | None = bounded(None, ge=1)
    # or stop once the task's target metric on validation reaches this value; null for none.
    target: float | None = None
    # a time budget for the run. After the first few steps (`bdh.train.budget`) the trainer measures the time per step
    # and shortens the run (``max_steps``) so that it ends within the budget; the learning-rate schedule then decays
    # over the shortened run. The run also stops when the budget is spent, and warmup is capped at a tenth of the run.
    # The number of steps chosen is saved in checkpoints, so a resumed run trains the planned steps (the clock no longer
    # shortens or ends it; a resume before the first plan goes on timing where the run stopped), unless the resume sets
    # ``train.max_steps`` or ``train.max_tokens`` (``--set``): the run then goes on to that new limit, and the budget
    # counts again from the resume. Null: no budget (runs are then the same on every machine).
    max_minutes: float | None = bounded(10.0, gt=0)
    # ``window`` (each window from a zero state, full backprop inside it), ``tbptt`` (truncated backprop through time:
    # consecutive windows of one stream, the recurrent state carried across steps and detached; paper appendix B.2) or
    # ``none`` (no backprop through time: attention keys and values detached; paper section 7.2) or ``state-passing``
    # (each window starts from the final state the previous step left in its row, detached, though the windows are
    # unrelated: Buitrago Ruiz & Gu 2025's state passing, so that the model meets the states of long sequences; any
    # task, a model with ``init_state``/``step``).
    bptt: Literal["window", "tbptt", "none", "state-passing"] = "window"
    # with ``bptt: tbptt``, the length of the streams the state is carried over, in windows: null reads the training
    # split in ``batch_size`` lanes to their end (one stream per lane and pass); K starts every row on a new stream at a
    # random place every K steps, from an empty state (streams of K x seq_len tokens; consecutive batches as varied as
    # random windows).
    tbptt_windows: int | None = bounded(None, ge=1, lt=2**31)
    seed: int = bounded(1337, ge=0, lt=2**63)  # seeds the model initialisation, dropout and the data order.
    # ``auto`` (CUDA if available), ``cpu``, ``cuda`` or ``cuda:K`` (or ``mps``); checked to exist and be available here
    # when the config is loaded (`bdh.devices.resolve_device`).
    device: str = "auto"
    # ``auto`` (bf16 autocast where the device supports it, CUDA; fp32 on CPU), ``bf16`` or ``fp32``.
    precision: Literal["auto", "bf16", "fp32"] = "auto"
    compile: bool = False  # wrap the model in ``torch.compile`` (if compiling fails: one warning, then eager).
    # on CPU, keep freed memory in the process for reuse instead of returning large blocks to the system after every
    # free (glibc; `bdh.train.runtime.keep_freed_memory`): the large activations are then not page-faulted in again at
    # every step.
    keep_freed_memory: bool = True
    threads: int | None = bounded(None, ge=1, lt=2**31)  # CPU threads for PyTorch; null keeps PyTorch's default.
    check_memory: bool = True  # estimate the training memory of a micro-batch first and refuse batches that do not fit.
    # ``torch.use_deterministic_algorithms`` (bit-exact resume on CPU; may be slower on CUDA).
    deterministic: bool = False
    # how several processes (torchrun) share the work: ``ddp`` (DistributedDataParallel: every process holds the whole
    # model and optimiser state) or ``fsdp`` (FSDP2 ``fully_shard``: each holds 1/W of the weights, gradients and AdamW
    # moments, for models that do not fit one GPU; `bdh.train.runtime.sharded`). Checkpoints are full safetensors either
    # way. No effect in one process.
    parallel: Literal["ddp", "fsdp"] = "ddp"
    # fine-tuning: a model folder or run folder (resolved like every other command: ``best/``, else the newest
    # checkpoint) whose weights replace the fresh initialisation. Its model must be the run's model with the same
    # configuration; only the weights are taken (not the optimiser, step or schedule). A resumed run ignores it (the
    # checkpoint's weights win).
    init_from: str | None = None


@dataclass
class EvalConfig(TypedConfig):
    """Held-out evaluation.

    The final evaluation, whose numbers a run prints, keeps as its result and ``bdh eval RUN`` reproduces, reads
    more batches than the ones along the way: its estimate is the one people quote, and the noise of a
    sample of windows falls only with their number (docs/training.md, "How close the printed number is").
    """

    #: the final evaluation's batches per batch along the way, unless ``final_batches`` says: four times the
    #: windows halve the standard error of the estimate
    FINAL_FACTOR: ClassVar[int] = 4

    every: int = bounded(250, ge=0)  # evaluate every this many steps (and at the end); 0 only at the end.
    # validation batches per evaluation along the way; null for the whole validation split.
    batches: int | None = bounded(16, ge=1)
    # sequences per validation batch; null takes the training micro-batch size.
    batch_size: int | None = bounded(None, ge=1)
    # validation batches of the final evaluation; null: `FINAL_FACTOR` x ``batches`` (the whole split when ``batches``
    # is null).
    final_batches: int | None = bounded(None, ge=1)

    def final(self) -> int | None:
        """The batches of the final evaluation (None: the whole split)."""
        if self.final_batches is not None:
            return self.final_batches
        return None if self.batches is None else self.FINAL_FACTOR * self.batches


@dataclass
class LogConfig(TypedConfig):
    """Progress and logs."""

    every: int = bounded(1, ge=1)  # write a training record to metrics.jsonl every this many steps.
    # ``auto`` (a progress bar when stderr is a terminal; otherwise lines: one per evaluation and the training loss,
    # tokens/s and ETA every minute, `bdh.train.run.log.LINE_SECONDS`), ``bar``, ``lines`` or ``none``.
    progress: Literal["auto", "bar", "lines", "none"] = "auto"
    tensorboard: bool = True  # write TensorBoard event files to RUN_DIR/tensorboard when ``tensorboard`` is installed.
    wandb: bool = False  # also log the same scalars to Weights & Biases (needs ``pip install wandb``).
    wandb_project: str | None = None  # the W&B project; null: W&B's default (``WANDB_PROJECT``, else its own).
    # ``online``, ``offline`` (files under RUN_DIR/wandb, ``wandb sync`` later) or ``disabled``; null: W&B's default
    # (``WANDB_MODE``, else online).
    wandb_mode: Literal["online", "offline", "disabled"] | None = None


@dataclass
class CheckpointConfig(TypedConfig):
    """Checkpoints in RUN_DIR/checkpoints/step-N (also written at the end and on SIGINT/SIGTERM)."""

    every: int = bounded(250, ge=0)  # write one every this many steps; 0 only at the end and on a signal.
    keep: int = bounded(2, ge=1)  # keep the last this many (the best is kept apart in RUN_DIR/best).


@dataclass
class SampleConfig(TypedConfig):
    """The sample generated at the end of a run (language tasks); ``max_new_tokens: 0`` for none."""

    prompt: str = "ROMEO:"
    max_new_tokens: int = bounded(300, ge=0)
    temperature: float = bounded(0.8, ge=0)
    top_k: int | None = bounded(None, ge=1)
    seed: int = bounded(0, ge=-(2**63), lt=2**64)


#: the run config's sections that are `TypedConfig` dataclasses of their own (``model`` and ``task`` are `Section`s)
SECTIONS = ("optim", "train", "eval", "log", "checkpoint", "sample")
#: the keys of a run config's mapping (a YAML file, config.yaml), in the order `RunConfig.to_dict` writes them
KEYS = ("model", "task", *SECTIONS, "name", "run_dir")


@dataclass(frozen=True)
class Section:
    """A registered model or task (`bdh.registry`): its name and its typed config (`run_sections` builds both)."""

    name: str
    config: Any
    given: tuple[str, ...] | None = field(default=None, compare=False)  # the fields to_dict writes; None: all

    def to_dict(self) -> dict[str, Any]:
        fields = self.config.to_dict()
        return {"name": self.name, **(fields if self.given is None else {k: fields[k] for k in self.given})}


def _main_job(section: str) -> Section:
    """The main job's ``model`` or ``task`` section (`bdh.train.main_job`), typed."""
    return run_sections(None, None)[section]


@dataclass
class RunConfig(TypedConfig):
    """The whole run, built and checked once when it is read (`from_dict`); a section left out is the main job's."""

    model: Section = field(default_factory=lambda: _main_job("model"))
    task: Section = field(default_factory=lambda: _main_job("task"))
    optim: OptimConfig = field(default_factory=OptimConfig)
    train: TrainConfig = field(default_factory=TrainConfig)
    eval: EvalConfig = field(default_factory=EvalConfig)
    log: LogConfig = field(default_factory=LogConfig)
    checkpoint: CheckpointConfig = field(default_factory=CheckpointConfig)
    sample: SampleConfig = field(default_factory=SampleConfig)
    name: str | None = None  # a few words that tell the run apart: its folder is runs/<timestamp>-<name>
    run_dir: str | None = None  # the run folder (default runs/<timestamp>)
    source: str | None = field(default=None, repr=False, compare=False)  # the file it was read from

    #: ``quick``: the main job in about a minute (`bdh.train.main_job.PRESETS`; ``bdh train --quick``)
    PRESETS: ClassVar[dict[str, dict[str, Any]]] = main_job.PRESETS

    def __post_init__(self) -> None:
        """A typed section must be the config of the class its name registers."""
        super().__post_init__()
        for section, lookup in (("model", get_model), ("task", get_task)):
            name, typed = getattr(self, section).name, getattr(self, section).config
            if not isinstance(typed, getattr(lookup(name), "config_class", None)):
                raise ConfigError(f"{section}: a {type(typed).__name__} is not the config of the {section} {name!r}")

    def inputs(self) -> list[str]:
        """The files it reads (its run folder may not hold them): ``source``, the task's data, ``train.init_from``."""
        task = getattr(self.task.config, "input_paths", list)()  # a task config of its own may not mix TaskConfig in
        return [str(p) for p in (self.source, *task, self.train.init_from) if p is not None]

    def make_task(self) -> Any:
        """The run's task, built on its config."""
        return get_task(self.task.name)(self.task.config)

    # ------------------------------------------------------------------ (de)serialisation
    @classmethod
    def _key(cls, field: str) -> str:
        """A run config's keys are named as themselves (``optim``, ``name``; their fields ``optim.lr``)."""
        return field

    def to_dict(self) -> dict[str, Any]:
        """The run config as its mapping (config.yaml): ``model`` and ``task`` as ``{name: ..., **fields}``."""
        return {"model": self.model.to_dict(), "task": self.task.to_dict()} | {
            key: plain(getattr(self, key)) for key in KEYS[2:]
        }

    @classmethod
    def from_dict(cls, data: Any, prefix: str | None = None) -> RunConfig:
        """Build and check (`validate`), refusing unknown keys and wrong types (with the key's dotted name)."""
        hints = typing.get_type_hints(cls)
        _refuse_unknown(data, hints)
        kwargs = {key: _typed(data[key], hints[key], key) for key in KEYS[2:] if key in data}
        config = cls(**kwargs, **run_sections(data.get("model"), data.get("task")))
        config.validate()
        return config

    def validate(self) -> None:
        """The checks of the config alone, one line naming the key (`from_dict` makes them); those against this
        machine, its processes, the task and its data are `bdh.train.build.plan_run`'s."""
        for section in SECTIONS:
            check_finite(getattr(self, section), section)
            try:  # the sections check them when they are built: again here, for a config changed after loading
                getattr(self, section).check_ranges(section)
            except UserError as exc:
                raise ConfigError(str(exc)) from None
        for section in ("model", "task"):
            if dataclasses.is_dataclass(getattr(self, section).config):
                check_finite(getattr(self, section).config, section)
        if self.optim.min_lr > self.optim.lr:
            raise ConfigError(f"optim.min_lr: must not exceed lr = {self.optim.lr}, got {self.optim.min_lr}")
        if self.sample.max_new_tokens and not self.sample.prompt:
            raise ConfigError(
                "sample.prompt: empty; give at least one character, or set sample.max_new_tokens=0 for no sample"
            )
        if self.name is not None and (
            not self.name.strip() or self.name in (".", "..") or any(c in self.name for c in "/\\\0")
        ):
            raise ConfigError(f"name: {self.name!r} cannot be part of a folder name; give a word such as lr-3e-4")
        if self.log.wandb_project is not None and not self.log.wandb_project.strip():
            raise ConfigError("log.wandb_project: empty; give a project name or null")

    def to_yaml(self) -> str:
        return yaml.safe_dump(self.to_dict(), sort_keys=False, default_flow_style=False)


# ---------------------------------------------------------------------- checks
def check_finite(section: Any, prefix: str) -> None:
    """A `ConfigError` for the first float field of a section dataclass (or number in a list) that is nan or inf."""
    for f in dataclasses.fields(section):
        value = getattr(section, f.name)
        for item in value if isinstance(value, (tuple, list)) else (value,):
            if isinstance(item, float) and not math.isfinite(item):
                raise ConfigError(f"{prefix}.{f.name}: must be a finite number, got {item}")


def _refuse_unknown(data: Any, hints: dict[str, Any]) -> None:
    """A `ConfigError` for a run config that is not a mapping, an unknown section, or a key given in another section
    than its own (``train.lr``: did you mean ``optim.lr``?); the sections' own checks name every other unknown key."""
    if not isinstance(data, dict):
        raise ConfigError(f"config: expected a mapping of sections, got {type(data).__name__}")
    for key in data:
        if key not in KEYS:
            raise ConfigError(
                f"{key}: unknown field {key!r}{did_you_mean(key, KEYS)}; known sections: {', '.join(KEYS)}"
            )
    fields = {s: {f.name for f in dataclasses.fields(hints[s]) if f.init} for s in SECTIONS}
    for section in SECTIONS:
        given = data.get(section)
        for key in given if isinstance(given, dict) else ():
            owner = next((s for s in SECTIONS if key not in fields[section] and key in fields[s]), None)
            if owner is not None:
                raise ConfigError(
                    f"{section}.{key}: unknown field {key!r} (did you mean '{owner}.{key}'?); known fields: "
                    f"{', '.join(sorted(fields[section]))}"
                )


def _typed(value: Any, tp: Any, key: str) -> Any:
    """`bdh.typed_config.check_value` (a section: `TypedConfig.from_dict`), its errors as `ConfigError`."""
    try:
        return check_value(value, tp, key)
    except ConfigError:
        raise
    except UserError as exc:
        raise ConfigError(str(exc)) from None


# ---------------------------------------------------------------------- the model and task sections
def build_section_config(section: str, spec: dict[str, Any]) -> Any:
    """The registered class for ``spec['name']`` and its validated config object (model or task)."""
    cls = (get_model if section == "model" else get_task)(spec["name"])
    fields = {k: v for k, v in spec.items() if k != "name"}
    config_class = getattr(cls, "config_class", None)
    if config_class is None:
        raise ConfigError(f"{section}.name: {spec['name']!r} has no config_class")
    if dataclasses.is_dataclass(config_class):
        known = {f.name for f in dataclasses.fields(config_class) if f.init}
        for key in fields:
            if key not in known:
                raise ConfigError(
                    f"{section}.{key}: unknown key for {section} {spec['name']!r}{did_you_mean(key, known)}; "
                    f"known keys: {', '.join(sorted(known))}"
                )
    try:  # a TypedConfig names a bad field under the section (model.n_layer), not its class (BDHConfig.n_layer)
        if isinstance(config_class, type) and issubclass(config_class, TypedConfig):
            config = config_class.from_dict(fields, prefix=section)
        elif hasattr(config_class, "from_dict"):
            config = config_class.from_dict(fields)
        else:
            config = config_class(**fields)
    except ConfigError:
        raise
    except (TypeError, ValueError) as exc:
        first = str(exc).splitlines()[0]
        raise ConfigError(first if first.startswith(f"{section}.") else f"{section}: {first}") from None
    return cls, config


def run_sections(model: Any, task: Any) -> dict[str, Section]:
    """The typed ``model`` and ``task`` of a run config from their mappings as given (None: the main job's), each
    over the main job's section (`bdh.model_api.complete`) unless it names another class. The task comes first: the
    model fields it decides (`MODEL_FIELDS`, `bdh.tasks.base.decided_fields`) that the model section leaves out are
    the task's."""
    task = _over_main_job("task", task, main_job.task_section())
    task_cls, task_config = build_section_config("task", task)
    model = _over_main_job("model", model, main_job.model_section())
    config_class = getattr(get_model(model["name"]), "config_class", None)
    if dataclasses.is_dataclass(config_class):
        fields = {f.name for f in dataclasses.fields(config_class) if f.init}
        left = [key for key in MODEL_FIELDS if key in fields and key not in model]
        if left:
            decided = decided_fields(task_cls, task_config)
            model = {**model, **{key: decided[key] for key in left}}
    _, model_config = build_section_config("model", model)
    given = tuple(k for k in task if k != "name")
    return {"model": Section(model["name"], model_config), "task": Section(task["name"], task_config, given)}


def _over_main_job(section: str, given: Any, main: dict[str, Any]) -> dict[str, Any]:
    """The mapping of a section as given (None: nothing) over the main job's ``main``, or, naming another class,
    alone (its class's own defaults); a `ConfigError` without a name."""
    value = {} if given is None else given
    if not isinstance(value, dict):
        raise ConfigError(f"{section}: expected a mapping with 'name' and fields, got {value!r}")
    if "name" in value and value["name"] != main["name"]:
        merged = dict(value)
    else:
        merged = complete((get_model if section == "model" else get_task)(main["name"]).config_class, main, value)
    if not isinstance(merged.get("name"), str):
        raise ConfigError(f"{section}.name: required (a registered {section} name)")
    return merged


# ---------------------------------------------------------------------- files and overrides
def read_config_file(path: str | Path) -> dict[str, Any]:
    """The mapping in a YAML or JSON file (one-line errors for a missing or malformed file)."""
    path = Path(path)
    problem = file_problem(path)
    if problem == "is missing":
        raise FileNotFoundError(f"{path}: no such config file")
    if problem is not None:
        raise ConfigError(f"{path}: {problem}; a config is a YAML or JSON file")
    try:
        text = path.read_text(encoding="utf-8")
    except UnicodeDecodeError:
        raise ConfigError(f"{path}: not a text file (a config is UTF-8 YAML or JSON)") from None
    try:
        data = json.loads(text) if path.suffix == ".json" else yaml.safe_load(text)
    except (json.JSONDecodeError, yaml.YAMLError) as exc:
        first = str(exc).replace("\n", " ")
        raise ConfigError(f"{path}: not valid {'JSON' if path.suffix == '.json' else 'YAML'}: {first}") from None
    if data is None:
        data = {}
    if not isinstance(data, dict):
        raise ConfigError(f"{path}: expected a mapping of sections at the top level")
    return data


def load_run_config(run_dir: str | Path) -> dict[str, Any]:
    """The raw resolved config of a run folder (RUN_DIR/config.yaml)."""
    path = Path(run_dir) / "config.yaml"
    if not Path(run_dir).is_dir():
        if os.path.lexists(run_dir):
            raise TrainingError(f"{run_dir}: not a folder; give a run folder (it holds config.yaml)")
        raise FileNotFoundError(f"{run_dir}: no such run folder")
    if not os.path.lexists(path):
        raise FileNotFoundError(f"{run_dir}: not a run folder (no config.yaml)")
    anew = f"restore the file, or start the run anew with bdh train --run-dir {run_dir} --overwrite"
    try:
        data = read_config_file(path)
    except ConfigError as exc:  # not YAML, not text, not a regular file: damaged
        raise TrainingError(f"{exc}; {anew}") from None
    keys = list(KEYS)  # written whole at the start of a run, run_dir last
    missing = [k for k in keys if k not in data]
    if missing:
        what = "is empty" if not data else f"has no {missing[0]!r} ({len(missing)} of its {len(keys)} keys missing)"
        raise TrainingError(f"{path}: {what}: cut short or damaged; bdh does not guess the lost values: {anew}")
    return data


def load_config(
    path: str | Path | None = None,
    overrides: list[str] | None = None,
    preset: str | None = None,
    *,
    resume: str | Path | None = None,
) -> RunConfig:
    """The run config, built and checked once (`RunConfig.from_dict`): the defaults, updated by a YAML/JSON file,
    by the values of a ``preset`` (`RunConfig.PRESETS`: ``quick``), then by ``--set`` overrides; or, resuming
    the run folder ``resume``, its config.yaml updated by the overrides (it keeps its model and task)."""
    given = load_run_config(resume) if resume is not None else read_config_file(path) if path is not None else {}
    data = given if preset is None else apply_values(given, RunConfig.preset_values(preset).items())
    data = apply_overrides(data, overrides or [])
    if resume is not None:
        _keeps_its_model(resume, given, data)
    config = RunConfig.from_dict(data)
    config.source = None if path is None else str(path)  # an input: `RunConfig.inputs`
    return config


def _keeps_its_model(run: str | Path, saved: dict, changed: dict) -> None:
    """Refuse a ``--set model.name=`` / ``task.name=`` that would resume a run as another model or task."""
    for section in ("model", "task"):
        before, after = (
            d.get(section, {}).get("name") if isinstance(d.get(section), dict) else None for d in (saved, changed)
        )
        if before != after:
            raise UserError(
                f"--set {section}.name={after}: {run} is a run of {section} {before!r}, and a resumed run keeps its "
                f"{section}; train {after!r} in a new run (bdh train --set {section}.name={after} ...)"
            )


def sweep_model_section(model: dict[str, Any]) -> dict[str, Any]:
    """A sweep's ``model`` section as the sweep wrote it: a field of the main job's model
    (`bdh.train.main_job.model_section`) it leaves out takes the model config class's own default (BDH's: the
    official model's), never the main job's choice (ALiBi damping), so that a change of the main job's defaults
    cannot change what a bench suite or an experiment trains (`bdh.model_api.complete`)."""
    main = main_job.model_section()
    if model.get("name", main["name"]) != main["name"]:
        return dict(model)
    config_class = get_model(main["name"]).config_class
    own = {f.name: f.default for f in dataclasses.fields(config_class) if f.name in main and f.name not in model}
    return complete(config_class, own, model)


def sweep_run_config(
    model: dict[str, Any],
    task: dict[str, Any],
    run_dir: str | Path,
    *,
    lr: float,
    steps: int,
    batch_size: int,
    seed: int,
    eval: dict[str, Any],
    logs: int = 50,
    progress: str = "none",
    warmup_steps: int | None = None,
    sections: dict[str, dict[str, Any]] | None = None,
    **train: Any,
) -> RunConfig:
    """The run config of one run of a sweep (a ``bdh bench`` suite, an experiment), the one way they build it.

    ``steps`` optimiser steps of ``batch_size`` sequences of the ``task`` section, by the ``model`` section, with
    AdamW at peak learning rate ``lr``: warmed up over a tenth of the run (or ``warmup_steps``) and decayed
    linearly to a tenth of ``lr`` (the paper's schedule, appendix B.3, compressed), the trainer's defaults
    otherwise; a fixed length (no time budget), ``logs`` training records in all, one checkpoint at the end,
    no sample, no TensorBoard. ``eval``: the ``eval`` section; ``train``: further fields of the ``train`` section
    (``device``, ``threads``, ``precision``, ...); ``sections``: fields that replace those built here, by
    section (``{"model": {"damping": "alibi"}, "train": {...}}``).
    """
    data: dict[str, Any] = {
        "model": sweep_model_section(model),
        "task": dict(task),
        "optim": {
            "lr": lr,
            "min_lr": lr / 10,
            "warmup_steps": warmup_steps if warmup_steps is not None else max(1, steps // 10),
        },
        "train": {"batch_size": batch_size, "max_steps": steps, "max_minutes": None, "seed": seed, **train},
        "eval": dict(eval),
        "log": {"every": max(1, steps // logs), "progress": progress, "tensorboard": False},
        "checkpoint": {"every": 0, "keep": 1},
        "sample": {"max_new_tokens": 0},
        "run_dir": str(run_dir),
    }
    for section, fields in (sections or {}).items():
        data[section] = {**data[section], **fields}
    return RunConfig.from_dict(data)
