"""The carried state of a baseline model: a `MixerState`, of fixed size (`MixerLM.step`), or GPT's growing `KVCache`."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import torch

from bdh.errors import UserError

Tensors = dict[str, torch.Tensor]


@dataclass
class MixerState:
    """The state of a `bdh.baselines.mixer_lm.MixerLM` after ``pos`` tokens of each of ``batch_size`` sequences."""

    model: str  # the ``model_type`` of the model that made it (a state of another model is refused).
    # per block, named tensors (batch first): the mixer's under ``mixer.<name>``, the branch's under ``branch.<name>``.
    layers: list[Tensors] = field(default_factory=list)
    pos: int = 0  # tokens read so far (the absolute position of the next one).

    def map(self, fn: Callable[[torch.Tensor], torch.Tensor]) -> MixerState:
        """The same state with ``fn`` applied to every tensor."""
        return MixerState(self.model, [{k: fn(v) for k, v in layer.items()} for layer in self.layers], self.pos)

    @property
    def batch_size(self) -> int:
        return next(t.shape[0] for layer in self.layers for t in layer.values())

    def detach(self) -> MixerState:
        """The same state cut from the autograd graph (truncated backprop through time)."""
        return self.map(torch.Tensor.detach)

    def to(self, *args, **kwargs) -> MixerState:
        return self.map(lambda t: t.to(*args, **kwargs))

    def clone(self) -> MixerState:
        return self.map(torch.Tensor.clone)

    def nbytes(self) -> int:
        return sum(t.numel() * t.element_size() for layer in self.layers for t in layer.values())

    def flat(self) -> tuple[Tensors, dict[str, Any]]:
        """The state as named tensors (``<layer>.<name>``) and plain values, for a checkpoint (`unflat` inverts)."""
        tensors = {f"{i}.{k}": v for i, layer in enumerate(self.layers) for k, v in layer.items()}
        return tensors, {"model": self.model, "pos": self.pos}

    @classmethod
    def unflat(cls, tensors: Tensors, model: str, pos: int) -> MixerState:
        """The state `flat` wrote."""
        layers: dict[int, Tensors] = {}
        for name, t in tensors.items():
            layer, key = name.split(".", 1)
            layers.setdefault(int(layer), {})[key] = t
        return cls(model, [layers[i] for i in sorted(layers)], pos)


@dataclass
class KVCache:
    """GPT's state: the keys (rotated) and values of every token read, per pass, (B, H, t, d/H); ``pos``:
    tokens read."""

    keys: list[torch.Tensor] = field(default_factory=list)
    values: list[torch.Tensor] = field(default_factory=list)
    pos: int = 0

    def map(self, fn: Callable[[torch.Tensor], torch.Tensor]) -> KVCache:
        """The same cache with ``fn`` applied to every tensor."""
        return KVCache([fn(k) for k in self.keys], [fn(v) for v in self.values], self.pos)

    @property
    def batch_size(self) -> int:
        return self.keys[0].shape[0]

    def detach(self) -> KVCache:
        return self.map(torch.Tensor.detach)

    def to(self, *args, **kwargs) -> KVCache:
        return self.map(lambda t: t.to(*args, **kwargs))

    def clone(self) -> KVCache:
        return self.map(torch.Tensor.clone)

    def nbytes(self) -> int:
        return sum(t.numel() * t.element_size() for t in (*self.keys, *self.values))


def prefixed(prefix: str, tensors: Tensors) -> Tensors:
    """``tensors`` with names ``<prefix>.<name>``."""
    return {f"{prefix}.{k}": v for k, v in tensors.items()}


def part(prefix: str, tensors: Tensors) -> Tensors:
    """The tensors named ``<prefix>.<name>``, by ``name``."""
    cut = len(prefix) + 1
    return {k[cut:]: v for k, v in tensors.items() if k.startswith(prefix + ".")}


def check_state(name: str, state: object, want: MixerState, batch_size: int) -> None:
    """A one-line `UserError` unless ``state`` is a `MixerState` of this model (tensor shapes as ``want``'s)
    for ``batch_size``."""
    if not isinstance(state, MixerState):
        raise UserError(f"{name}.step: state must be a MixerState (from model.init_state), got {type(state).__name__}")
    if state.model != want.model:
        raise UserError(f"{name}.step: the state is a {state.model!r} model's, not this {want.model!r} model's")
    got = [{k: tuple(v.shape[1:]) for k, v in layer.items()} for layer in state.layers]
    need = [{k: tuple(v.shape[1:]) for k, v in layer.items()} for layer in want.layers]
    if got != need:
        raise UserError(f"{name}.step: the state's shapes {got} are not this model's {need} (another configuration)")
    if state.batch_size != batch_size:
        raise UserError(f"{name}.step: the state holds {state.batch_size} sequences, the tokens {batch_size}")


__all__ = ["KVCache", "MixerState", "check_state", "part", "prefixed"]
