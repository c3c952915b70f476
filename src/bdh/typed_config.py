"""`TypedConfig`: the mixin of every typed configuration dataclass (models, baselines, tasks).

It gives one-line validation errors that name the field (``GPTConfig.n_head: must be ...``) and a JSON
round trip that refuses unknown keys (what ``config.json`` files and run configs rely on).
"""

from __future__ import annotations

import dataclasses
import math
import numbers
from typing import Any

from bdh.errors import UserError


def plain(value: Any) -> Any:
    """Tuples (and lists) as lists, recursively: JSON-able values."""
    if isinstance(value, (tuple, list)):
        return [plain(v) for v in value]
    return value


class TypedConfig:
    """Mixin for config dataclasses: field checks and ``to_dict`` / ``from_dict`` / ``replace``."""

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
        return {f.name: plain(getattr(self, f.name)) for f in dataclasses.fields(self) if f.init}  # type: ignore[arg-type]

    @classmethod
    def from_dict(cls, data: dict[str, Any]):
        """Build from a mapping, refusing unknown keys with a one-line error."""
        if not isinstance(data, dict):
            raise UserError(f"{cls.__name__}: expected a mapping of fields, got {type(data).__name__}")
        known = {f.name for f in dataclasses.fields(cls) if f.init}  # type: ignore[arg-type]
        unknown = sorted(set(data) - known)
        if unknown:
            raise UserError(f"{cls.__name__}: unknown field {unknown[0]!r}; known fields: {', '.join(sorted(known))}")
        return cls(**data)

    def replace(self, **changes: Any):
        """A copy with some fields changed (validated again)."""
        data = self.to_dict()
        data.update(changes)
        return type(self).from_dict(data)
