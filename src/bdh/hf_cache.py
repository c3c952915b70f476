"""`BDHCache`: BDH's recurrent state (rho of Eq. 8, per layer) as a ``transformers`` ``Cache`` for `BDHForCausalLM`."""

from __future__ import annotations

import dataclasses

import torch
from transformers.cache_utils import Cache
from transformers.modeling_outputs import CausalLMOutputWithPast

from .model.state import BDHState


def _cache_keyword() -> str:
    """The name ``transformers`` gives the cache: ``cache`` from 5.24 on, ``past_key_values`` before."""
    names = {f.name for f in dataclasses.fields(CausalLMOutputWithPast)}
    return "cache" if "cache" in names else "past_key_values"


CACHE_NAME = _cache_keyword()

try:  # transformers 5: the base of the layers of linear-attention and state-space models (Mamba, Qwen3-Next)
    from transformers.cache_utils import LinearAttentionCacheLayerMixin as _LayerBase
except ImportError:  # older transformers: the layer only needs its own methods
    _LayerBase = object

_NO_CROP = (
    "BDHCache.crop: BDH's state rho is a sum over every token read (paper Eq. 8) with no sequence axis, so it "
    "cannot be rolled back to an earlier position; read the shorter prefix again into a new cache"
)


class BDHCacheLayer(_LayerBase):
    """One layer's state rho (B, H, N, D) (Eq. 8) and ``pos``, as ``LinearAttentionLayer``; None until the
    first forward."""

    is_compileable = False  # the state is replaced, not copied into a static buffer
    is_croppable = False  # a sum over the tokens read cannot be undone (paper Eq. 8)
    supports_early_init = False
    is_sliding = False
    number_of_states = 1
    record_past = False

    def __init__(self, rho: torch.Tensor | None = None, pos: int = 0):  # not the mixin's: it keeps dicts
        self.rho = rho
        self.pos = pos

    def __repr__(self) -> str:
        shape = None if self.rho is None else tuple(self.rho.shape)
        return f"BDHCacheLayer(rho={shape}, pos={self.pos})"

    # the LinearAttentionCacheLayerMixin view: state 0 is rho, there is no convolution state
    @property
    def recurrent_states(self) -> dict[int, torch.Tensor | None]:
        return {0: self.rho}

    @property
    def conv_states(self) -> dict[int, None]:
        return {0: None}

    @property
    def is_recurrent_states_initialized(self) -> dict[int, bool]:
        return {0: self.rho is not None}

    @property
    def is_conv_states_initialized(self) -> dict[int, bool]:
        return {0: False}

    @property
    def has_previous_state(self) -> dict[int, bool]:
        return {0: self.rho is not None}

    @property
    def is_initialized(self) -> bool:
        return self.rho is not None

    @property
    def device(self) -> torch.device | None:
        return None if self.rho is None else self.rho.device

    @property
    def batch_size(self) -> int:
        return -1 if self.rho is None else self.rho.shape[0]

    def lazy_initialization(self, conv_states=None, recurrent_states=None, state_idx: int = 0, **kwargs) -> None:
        if recurrent_states is not None and self.rho is None:
            self.rho = torch.zeros_like(recurrent_states)

    def update_recurrent_state(self, recurrent_states: torch.Tensor, state_idx: int = 0, **kwargs) -> torch.Tensor:
        self.rho = recurrent_states
        return recurrent_states

    def update_conv_state(self, conv_states: torch.Tensor, state_idx: int = 0, **kwargs) -> torch.Tensor:
        raise NotImplementedError("BDHCacheLayer: BDH has no convolution state")

    def get_seq_length(self) -> int:
        return self.pos

    def get_max_length(self) -> int:
        return -1  # no sequence axis: no limit

    def get_mask_sizes(self, query_length: int) -> tuple[int, int]:
        return self.pos + query_length, 0

    def reset(self) -> None:
        self.rho, self.pos = None, 0

    def offload(self) -> None:
        pass  # the state is small (section 4.1) and read every step: it stays on its device

    def prefetch(self) -> None:
        pass

    def activate_past_recording(self) -> None:
        raise NotImplementedError(_NO_CROP)

    def crop(self, max_length: int) -> None:
        raise NotImplementedError(_NO_CROP)

    def reorder_cache(self, beam_idx: torch.LongTensor) -> None:
        """Keep the rows ``beam_idx`` of the batch (beam search)."""
        if self.rho is not None:
            self.rho = self.rho.index_select(0, beam_idx.to(self.rho.device))

    def batch_select_indices(self, indices: torch.Tensor) -> None:
        if self.rho is not None:
            self.rho = self.rho[indices.to(self.rho.device) if isinstance(indices, torch.Tensor) else indices]

    def batch_repeat_interleave(self, repeats: int) -> None:
        if self.rho is not None:
            self.rho = self.rho.repeat_interleave(repeats, dim=0)


class BDHCache(Cache):
    """One `BDHCacheLayer` per layer, L * B * n * D numbers whatever the context (section 4.1); beam reorder,
    no cropping."""

    def __init__(self, n_layer: int | BDHState | None = None, state: BDHState | None = None):
        if isinstance(n_layer, BDHState):  # BDHCache(state), as before the layers
            n_layer, state = None, n_layer
        if n_layer is None:
            if state is None:
                raise TypeError("BDHCache: give n_layer (the model's config.n_layer) or a BDHState")
            n_layer = state.rho.shape[0]
        layers = [BDHCacheLayer() for _ in range(n_layer)]
        try:
            super().__init__(layers=layers)
        except TypeError:  # transformers < 4.54: Cache() takes no arguments
            super().__init__()
            self.layers = layers
        self._rho: torch.Tensor | None = None  # (L, B, H, N, D); layer l's rho is _rho[l] while they agree
        if state is not None:
            self.state = state

    def __repr__(self) -> str:
        rho = self.layers[0].rho if self.layers else None
        shape = None if rho is None else (len(self.layers), *rho.shape)
        return f"BDHCache(rho={shape}, pos={self.get_seq_length()})"

    @property
    def state(self) -> BDHState | None:
        """The layers as one `BDHState` (rho (L, B, H, N, D), pos) sharing storage where it can, or None before
        a forward."""
        rhos = [layer.rho for layer in self.layers]
        if any(rho is None for rho in rhos):
            return None
        stored = self._rho
        if stored is None or not all(
            rho.shape == stored.shape[1:] and rho.data_ptr() == stored[i].data_ptr() for i, rho in enumerate(rhos)
        ):
            self.state = BDHState(torch.stack(rhos), self.layers[0].pos)
        return BDHState(self._rho, self.layers[0].pos)

    @state.setter
    def state(self, state: BDHState | None) -> None:
        if state is None:
            self.reset()
            return
        if state.rho.shape[0] != len(self.layers):
            raise ValueError(f"BDHCache: a state of {state.rho.shape[0]} layers for a cache of {len(self.layers)}")
        self._rho = state.rho
        for i, layer in enumerate(self.layers):
            layer.rho, layer.pos = state.rho[i], state.pos

    def get_seq_length(self, layer_idx: int = 0) -> int:
        """Tokens read so far (the position of the next token)."""
        return self.layers[layer_idx].pos if self.layers else 0

    def get_max_length(self, layer_idx: int | None = None) -> int:
        return -1  # no limit: the state has no sequence axis

    def get_max_cache_shape(self, layer_idx: int = 0) -> int:  # the older name of get_max_length
        return -1

    def get_mask_sizes(self, query_length: int, layer_idx: int = 0) -> tuple[int, int]:
        return self.get_seq_length() + query_length, 0

    def has_previous_state(self, layer_idx: int | None = None, state_idx: int | None = None) -> bool:
        return self.layers[-1 if layer_idx is None else layer_idx].rho is not None

    @property
    def batch_size(self) -> int:
        return self.layers[0].batch_size if self.layers else -1

    @property
    def is_compileable(self) -> bool:
        return False

    @property
    def is_croppable(self) -> bool:
        return False

    def reset(self) -> None:
        self._rho = None
        for layer in self.layers:
            layer.reset()

    def crop(self, max_length: int) -> None:
        raise NotImplementedError(_NO_CROP)

    def activate_past_recording(self) -> None:
        raise NotImplementedError(_NO_CROP)

    def _rows(self, select) -> None:
        """Apply ``select`` (a function of rho (L, B, ...) acting on the batch axis 1) to every layer at once."""
        state = self.state
        if state is not None:
            self.state = BDHState(select(state.rho), state.pos)

    def reorder_cache(self, beam_idx: torch.LongTensor) -> None:
        """Keep the batch rows ``beam_idx``, in that order (beam search)."""
        self._rows(lambda rho: rho.index_select(1, beam_idx.to(rho.device)))

    def batch_select_indices(self, indices: torch.Tensor) -> None:
        self._rows(lambda rho: rho[:, indices.to(rho.device) if isinstance(indices, torch.Tensor) else indices])

    def batch_repeat_interleave(self, repeats: int) -> None:
        self._rows(lambda rho: rho.repeat_interleave(repeats, dim=1))
