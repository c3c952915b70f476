"""Baseline models trained side by side with BDH, under the same protocol: an ``nn.Module`` built
from a typed config, ``forward(idx) -> logits (B, T, V)``, ``num_params()``, ``state_size()``,
save_pretrained / from_pretrained, registered by name (``gpt``, ``baseconv``, ``hyperset``)."""

from .baseconv import BaseConv, BaseConvConfig
from .gpt import GPT, GPTConfig, gpt_config_for_params
from .hyperset import HyperSET, HyperSETConfig

__all__ = ["BaseConv", "BaseConvConfig", "GPT", "GPTConfig", "HyperSET", "HyperSETConfig", "gpt_config_for_params"]
