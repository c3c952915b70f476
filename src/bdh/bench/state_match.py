"""Zoo rows at BDH's state size (Zoology's axis): a baseline at BDH's width with the power-of-2 key width whose
``state_size()`` is nearest BDH's; such a row matches the state, not the parameter count."""

from __future__ import annotations

import dataclasses
import math
from typing import Any

from .spec import BenchError

#: model -> (its config field that sets the state's key width, the values tried): D_k / d (DeltaNet, Gated DeltaNet,
#: GLA: state H d_k d_v), Mamba's N per inner channel (state e N)
KEY_WIDTHS: dict[str, tuple[str, tuple[float, ...]]] = {
    "deltanet": ("expand_k", tuple(2.0**i for i in range(-1, 5))),
    "gated-deltanet": ("expand_k", tuple(2.0**i for i in range(-1, 5))),
    "gla": ("expand_k", tuple(2.0**i for i in range(-1, 5))),
    "mamba": ("d_state", tuple(2**i for i in range(11))),
}


def _build(model: str, fields: dict[str, Any]) -> Any:
    """The registered ``model``'s config from ``fields`` (those its config class has) and the model built from it."""
    from bdh.registry import get_model

    cls = get_model(model)
    names = {f.name for f in dataclasses.fields(cls.config_class)}
    config = cls.config_class(**{k: v for k, v in fields.items() if k in names})
    return config, cls(config)


def state_matched_config(model: str, target: int, *, width: int, **fields: Any) -> Any:
    """``model`` at ``width`` with the `KEY_WIDTHS` entry whose state is nearest ``target`` (ties: smaller); ``fields``:
    the rest."""
    if model not in KEY_WIDTHS:
        raise BenchError(
            f"state-matched rows size {', '.join(KEY_WIDTHS)} by their key width; {model!r} has none to set"
        )
    field, values = KEY_WIDTHS[model]
    best = None
    for value in values:
        try:
            config, built = _build(model, {**fields, "n_embd": width, field: value})
        except ValueError:  # a key width that does not split over the heads at this width
            continue
        miss = abs(math.log(built.state_size() / target))
        if best is None or miss < best[0] - 1e-12:
            best = (miss, config)
    if best is None:
        raise BenchError(f"{model!r}: no {field} in {list(values)} builds at width {width}")
    return best[1]
