"""The training engine: run configs, the trainer, checkpoints that lose nothing, data-parallel runs.

>>> from bdh.train import load_config, train
>>> config = load_config("run.yaml", ["optim.lr=3e-4"])   # doctest: +SKIP
>>> result = train(config)                                 # doctest: +SKIP

The run's config (`config`), what it builds (`parts`) and the loop (`trainer`), with the loop's helpers beside them
(`evaluate`, `budget`, `schedule`, `signals`, `rng`, `recurrent`, `errors`); where and how a process trains in
`runtime` (device, hardware, distributed, sharded, memory); a run's folder and what is read back from a finished
run in `run` (folder, checkpoint, log, listing, report, model).

The names below are imported on first use (see `bdh._lazy`), so that a light module of the package (e.g.
`bdh.train.main_job`, the main job and its presets) can be read without importing PyTorch.
"""

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
