"""Tasks: data generators and metrics. Tasks know nothing of models: they make (inputs, targets) and
score predictions. Each task module registers itself in `bdh.registry` by name."""

from .._lazy import exports

__all__ = ["IGNORE_INDEX", "Task"]

__getattr__, __dir__ = exports(__name__, {"IGNORE_INDEX": ".base:IGNORE_INDEX", "Task": ".base:Task"}, globals())
