"""Tasks: data generators and metrics. Tasks know nothing of models: they make (inputs, targets) and
score predictions. `bdh.registry` knows each built-in task by name."""

from .._lazy import exports

__all__ = ["IGNORE_INDEX", "Task"]

__getattr__, __dir__ = exports(__name__, {"IGNORE_INDEX": ".base:IGNORE_INDEX", "Task": ".base:Task"}, globals())
