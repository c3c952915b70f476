"""`TypedConfig`: the one configuration mechanism of the package (models, baselines, tasks, run sections,
experiments).

A config is a dataclass that mixes in `TypedConfig`. `TypedConfig.from_dict` (what ``config.json`` files,
YAML run configs and ``--set`` overrides go through) checks every key against the field's type hint with
`check_value`: an unknown key, a value of the wrong type, NaN or infinity are refused with one line that
names the key (``optim.lr: expected a finite number, got 'fast'``); nested config dataclasses are checked
the same way under their own prefix. Rules that types cannot say (ranges, fields that exclude each other)
live in the class's ``__post_init__``, written with the ``_check_*`` helpers below, so they hold however
the object is built.
"""

from __future__ import annotations

import dataclasses
import math
import numbers
import types
import typing
from collections.abc import Sequence
from typing import Any, Literal

from bdh.errors import UserError


def plain(value: Any) -> Any:
    """Tuples (and lists) as lists, recursively; config dataclasses as dicts: JSON-able values."""
    if isinstance(value, (tuple, list)):
        return [plain(v) for v in value]
    if isinstance(value, TypedConfig):
        return value.to_dict()
    return value


def type_name(tp: Any) -> str:
    """How a type hint reads in an error message."""
    origin = typing.get_origin(tp)
    if origin is Literal:
        return "one of " + ", ".join(repr(a) for a in typing.get_args(tp))
    if origin in (typing.Union, types.UnionType):
        args = [a for a in typing.get_args(tp) if a is not type(None)]
        tail = " or null" if len(args) < len(typing.get_args(tp)) else ""
        return " or ".join(type_name(a) for a in args) + tail
    if origin is tuple or origin in (list, Sequence):
        args = typing.get_args(tp)
        if origin is tuple and args and args[-1] is not Ellipsis:
            return f"a list of {len(args)} {_plural(args[0])}"
        return f"a list of {_plural(args[0]) if args else 'values'}"
    return {int: "an integer", float: "a finite number", bool: "true or false", str: "a string"}.get(tp, str(tp))


def _plural(tp: Any) -> str:
    return {int: "integers", float: "numbers", str: "strings", bool: "booleans"}.get(tp, "values")


class _NotFinite(UserError):
    """A number where one is expected, but NaN or infinite (said as such, not as a type mismatch)."""


def check_value(value: Any, tp: Any, key: str) -> Any:
    """``value`` converted to the type hint ``tp``, or a `UserError` naming ``key``.

    Integers are accepted for floats (and whole floats below 2^53 for integers: ``1e6`` steps); YAML 1.1
    reads ``1e-3`` as a string, which is accepted for a float. Floats must be finite. Hints this function
    does not know (``Any``, mappings) pass the value through, for ``__post_init__`` to check.
    """
    origin = typing.get_origin(tp)
    if dataclasses.is_dataclass(tp) and isinstance(tp, type) and issubclass(tp, TypedConfig):
        return value if isinstance(value, tp) else tp.from_dict({} if value is None else value, prefix=key)
    if origin in (typing.Union, types.UnionType):
        args = typing.get_args(tp)
        if value is None and type(None) in args:
            return None
        for arg in args:
            if arg is not type(None):
                try:
                    return check_value(value, arg, key)
                except _NotFinite:
                    raise
                except UserError:
                    pass
    elif origin is Literal:
        if value in typing.get_args(tp):
            return value
    elif origin is tuple or origin in (list, Sequence):
        converted = _sequence(value, tp, key)
        if converted is not None:
            return converted
    elif tp is bool:
        if isinstance(value, bool):
            return value
    elif tp is int:
        if isinstance(value, numbers.Integral) and not isinstance(value, bool):
            return int(value)
        if isinstance(value, float) and value.is_integer() and abs(value) < 2**53:
            return int(value)
    elif tp is float:
        number = _number(value)
        if number is not None and math.isfinite(number):
            return number
        if number is not None:
            raise _NotFinite(f"{key}: must be a finite number, got {number}")
    elif tp is str:
        if isinstance(value, str):
            return value
    else:
        return value
    raise UserError(f"{key}: expected {type_name(tp)}, got {value!r}")


def _number(value: Any) -> float | None:
    """``value`` as a float if it is a number (or a string of one), else None."""
    if isinstance(value, str):
        try:
            value = float(value)
        except ValueError:
            return None
    if isinstance(value, numbers.Real) and not isinstance(value, bool):
        return float(value)
    return None


def _sequence(value: Any, tp: Any, key: str) -> Any:
    if not isinstance(value, (list, tuple)):
        return None
    args = typing.get_args(tp)
    if typing.get_origin(tp) is tuple and args and args[-1] is not Ellipsis:
        if len(value) != len(args):
            return None
        return tuple(check_value(v, a, key) for v, a in zip(value, args))
    item = args[0] if args else Any
    items = [check_value(v, item, key) for v in value]
    return items if typing.get_origin(tp) is list else tuple(items)


class TypedConfig:
    """Mixin for config dataclasses: typed ``from_dict`` / ``to_dict`` / ``replace`` and field checks."""

    def _fail(self, field: str, message: str) -> None:
        raise UserError(f"{type(self).__name__}.{field}: {message}")

    def _check_int(self, field: str, minimum: int = 1) -> None:
        value = getattr(self, field)
        if isinstance(value, bool) or not isinstance(value, numbers.Integral) or value < minimum:
            self._fail(field, f"must be an integer >= {minimum}, got {value!r}")

    def _check_bool(self, field: str) -> None:
        if not isinstance(getattr(self, field), bool):
            self._fail(field, f"must be true or false, got {getattr(self, field)!r}")

    def _check_number(
        self, field: str, low: float, high: float, *, low_open: bool = False, high_open: bool = True
    ) -> None:
        value = getattr(self, field)
        bad = isinstance(value, bool) or not isinstance(value, numbers.Real) or math.isnan(value)
        if not bad:
            bad = value < low or value > high or (low_open and value == low) or (high_open and value == high)
        if bad:
            lo, hi = ("(" if low_open else "["), (")" if high_open else "]")
            self._fail(field, f"must be a number in {lo}{low}, {high}{hi}, got {value!r}")

    def _check_choice(self, field: str, choices: tuple[str, ...]) -> None:
        if getattr(self, field) not in choices:
            self._fail(field, f"must be one of {', '.join(choices)}; got {getattr(self, field)!r}")

    def to_dict(self) -> dict[str, Any]:
        """The constructor fields as plain JSON-able values (derived fields are not stored)."""
        return {f.name: plain(getattr(self, f.name)) for f in dataclasses.fields(self) if f.init}

    @classmethod
    def from_dict(cls, data: Any, prefix: str | None = None):
        """Build from a mapping, every key checked against its field's type hint (see `check_value`).

        ``prefix`` names the mapping in errors (``optim``, ``model``); default: the class name.
        """
        prefix = prefix or cls.__name__
        if not isinstance(data, dict):
            raise UserError(f"{prefix}: expected a mapping of fields, got {type(data).__name__}")
        fields = {f.name: f for f in dataclasses.fields(cls) if f.init}
        unknown = sorted(set(data) - set(fields))
        if unknown:
            key = unknown[0]
            raise UserError(f"{prefix}.{key}: unknown field {key!r}; known fields: {', '.join(sorted(fields))}")
        hints = typing.get_type_hints(cls)
        return cls(**{key: check_value(value, hints[key], f"{prefix}.{key}") for key, value in data.items()})

    def replace(self, **changes: Any):
        """A copy with some fields changed (validated again)."""
        data = self.to_dict()
        data.update(changes)
        return type(self).from_dict(data)
