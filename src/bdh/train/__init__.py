"""The training engine: run configs, the trainer, checkpoints that lose nothing, data-parallel runs.

>>> from bdh.train import load_config, train
>>> config = load_config("run.yaml", ["optim.lr=3e-4"])   # doctest: +SKIP
>>> result = train(config)                                 # doctest: +SKIP

`config`, `build`, `trainer`, `runtime` (where and how a process trains), `run` (a run's folder); imported on
first use."""

from .._lazy import exports

__all__ = ["ConfigError", "RunConfig", "TrainResult", "Trainer", "TrainingError", "load_config", "train"]

__getattr__, __dir__ = exports(
    __name__,
    {
        "ConfigError": ".config:ConfigError",
        "RunConfig": ".config:RunConfig",
        "load_config": ".config:load_config",
        "Trainer": ".trainer:Trainer",
        "TrainingError": ".trainer:TrainingError",
        "TrainResult": ".trainer:TrainResult",
        "train": ".trainer:train",
    },
    globals(),
)
