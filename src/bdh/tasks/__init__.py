"""Tasks: data generators and metrics, knowing nothing of models; `bdh.registry` knows each by name."""

from .._lazy import exports

__all__ = ["IGNORE_INDEX", "Task"]

__getattr__, __dir__ = exports(__name__, {"IGNORE_INDEX": ".base:IGNORE_INDEX", "Task": ".base:Task"}, globals())
