"""Pieces shared by the baseline models: the model-config mixin (`bdh.model_api.ModelConfig`: ``to_dict`` /
``from_dict``, declared ranges, one-line ``ValueError("GPTConfig.n_head: ...")``) and the parameter count helper."""

from __future__ import annotations

from torch import nn

from ..model.tokens import check_tokens
from ..model_api import ModelConfig

__all__ = ["HeadSizes", "ModelConfig", "check_tokens", "count_params", "normal_init"]


class HeadSizes:
    """The sizes of a config with ``expand_k``, ``expand_v`` (D_k / d and D_v / d, all heads together) and
    ``mlp_ratio`` (GLA, DeltaNet), and the check that each size splits over the heads."""

    def _check_head_sizes(self) -> None:
        for name in ("expand_k", "expand_v"):
            size = getattr(self, name) * self.n_embd
            if size != int(size) or int(size) % self.n_head or size < self.n_head:
                self._fail(name, f"{name} * n_embd = {size:g} must be a positive multiple of n_head = {self.n_head}")

    @property
    def key_size(self) -> int:
        """D_k, all heads together."""
        return int(self.expand_k * self.n_embd)

    @property
    def value_size(self) -> int:
        """D_v, all heads together."""
        return int(self.expand_v * self.n_embd)

    @property
    def hidden(self) -> int:
        """m, the MLP width."""
        return int(round(self.mlp_ratio * self.n_embd))


def count_params(module: nn.Module) -> int:
    """Trainable parameters of a module (shared tensors counted once)."""
    return sum(p.numel() for p in module.parameters() if p.requires_grad)


def normal_init(m: nn.Module) -> None:
    """GPT-2's and Zoology's initialisation of one module (``model.apply(normal_init)``): linear and embedding
    weights N(0, 0.02), linear biases 0; other modules are left as they are."""
    if isinstance(m, (nn.Linear, nn.Embedding)):
        nn.init.normal_(m.weight, std=0.02)
    if isinstance(m, nn.Linear) and m.bias is not None:
        nn.init.zeros_(m.bias)
