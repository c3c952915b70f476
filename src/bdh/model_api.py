"""What the trainer needs from a model config: the `ModelConfigAPI` protocol, and `ModelConfig`, its shared defaults.

The trainer never names a model; of its config it asks ``RUNTIME_FIELDS`` (fields that change how the model runs,
not what its weights mean), ``REPLACES`` (the fields a given field drops from a default section: `complete`) and
``train_memory_bytes`` (a peak-memory estimate, or None). Of a model it asks what state it declares:
`carries_state` (fixed-size) or `state_grows` (a KV cache)."""

from __future__ import annotations

from typing import Any, ClassVar, Protocol, runtime_checkable

from .typed_config import TypedConfig


@runtime_checkable
class ModelConfigAPI(Protocol):
    """The protocol a registered model's ``config_class`` implements for the trainer (see the module docstring)."""

    RUNTIME_FIELDS: ClassVar[frozenset[str]]
    REPLACES: ClassVar[dict[str, tuple[str, ...]]]

    def train_memory_bytes(
        self, micro_batch: int, seq_len: int, *, form: str | None = None, dtype: str = "fp32", shards: int = 1
    ) -> int | None:
        """Peak training memory of one process in bytes for micro-batches of ``micro_batch`` x ``seq_len`` tokens
        (``dtype``: ``fp32`` or ``bf16`` activations; ``shards``: processes a sharded run splits the weights and
        optimiser state over); None where the model has no estimate."""
        ...


class ModelConfig(TypedConfig):
    """The shared defaults of `ModelConfigAPI`, mixed into the baselines' configs (a `TypedConfig`)."""

    #: ``dropout``, the runtime field whose name means the same in every model that has it
    RUNTIME_FIELDS: ClassVar[frozenset[str]] = frozenset({"dropout"})
    #: none: no field depends on another, so a section completes a default key by key
    REPLACES: ClassVar[dict[str, tuple[str, ...]]] = {}

    def train_memory_bytes(
        self, micro_batch: int, seq_len: int, *, form: str | None = None, dtype: str = "fp32", shards: int = 1
    ) -> int | None:
        """None: no estimate (the trainer does not check the memory of such a model)."""
        return None


def carries_state(model: object) -> bool:
    """Whether ``model`` declares a fixed-size recurrent state (``init_state``/``step`` read any length in flat memory),
    as its class declares ``carries_state``, never guessed; False when it declares nothing."""
    return bool(getattr(model, "carries_state", False))


def state_grows(model: object) -> bool:
    """Whether ``model`` declares a state that grows with the tokens read (``state_grows``: GPT's KV cache, whose
    ``init_state`` / ``step`` generate, but whose memory is not flat in the length)."""
    return bool(getattr(model, "state_grows", False))


def _implementation(config_class: type, name: str) -> Any:
    """The class's own member ``name`` of the protocol, else `ModelConfig`'s default."""
    return getattr(config_class, name, getattr(ModelConfig, name))


def runtime_fields(config_class: type) -> frozenset[str]:
    """The runtime fields of a model config class (its ``RUNTIME_FIELDS``, else `ModelConfig`'s)."""
    return frozenset(_implementation(config_class, "RUNTIME_FIELDS"))


def complete(config_class: type, fields: dict[str, Any], given: dict[str, Any]) -> dict[str, Any]:
    """``fields`` (a default section) completed by ``given`` (a partial one) key by key, where a given value (not
    None or False) first drops the fields it replaces (the class's ``REPLACES``: BDH's neuron-count fields)."""
    replaces = getattr(config_class, "REPLACES", {})
    dropped = {o for key, v in given.items() if v is not None and v is not False for o in replaces.get(key, ())}
    return {**{k: v for k, v in fields.items() if k not in dropped}, **given}


def memory_estimate(
    config: Any, micro_batch: int, seq_len: int, *, form: str | None = None, dtype: str = "fp32", shards: int = 1
) -> int | None:
    """``config.train_memory_bytes(...)``; None for a config without an estimate (or without the method)."""
    estimate = getattr(config, "train_memory_bytes", None)
    if estimate is None:
        return None
    return estimate(micro_batch, seq_len, form=form, dtype=dtype, shards=shards)


__all__ = [
    "ModelConfig",
    "ModelConfigAPI",
    "carries_state",
    "complete",
    "memory_estimate",
    "runtime_fields",
    "state_grows",
]
