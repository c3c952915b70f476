"""Baseline models trained side by side with BDH under the same protocol (typed config, ``forward(idx) -> logits``,
``num_params()``, ``state_size()``, save/from_pretrained, ``init_state``/``step`` where a state is read);
docs/baselines.md. Imported on first use (`bdh._lazy`)."""

from .._lazy import exports

__all__ = [
    "GLA",
    "GPT",
    "BaseConv",
    "BaseConvConfig",
    "Based",
    "BasedConfig",
    "DeltaNet",
    "DeltaNetConfig",
    "GLAConfig",
    "GatedDeltaNet",
    "GatedDeltaNetConfig",
    "GPTConfig",
    "HyperSET",
    "HyperSETConfig",
    "Hyena",
    "HyenaConfig",
    "Mamba",
    "MambaConfig",
    "RWKV",
    "RWKVConfig",
    "gpt_config_for_params",
]

__getattr__, __dir__ = exports(
    __name__,
    {
        "BaseConv": ".baseconv:BaseConv",
        "BaseConvConfig": ".baseconv:BaseConvConfig",
        "Based": ".based:Based",
        "BasedConfig": ".based:BasedConfig",
        "DeltaNet": ".deltanet:DeltaNet",
        "DeltaNetConfig": ".deltanet:DeltaNetConfig",
        "GatedDeltaNet": ".deltanet:GatedDeltaNet",
        "GatedDeltaNetConfig": ".deltanet:GatedDeltaNetConfig",
        "GLA": ".gla:GLA",
        "GLAConfig": ".gla:GLAConfig",
        "GPT": ".gpt:GPT",
        "GPTConfig": ".gpt:GPTConfig",
        "gpt_config_for_params": ".gpt:gpt_config_for_params",
        "HyperSET": ".hyperset:HyperSET",
        "HyperSETConfig": ".hyperset:HyperSETConfig",
        "Hyena": ".hyena:Hyena",
        "HyenaConfig": ".hyena:HyenaConfig",
        "Mamba": ".mamba:Mamba",
        "MambaConfig": ".mamba:MambaConfig",
        "RWKV": ".rwkv:RWKV",
        "RWKVConfig": ".rwkv:RWKVConfig",
    },
    globals(),
)
