"""The one config mechanism: every config class is a TypedConfig whose from_dict checks keys and types."""

from __future__ import annotations

import dataclasses
import importlib
import pkgutil
import typing

import pytest

import bdh
from bdh.errors import UserError
from bdh.typed_config import TypedConfig, check_value


def _config_classes() -> list[type]:
    for info in pkgutil.walk_packages(bdh.__path__, "bdh."):
        if not info.name.startswith(("bdh.hf", "bdh.cli")):
            importlib.import_module(info.name)
    found, todo = set(), [TypedConfig]
    while todo:
        for sub in todo.pop().__subclasses__():
            if sub.__module__.startswith("bdh.") and sub not in found:
                found.add(sub)
                todo.append(sub)
    return sorted((c for c in found if dataclasses.is_dataclass(c)), key=lambda c: c.__qualname__)


CLASSES = _config_classes()


def test_the_package_s_configs_are_typed_configs():
    names = {c.__name__ for c in CLASSES}
    assert {"BDHConfig", "GPTConfig", "TextConfig", "MQARConfig", "OptimConfig", "TrainConfig"} <= names


@pytest.mark.parametrize("cls", CLASSES, ids=lambda c: c.__qualname__)
def test_every_config_round_trips_and_has_resolvable_hints(cls):
    typing.get_type_hints(cls)  # from_dict checks keys against these
    try:
        default = cls()
    except (TypeError, UserError):
        pytest.skip(f"{cls.__name__} has required fields")
    assert cls.from_dict(default.to_dict()) == default
    with pytest.raises(UserError, match=rf"^{cls.__name__}\.no_such_field: unknown field 'no_such_field'"):
        cls.from_dict({"no_such_field": 1})


@pytest.mark.parametrize(
    "value, tp, message",
    [
        ("fast", float, r"lr: expected a finite number, got 'fast'"),
        (float("nan"), float, r"lr: must be a finite number, got nan"),
        ("1e400", float | None, r"lr: must be a finite number, got inf"),
        (True, int, r"lr: expected an integer, got True"),
        (2.5, int, r"lr: expected an integer, got 2.5"),
        ([0.9], tuple[float, float], r"lr: expected a list of 2 numbers, got \[0.9\]"),
        ("cos", typing.Literal["linear", "cosine"], r"lr: expected one of 'linear', 'cosine', got 'cos'"),
    ],
)
def test_check_value_names_the_key(value, tp, message):
    with pytest.raises(UserError, match="^" + message + "$"):
        check_value(value, tp, "lr")


def test_check_value_converts_what_configs_write():
    assert check_value(1e6, int, "k") == 1_000_000 and check_value("1e-3", float, "k") == 0.001
    assert check_value([0.9, 0.95], tuple[float, float], "k") == (0.9, 0.95)
    assert check_value(None, int | None, "k") is None


def test_nested_sections_are_checked_under_their_prefix():
    from bdh.train.config import ConfigError, RunConfig

    with pytest.raises(ConfigError, match=r"^optim\.lr: expected a finite number, got 'fast'$"):
        RunConfig.from_dict({"optim": {"lr": "fast"}})
    with pytest.raises(ConfigError, match=r"^train\.nope: unknown field 'nope'"):
        RunConfig.from_dict({"train": {"nope": 1}})
