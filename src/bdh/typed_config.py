"""`TypedConfig`: the one configuration mechanism of the package (models, baselines, tasks, run sections, experiments,
analysis options).

A config is a dataclass mixing in `TypedConfig`. `TypedConfig.from_dict` (``config.json``, YAML run configs, ``--set``)
checks every key against its field's type hint (`check_value`): an unknown key, a wrong type, NaN or infinity are
refused in one line naming the key (``optim.lr: expected a finite number, got 'fast'``). The values a field accepts
beyond its type are declared on the field::

    lr: float = bounded(1e-3, gt=0)                      # optim.lr: must be a number > 0, got -1
    positional: str = one_of("rope", POSITIONAL)         # ... must be one of rope, none; got 'alibi'
    models: tuple[str, ...] = one_of(("bdh",), known)    # choices read when a value is checked: known()

`TypedConfig.__post_init__` checks the declared ranges however the object is built; a class's own ``__post_init__``
calls ``super().__post_init__()`` first, then checks what relates several fields. ``--set`` items are read by
`parse_override` and applied by `apply_overrides`; named presets (``--quick``, ``--full``) are a class's
`TypedConfig.PRESETS` (name -> field values, dotted keys for sections), built by `TypedConfig.preset`."""

from __future__ import annotations

import dataclasses
import functools
import json
import math
import numbers
import types
import typing
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, ClassVar, Literal

import yaml

from bdh.errors import UserError, did_you_mean


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


def _singular(tp: Any) -> str:
    return {int: "an integer", float: "a number", str: "a string", bool: "a boolean"}.get(tp, "a value")


class _NotFinite(UserError):
    """A number where one is expected, but NaN or infinite (said as such, not as a type mismatch)."""


def check_value(value: Any, tp: Any, key: str) -> Any:
    """``value`` converted to the type hint ``tp``, or a `UserError` naming ``key``.

    Integers pass for floats (whole floats below 2^53 for integers: ``1e6``), YAML's string ``1e-3`` for a float; floats
    must be finite. Unknown hints (``Any``, mappings) pass the value through."""
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
            if abs(int(value)) > 2**64:  # beyond every seed and count (the declared ranges refuse less)
                raise UserError(f"{key}: a {len(str(abs(int(value))))}-digit integer, too large (at most 2^64)")
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
        try:
            return float(value)
        except OverflowError:  # an integer beyond every float: as infinite, refused as such
            return math.inf if value > 0 else -math.inf
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


# ---------------------------------------------------------------------- declared ranges
#: the key of a field's `Range` in its dataclass metadata
RANGE = "bdh.range"


@dataclass(frozen=True)
class Range:
    """What a config field accepts beyond its type hint (declare it with `bounded` or `one_of`)."""

    # ge, gt, le, lt: bounds on a number (on every item of a list of numbers): at most one lower bound (``ge`` or
    # ``gt``) and one upper bound (``le`` or ``lt``).
    ge: float | None = None
    gt: float | None = None
    le: float | None = None
    lt: float | None = None
    # the values allowed (instead of bounds), or a callable returning them, called at each check (`allowed`).
    choices: tuple[Any, ...] | Callable[[], Sequence[Any]] | None = None
    # said after the rule when a value is refused (``must be an integer >= 2 (sigma links two layers)``).
    why: str | None = None

    def __post_init__(self) -> None:
        bounds = (self.ge, self.gt, self.le, self.lt)
        if (self.ge is not None and self.gt is not None) or (self.le is not None and self.lt is not None):
            raise TypeError("Range: give at most one lower bound (ge or gt) and one upper bound (le or lt)")
        if (self.choices is None) == all(b is None for b in bounds):
            raise TypeError("Range: give bounds or choices (one of the two)")

    def contains(self, values: Sequence[Any], integer: bool) -> bool:
        """Whether every value of ``values`` is in the range; with ``integer``, each must also be an integer."""
        choices = self.allowed()
        if choices is not None:
            return all(v in choices for v in values)
        return all(self._within(v, integer) for v in values)

    def _within(self, value: Any, integer: bool) -> bool:
        """Whether the one value ``value`` is a number within the bounds."""
        if isinstance(value, bool) or not isinstance(value, numbers.Real):
            return False
        if not isinstance(value, numbers.Integral) and (integer or not math.isfinite(value)):
            return False
        return (
            (self.ge is None or value >= self.ge)
            and (self.gt is None or value > self.gt)
            and (self.le is None or value <= self.le)
            and (self.lt is None or value < self.lt)
        )

    def allowed(self) -> tuple[Any, ...] | None:
        """The values allowed now (the choices, or what their callable returns); None for a range of bounds."""
        if self.choices is None or isinstance(self.choices, tuple):
            return self.choices
        return tuple(self.choices())

    def bounds(self) -> str:
        """The bounds in words: ``>= 1``, ``> 0``, ``in [0, 1)``, ``<= 81``."""
        low = ("[", ">=", self.ge) if self.ge is not None else ("(", ">", self.gt) if self.gt is not None else None
        high = ("]", "<=", self.le) if self.le is not None else (")", "<", self.lt) if self.lt is not None else None
        if low and high:
            return f"in {low[0]}{_show(low[2])}, {_show(high[2])}{high[0]}"
        edge = low or high
        return f"{edge[1]} {_show(edge[2])}"


def _show(bound: float) -> str:
    """A bound as an error message writes it: ``0``, ``0.5``, ``1000000``, ``2**63``."""
    if isinstance(bound, float) and not bound.is_integer():
        return repr(bound)
    whole = int(bound)
    size = abs(whole)
    if size >= 2**16 and size & (size - 1) == 0:
        return f"{'-' if whole < 0 else ''}2**{size.bit_length() - 1}"
    return str(whole)


def bounded(
    default: Any = dataclasses.MISSING,
    *,
    ge: float | None = None,
    gt: float | None = None,
    le: float | None = None,
    lt: float | None = None,
    why: str | None = None,
) -> Any:
    """A dataclass field whose number(s) must lie within the bounds: ``lr: float = bounded(1e-3, gt=0)``."""
    return dataclasses.field(default=default, metadata={RANGE: Range(ge=ge, gt=gt, le=le, lt=lt, why=why)})


def one_of(default: Any, choices: Sequence[Any] | Callable[[], Sequence[Any]], *, why: str | None = None) -> Any:
    """A dataclass field whose value(s) must be one of ``choices`` (a tuple, or a callable read at each check)."""
    fixed = choices if callable(choices) else tuple(choices)
    return dataclasses.field(default=default, metadata={RANGE: Range(choices=fixed, why=why)})


@dataclass(frozen=True)
class Declared:
    """A field with a declared `Range`, and what its type hint says about it."""

    name: str  # the field.
    range: Range  # its `Range`.
    integer: bool  # the hint is ``int`` (or a list of ints): numbers must be integers.
    items: bool  # the hint is a list or tuple: the range holds for every item.
    nullable: bool  # the hint allows None, which passes.

    def admits(self, value: Any) -> bool:
        """Whether ``value`` is in the range."""
        if value is None and self.nullable:
            return True
        if self.items:
            return isinstance(value, (list, tuple)) and self.range.contains(value, self.integer)
        return self.range.contains((value,), self.integer)

    def message(self, value: Any) -> str:
        """Why ``value`` is refused: ``must be an integer >= 1, got 0``."""
        r = self.range
        choices = r.allowed()
        if choices is not None:
            rule = "one of " + ", ".join(str(c) for c in choices)
        elif self.items:
            rule = f"{'integers' if self.integer else 'numbers'} {r.bounds()}"
        else:
            rule = f"{'an integer' if self.integer else 'a number'} {r.bounds()}"
        rule += " or null" if self.nullable else ""
        rule += f" ({r.why})" if r.why else ""
        shown = list(value) if self.items and isinstance(value, tuple) else value
        return f"must be {rule}{';' if choices is not None else ','} got {shown!r}"


@functools.cache
def declared_ranges(cls: type) -> tuple[Declared, ...]:
    """The fields of the config dataclass ``cls`` that declare a `Range` (`bounded`, `one_of`), in order."""
    fields = [f for f in dataclasses.fields(cls) if RANGE in f.metadata]
    hints = typing.get_type_hints(cls) if fields else {}  # only a class that declares ranges needs its hints
    out = []
    for f in fields:
        declared = f.metadata[RANGE]
        hint, nullable = hints[f.name], False
        if typing.get_origin(hint) in (typing.Union, types.UnionType):
            args = [a for a in typing.get_args(hint) if a is not type(None)]
            nullable = len(args) < len(typing.get_args(hint))
            if len(args) != 1:
                raise TypeError(f"{cls.__name__}.{f.name}: a range needs one type (and maybe None), got {hint}")
            hint = args[0]
        items = typing.get_origin(hint) is tuple or typing.get_origin(hint) in (list, Sequence)
        if items:
            args = {a for a in typing.get_args(hint) if a is not Ellipsis}
            if len(args) != 1:
                raise TypeError(f"{cls.__name__}.{f.name}: a range on a list needs one item type, got {hint}")
            hint = args.pop()
        if declared.choices is None and hint not in (int, float):
            raise TypeError(f"{cls.__name__}.{f.name}: bounds need an int or float field, got {hint}")
        out.append(Declared(f.name, declared, hint is int, items, nullable))
    return tuple(out)


class TypedConfig:
    """Mixin for config dataclasses: typed ``from_dict`` / ``to_dict`` / ``replace``, declared ranges, presets."""

    #: named presets: name -> field values (a dotted key sets a field of a section, ``train.max_steps``)
    PRESETS: ClassVar[dict[str, dict[str, Any]]] = {}

    def __post_init__(self) -> None:
        """Check the declared ranges; a subclass with its own ``__post_init__`` calls this first."""
        self.check_ranges()

    @classmethod
    def _key(cls, field: str) -> str:
        """How errors name a field of this class: ``BDHConfig.n_layer`` (a subclass may name it otherwise)."""
        return f"{cls.__name__}.{field}"

    def _fail(self, field: str, message: str) -> None:
        raise UserError(f"{self._key(field)}: {message}")

    def check_ranges(self, prefix: str | None = None) -> None:
        """A one-line `UserError` for the first field outside its declared range, named ``prefix.field``."""
        for declared in declared_ranges(type(self)):
            value = getattr(self, declared.name)
            if not declared.admits(value):
                key = f"{prefix}.{declared.name}" if prefix else self._key(declared.name)
                raise UserError(f"{key}: {declared.message(value)}")

    def _check_bool(self, field: str) -> None:
        if not isinstance(getattr(self, field), bool):
            self._fail(field, f"must be true or false, got {getattr(self, field)!r}")

    def _coerce(self) -> None:
        """Every field converted to its type hint in place, for a config built from ``--set`` (YAML) values: ``1e-3``
        for a float, one value for a list of one, a number for a text field. Called first in ``__post_init__``."""
        hints = typing.get_type_hints(type(self))
        for f in dataclasses.fields(self):
            value, hint = getattr(self, f.name), hints[f.name]
            if typing.get_origin(hint) is tuple and not isinstance(value, (list, tuple)):
                value = (value,)
            elif hint is str and isinstance(value, numbers.Real) and not isinstance(value, bool):
                value = str(value)
            object.__setattr__(self, f.name, check_value(value, hint, self._key(f.name)))

    def to_dict(self) -> dict[str, Any]:
        """The constructor fields as plain JSON-able values (derived fields are not stored)."""
        return {f.name: plain(getattr(self, f.name)) for f in dataclasses.fields(self) if f.init}

    @classmethod
    def from_dict(cls, data: Any, prefix: str | None = None):
        """Build from a mapping, every key checked (`check_value`) and every given range, named ``prefix.key``."""
        if not isinstance(data, dict):
            raise UserError(f"{prefix or cls.__name__}: expected a mapping of fields, got {type(data).__name__}")

        def key_of(name: str) -> str:
            return f"{prefix}.{name}" if prefix else cls._key(name)

        fields = {f.name: f for f in dataclasses.fields(cls) if f.init}
        unknown = sorted(set(data) - set(fields))
        if unknown:
            key = unknown[0]
            raise UserError(
                f"{key_of(key)}: unknown field {key!r}{did_you_mean(key, fields)}; "
                f"known fields: {', '.join(sorted(fields))}"
            )
        hints = typing.get_type_hints(cls)
        values = {key: check_value(value, hints[key], key_of(key)) for key, value in data.items()}
        for declared in declared_ranges(cls):
            if declared.name in values and not declared.admits(values[declared.name]):
                raise UserError(f"{key_of(declared.name)}: {declared.message(data[declared.name])}")  # as given
        return cls(**values)

    @classmethod
    def field_value(cls, name: str, text: str, key: str | None = None, *, ranges: bool = True) -> Any:
        """The field ``name`` read from a flag's ``text`` as a ``--set`` value and checked as `from_dict` checks it (its
        range unless ``ranges=False``); a one-line `UserError` naming ``key``."""
        key = key or cls._key(name)
        hint = typing.get_type_hints(cls)[name]
        if typing.get_origin(hint) in (typing.Union, types.UnionType):
            hint = typing.Union[tuple(a for a in typing.get_args(hint) if a is not type(None))]  # noqa: UP007
        value = check_value(text if hint is str else read_value(text), hint, key)
        for declared in declared_ranges(cls) if ranges else ():
            if declared.name == name and not declared.admits(value):
                raise UserError(f"{key}: {declared.message(value)}")
        return value

    def replace(self, **changes: Any):
        """A copy with some fields changed (validated again)."""
        data = self.to_dict()
        data.update(changes)
        return type(self).from_dict(data)

    @classmethod
    def preset_values(cls, name: str) -> dict[str, Any]:
        """The field values of the preset ``name`` (`PRESETS`); a one-line `ConfigError` naming the known ones."""
        if name not in cls.PRESETS:
            known = ", ".join(sorted(cls.PRESETS)) or "none"
            hint = did_you_mean(name, cls.PRESETS)
            raise ConfigError(f"{cls._key('preset')}: unknown preset {name!r}{hint}; known presets: {known}")
        return dict(cls.PRESETS[name])

    @classmethod
    def preset(cls, name: str | None = None, **changes: Any):
        """The config of the preset ``name`` (None: the defaults) with ``changes`` on top, built by `from_dict`."""
        values = {} if name is None else cls.preset_values(name)
        return cls.from_dict(apply_values({}, {**values, **changes}.items()))


# ---------------------------------------------------------------------- --set overrides and lists
class ConfigError(UserError):
    """A config that cannot be used (a run config, a ``--set`` override, a list); the message names the key."""


def parse_override(item: str) -> tuple[str, Any]:
    """One ``--set`` item ``key.sub=value`` as (dotted key, value read by `read_value`); a one-line `ConfigError` for an
    item without ``=`` or with an empty key part."""
    key, sep, raw = item.partition("=")
    key = key.strip()
    if not sep:
        raise ConfigError(f"--set {item!r}: expected key=value, e.g. optim.lr=3e-4")
    if not key or any(not part for part in key.split(".")):
        raise ConfigError(f"--set {item!r}: bad key {key!r}")
    return key, read_value(raw)


def read_value(raw: str) -> Any:
    """Text read as YAML (``3e-4``, ``true``, ``null``, ``[1, 2]``); invalid YAML stays text, blank text is ``""``."""
    try:
        return yaml.safe_load(raw) if raw.strip() else ""
    except yaml.YAMLError:
        return raw


def apply_overrides(data: Mapping[str, Any], overrides: Iterable[str]) -> dict[str, Any]:
    """A copy of the nested mapping ``data`` with the ``--set`` items applied in order."""
    return apply_values(data, (parse_override(item) for item in overrides))


def apply_values(data: Mapping[str, Any], values: Iterable[tuple[str, Any]]) -> dict[str, Any]:
    """A copy of the nested ``data`` with the (dotted key, value) pairs set in order (missing sections made); a
    `ConfigError` when a part of the key is a value."""
    data = json.loads(json.dumps(data))  # deep copy of plain data
    for key, value in values:
        parts = key.split(".")
        node = data
        for i, part in enumerate(parts[:-1]):
            nxt = node.get(part)
            if nxt is None:
                nxt = node[part] = {}
            if not isinstance(nxt, dict):
                raise ConfigError(f"--set {key}: {'.'.join(parts[: i + 1])} is not a section")
            node = nxt
        node[parts[-1]] = value
    return data


def parse_list(text: Any, kind: type, what: str, *, unique: bool = False) -> tuple:
    """A comma-separated list of ``kind`` as a tuple (``"1e-3, 3e-3"`` -> ``(0.001, 0.003)``); a one-line `ConfigError`
    naming ``what`` for an empty list or item, a bad number or, with ``unique``, a repeat."""
    items = [t.strip() for t in str(text).split(",")]
    expected = f"expected a comma-separated list of {_plural(kind)}"
    if any(not t for t in items):
        raise ConfigError(f"{what}: {expected}, got {text!r}")
    values = []
    for t in items:
        try:
            value = kind(t)
        except ValueError:
            raise ConfigError(f"{what}: {t!r} is not {_singular(kind)} ({expected})") from None
        if kind is float and not math.isfinite(value):
            raise ConfigError(f"{what}: {t!r} is not a finite number ({expected})")
        values.append(value)
    if unique and len(set(values)) != len(values):
        raise ConfigError(f"{what}: repeated values in {text!r}")
    return tuple(values)
