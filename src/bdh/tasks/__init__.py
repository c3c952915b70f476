"""Tasks: data generators and metrics. Tasks know nothing of models: they make (inputs, targets) and
score predictions. Each task module registers itself in `bdh.registry` by name."""

from .base import IGNORE_INDEX, Task

__all__ = ["IGNORE_INDEX", "Task"]
