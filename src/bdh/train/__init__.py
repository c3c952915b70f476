"""The training engine: run configs, the trainer, checkpoints that lose nothing, data-parallel runs.

>>> from bdh.train import load_config, train
>>> config = load_config("run.yaml", ["optim.lr=3e-4"])   # doctest: +SKIP
>>> result = train(config)                                 # doctest: +SKIP
"""

from .config import ConfigError, RunConfig, load_config
from .trainer import Trainer, TrainingError, TrainResult, train

__all__ = ["ConfigError", "RunConfig", "TrainResult", "Trainer", "TrainingError", "load_config", "train"]
