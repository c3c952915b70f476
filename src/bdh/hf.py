"""BDH as a Hugging Face ``transformers`` causal language model (docs/model.md, "Hugging Face transformers").

``import bdh.hf`` registers BDH (and the GPT baseline, without a cache) with the Auto classes for bdh's model
folders. Generation runs on BDH's recurrent state (Eq. 8) in `BDHCache`: each step feeds only the new token; the
state cannot be cropped. Left padding is read row by row from each row's first real token. Only ``bdh.hf*`` modules
import ``transformers``."""

from __future__ import annotations

import functools
import os
import warnings
from pathlib import Path
from typing import Any, ClassVar

import torch
import torch.nn.functional as F
from transformers import (
    AutoConfig,
    AutoModelForCausalLM,
    AutoTokenizer,
    GenerationMixin,
    PretrainedConfig,
    PreTrainedModel,
)
from transformers.cache_utils import Cache
from transformers.modeling_outputs import CausalLMOutputWithPast

from .baselines.gpt import GPT, GPTConfig
from .errors import ConfigWarning
from .hf_cache import CACHE_NAME, BDHCache, BDHCacheLayer
from .hf_tokenizer import BDHByteTokenizer
from .model.bdh import BDH
from .model.config import BDHConfig
from .model.io import (
    CONFIG_NAME,
    WEIGHTS_NAME,
    check_config_changes,
    read_model_config,
    refuse_run_folder,
    write_model_folder,
)
from .model.kernels.pytorch.rope import frequencies
from .model.state import BDHState

__all__ = [
    "BDHByteTokenizer",
    "CACHE_NAME",
    "BDHCache",
    "BDHCacheLayer",
    "BDHForCausalLM",
    "BDHHFConfig",
    "GPTForCausalLM",
    "GPTHFConfig",
    "model_card",
    "refuse_run_folder",
    "register",
]

_BDH_FOLDER_KEYS = ("format_version", "bdh_version")  # written by bdh's save_pretrained, not config fields


# ---------------------------------------------------------------------------------------------- configs
class _FolderConfig(PretrainedConfig):
    """A bdh typed config as a ``PretrainedConfig``, validated by the bdh class; runtime fields may be given at load."""

    bdh_config_class = BDHConfig

    def __init__(self, **kwargs: Any):
        cls = self.bdh_config_class
        fields = cls().to_dict()
        fields.update({k: kwargs.pop(k) for k in list(fields) if k in kwargs})
        for key in _BDH_FOLDER_KEYS:
            kwargs.pop(key, None)
        cls.from_dict(fields)  # validate now, with bdh's one-line messages
        for key, value in fields.items():
            setattr(self, key, value)
        kwargs.setdefault("tie_word_embeddings", False)  # the wrapper ties nothing itself
        super().__init__(**kwargs)

    @classmethod
    def from_bdh(cls, config: Any, **kwargs: Any) -> _FolderConfig:
        return cls(**config.to_dict(), **kwargs)

    def to_bdh(self) -> Any:
        """The bdh config these attributes describe."""
        cls = self.bdh_config_class
        return cls.from_dict({k: getattr(self, k) for k in cls().to_dict()})


class BDHHFConfig(_FolderConfig):
    """`BDHConfig` as a ``PretrainedConfig``; ``hidden_size``, ``num_hidden_layers``, ``num_attention_heads``: D,
    L, h."""

    model_type = BDH.model_type  # "bdh", what bdh's save_pretrained writes into config.json
    bdh_config_class = BDHConfig
    attribute_map: ClassVar[dict[str, str]] = {
        "hidden_size": "n_embd",
        "num_hidden_layers": "n_layer",
        "num_attention_heads": "n_head",
    }

    def __init__(self, **kwargs: Any):  # transformers 5 gives a config class without its own __init__ a
        super().__init__(**kwargs)  # generated dataclass one, which would skip _FolderConfig.__init__


class GPTHFConfig(_FolderConfig):
    """The GPT baseline's `GPTConfig` as a ``PretrainedConfig`` (``model_type = "gpt"``)."""

    model_type = GPT.model_type
    bdh_config_class = GPTConfig
    attribute_map: ClassVar[dict[str, str]] = {
        "hidden_size": "n_embd",
        "num_hidden_layers": "n_layer",
        "num_attention_heads": "n_head",
        "max_position_embeddings": "seq_len",
    }

    def __init__(self, **kwargs: Any):  # see BDHHFConfig.__init__
        super().__init__(**kwargs)


# ---------------------------------------------------------------------------------------------- padding
def _padding_side(mask: torch.Tensor) -> str:
    """``none``, ``left`` or ``right`` for a (B, T) 0/1 attention mask; refuses pads inside a row."""
    m = mask.to(torch.int8)
    if bool(m.all()):
        return "none"
    if bool((m.cummax(dim=1).values == m).all()):
        return "left"
    flipped = m.flip(1)
    if bool((flipped.cummax(dim=1).values == flipped).all()):
        return "right"
    raise ValueError(
        "the attention_mask must be all ones, left-padded (0...0 1...1 in every row) or "
        "right-padded (1...1 0...0 in every row)"
    )


# ---------------------------------------------------------------------------------------------- models
class _FolderModel(PreTrainedModel, GenerationMixin):
    """A bdh model (``self.model``) behind the causal-LM interface, its weights bdh's ``model.safetensors``
    under ``model.``."""

    bdh_model_class = BDH
    base_model_prefix = "model"
    main_input_name = "input_ids"

    def __init__(self, config: _FolderConfig):
        super().__init__(config)
        self.model = self.bdh_model_class(config.to_bdh())
        self.post_init()

    @classmethod
    def from_pretrained(cls, pretrained_model_name_or_path: Any, *args: Any, **kwargs: Any):
        """``PreTrainedModel.from_pretrained`` after the checks of the ``bdh`` commands (not a run
        folder, checksums)."""
        loaded = _loaded_folder(pretrained_model_name_or_path, kwargs.get("subfolder"))
        refuse_run_folder(loaded)
        check_local_folder(loaded)
        return super().from_pretrained(pretrained_model_name_or_path, *args, **kwargs)

    @classmethod
    def from_bdh(cls, model: torch.nn.Module) -> _FolderModel:
        """Wrap a copy of an in-memory bdh model (its weights, not re-drawn)."""
        wrapper = cls(cls.config_class.from_bdh(model.config))
        wrapper.model.load_state_dict(model.state_dict())
        return wrapper.to(next(model.parameters()).device).train(model.training)

    def get_input_embeddings(self) -> torch.nn.Module:
        return self.model.embed

    def set_input_embeddings(self, value: torch.nn.Module) -> None:
        self.model.embed = value

    def get_output_embeddings(self) -> None:
        return None  # the wrappers resize and tie nothing

    def _output(
        self,
        logits: torch.Tensor,
        labels: torch.Tensor | None,
        cache: Cache | None,
        return_dict: bool | None,
        hidden_states: tuple[torch.Tensor, ...] | None = None,
    ):
        loss = None if labels is None else _lm_loss(logits, labels)
        out = CausalLMOutputWithPast(loss=loss, logits=logits, hidden_states=hidden_states, **{CACHE_NAME: cache})
        return out if return_dict is not False else out.to_tuple()

    def save_pretrained(
        self,
        save_directory: str | os.PathLike,
        is_main_process: bool = True,
        state_dict: dict[str, torch.Tensor] | None = None,
        push_to_hub: bool = False,
        **kwargs: Any,
    ) -> None:
        """Write bdh's folder format, the generation config and a model card if absent; ``push_to_hub=True``
        is refused."""
        if push_to_hub:
            raise NotImplementedError(f"{type(self).__name__}.save_pretrained: push with model.push_to_hub(repo_id)")
        if not is_main_process:
            return
        tensors = self.model.state_dict() if state_dict is None else _strip_prefix(state_dict)
        directory = write_model_folder(save_directory, self.config.model_type, self.config.to_bdh(), tensors)
        if self.generation_config is not None:
            self.generation_config.save_pretrained(directory)
        if not (directory / "README.md").exists():
            model_card(self.config).save(directory / "README.md")


class BDHForCausalLM(_FolderModel):
    """`bdh.BDH` as a ``transformers`` causal LM whose cache is BDH's recurrent state.

    With a cache (``cache``, or ``past_key_values`` before transformers 5.24) the tokens continue its state; a plain
    forward builds none. ``output_hidden_states`` adds v_0 = LN(embedding) and each layer's v_l (Eq. 8)."""

    config_class = BDHHFConfig
    bdh_model_class = BDH
    _is_stateful = True  # no rollback: assisted generation is refused
    _supports_cache_class = True

    @classmethod
    def _supports_default_dynamic_cache(cls) -> bool:
        return False  # generate must not make a DynamicCache: the first forward makes a BDHCache

    @torch.no_grad()
    def _init_weights(self, module: torch.nn.Module) -> None:
        """Weights missing from a checkpoint: N(0, 0.02) as `bdh.BDH` draws them; buffers recomputed."""
        if not isinstance(module, BDH):
            return super()._init_weights(module)
        for param in (module.E, module.Dx, module.Dy, module.readout, module.Dk):
            if param is None:  # Dk: only with separate keys
                continue
            torch.nn.init.normal_(param, std=0.02)  # transformers skips the ones that were loaded
        if not getattr(module.freqs, "_is_hf_initialized", False):
            module.freqs.copy_(frequencies(module.config.positional, module.config.N, module.config.theta))
        if module.log_u is not None:  # the damping log u is not saved (non-persistent): always recomputed
            module.log_u.copy_(torch.tensor(module.config.retention()).log())
        module.init_state_rules(keep=lambda p: getattr(p, "_is_hf_initialized", False))  # the state options' own

    def forward(
        self,
        input_ids: torch.LongTensor | None = None,
        attention_mask: torch.Tensor | None = None,
        cache: Cache | None = None,
        use_cache: bool | None = None,
        labels: torch.LongTensor | None = None,
        inputs_embeds: torch.Tensor | None = None,
        output_hidden_states: bool | None = None,
        return_dict: bool | None = None,
        past_key_values: Cache | None = None,
        **kwargs: Any,
    ) -> CausalLMOutputWithPast | tuple:
        """Logits (B, T, V) for ``input_ids`` (B, T); other keywords are ignored (positions come from the state)."""
        _check_inputs(type(self).__name__, input_ids, inputs_embeds, kwargs)
        if cache is not None and past_key_values is not None and cache is not past_key_values:
            raise ValueError("BDHForCausalLM: give the cache once, as cache (or past_key_values), not both")
        cache = self._cache(cache if cache is not None else past_key_values, use_cache)
        hidden = _HiddenStates() if output_hidden_states else None
        mask = None if attention_mask is None else attention_mask[:, -input_ids.shape[1] :]
        side = "none" if mask is None else _padding_side(mask)
        if side == "left":
            logits = self._read_left_padded(input_ids, mask, cache, hidden)
        else:
            if side == "right" and cache is not None:
                raise ValueError("BDHForCausalLM: a right-padded batch cannot be continued; pad on the left")
            logits = self._read(input_ids, cache, hidden)
        return self._output(logits, labels, cache, return_dict, None if hidden is None else hidden.states())

    def _cache(self, given: Cache | None, use_cache: bool | None) -> BDHCache | None:
        """The cache to continue: the given BDHCache, a new one, or None (no state wanted)."""
        if isinstance(given, BDHCache):
            return given
        if given is not None and given.get_seq_length() > 0:
            raise TypeError(f"BDHForCausalLM: the cache must be a BDHCache, got {type(given).__name__}")
        wanted = given is not None if use_cache is None else use_cache
        return BDHCache(self.config.n_layer) if wanted else None

    def _read(self, idx: torch.Tensor, cache: BDHCache | None, hidden: _HiddenStates | None) -> torch.Tensor:
        """Logits of a block of tokens; with a cache, continue its state (as `bdh.BDH.stream` does)."""
        if cache is None:
            return self.model(idx, hook=hidden)
        state = cache.state if cache.state is not None else self.model.init_state(idx.shape[0])
        logits, cache.state = self._advance(idx, state, hidden)
        return logits

    def _advance(
        self, idx: torch.Tensor, state: BDHState, hidden: _HiddenStates | None = None
    ) -> tuple[torch.Tensor, BDHState]:
        """(logits, state after idx) in the forms `bdh.BDH.generate` uses, so greedy tokens match it exactly."""
        mode = "recurrent" if idx.shape[1] == 1 else "chunked"
        return self.model.step(idx, state, mode=mode, inplace=not torch.is_grad_enabled(), hook=hidden)

    def _read_left_padded(
        self, idx: torch.Tensor, mask: torch.Tensor, cache: BDHCache | None, hidden: _HiddenStates | None
    ) -> torch.Tensor:
        """Each row's real tokens from an empty state at their own position; zeros at the pads."""
        if cache is not None and cache.state is not None:
            raise ValueError("BDHForCausalLM: left padding is only supported in the first call (the prompt)")
        B, T = idx.shape
        logits = torch.zeros(B, T, self.config.vocab_size, device=idx.device, dtype=self.model.readout.dtype)
        rows = []
        for i in range(B):
            pads = int((mask[i] == 0).sum())
            state = self.model.init_state(1)
            state.pos = pads  # the same absolute positions as in the padded batch
            if pads < T:
                row = None if hidden is None else _HiddenStates()
                row_logits, state = self._advance(idx[i : i + 1, pads:], state, row)
                logits[i, pads:] = row_logits[0]
                if hidden is not None:
                    hidden.put_row(i, pads, B, T, row)
            rows.append(state.rho)
        if cache is not None:
            cache.state = BDHState(torch.cat(rows, dim=1), T)
        return logits

    def prepare_inputs_for_generation(
        self,
        input_ids: torch.LongTensor,
        cache: Cache | None = None,
        attention_mask: torch.Tensor | None = None,
        use_cache: bool = True,
        past_key_values: Cache | None = None,
        **kwargs: Any,
    ) -> dict[str, Any]:
        """Feed only the tokens the state has not read: the prompt, then one token per step."""
        if kwargs.get("inputs_embeds") is not None:
            raise ValueError("BDHForCausalLM: generation from inputs_embeds is not supported")
        given = cache if cache is not None else past_key_values
        cache = given if isinstance(given, BDHCache) else None
        seen = 0 if cache is None else cache.get_seq_length()
        if seen >= input_ids.shape[1]:
            raise ValueError(
                f"BDHForCausalLM: the cache has read {seen} tokens, input_ids has only {input_ids.shape[1]}"
            )
        inputs = {"input_ids": input_ids[:, seen:], "attention_mask": attention_mask, CACHE_NAME: cache}
        inputs["use_cache"] = use_cache
        if kwargs.get("output_hidden_states"):
            inputs["output_hidden_states"] = True
        return inputs


class _HiddenStates:
    """A `LayerHook` keeping v_0 and every layer's output v_l, each (B, T, D), not detached."""

    def __init__(self) -> None:
        self.v: list[torch.Tensor] = []

    def __call__(self, model: torch.nn.Module, layer: int, act: Any) -> None:
        if layer == 0:
            self.v.append(act.values.squeeze(1))
        self.v.append(act.v.squeeze(1))

    def put_row(self, i: int, start: int, B: int, T: int, row: _HiddenStates) -> None:
        """Row i of a left-padded batch: ``row``'s states at positions start.., zeros at the pads."""
        if not self.v:
            self.v = [row.v[0].new_zeros(B, T, row.v[0].shape[-1]) for _ in row.v]
        for full, part in zip(self.v, row.v):
            full[i, start:] = part[0]

    def states(self) -> tuple[torch.Tensor, ...]:
        return tuple(self.v)


class GPTForCausalLM(_FolderModel):
    """The GPT baseline as a ``transformers`` causal LM without a cache (each token re-reads all); right
    padding only."""

    config_class = GPTHFConfig
    bdh_model_class = GPT

    @classmethod
    def _supports_default_dynamic_cache(cls) -> bool:
        return False

    def forward(
        self,
        input_ids: torch.LongTensor | None = None,
        attention_mask: torch.Tensor | None = None,
        labels: torch.LongTensor | None = None,
        return_dict: bool | None = None,
        **kwargs: Any,
    ) -> CausalLMOutputWithPast | tuple:
        """Logits (B, T, V) of `GPT.forward`; ``past_key_values`` / ``use_cache`` are accepted and ignored."""
        _check_inputs(type(self).__name__, input_ids, kwargs.get("inputs_embeds"), kwargs)
        if kwargs.get("output_hidden_states"):
            raise ValueError("GPTForCausalLM: output_hidden_states is not supported")
        if attention_mask is not None and _padding_side(attention_mask) == "left":
            raise ValueError("GPTForCausalLM: left padding is not supported (learned positions); pad on the right")
        return self._output(self.model(input_ids), labels, None, return_dict)

    def prepare_inputs_for_generation(
        self, input_ids: torch.LongTensor, attention_mask: torch.Tensor | None = None, **kwargs: Any
    ) -> dict[str, Any]:
        """The whole sequence every step (there is no cache)."""
        return {"input_ids": input_ids, "attention_mask": attention_mask}


def _check_inputs(name: str, input_ids: torch.Tensor | None, inputs_embeds: torch.Tensor | None, kwargs: dict) -> None:
    """Refuse what the wrappers cannot give rather than return it empty."""
    if input_ids is None or inputs_embeds is not None:
        raise ValueError(f"{name}: give input_ids; inputs_embeds is not supported")
    if kwargs.get("output_attentions"):
        raise ValueError(
            f"{name}: output_attentions is not supported (BDH's attention is linear, its T x T scores are never "
            "formed when generating); bdh.BDH's forward(idx, capture=True) returns them with every layer's activations"
        )


def _lm_loss(logits: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
    """Mean next-token cross-entropy; label -100 is ignored (the ``transformers`` convention)."""
    return F.cross_entropy(
        logits[:, :-1].flatten(0, 1).float(), labels[:, 1:].flatten().to(logits.device), ignore_index=-100
    )


def _strip_prefix(state_dict: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    prefix = _FolderModel.base_model_prefix + "."
    return {k.removeprefix(prefix): v for k, v in state_dict.items()}


# ---------------------------------------------------------------------------------------------- model card
_CARD_USAGE = """```python
import bdh.hf  # pip install "bdh[hf]": registers bdh's models with transformers
from transformers import AutoModelForCausalLM
from bdh.hf_tokenizer import BDHByteTokenizer

model = AutoModelForCausalLM.from_pretrained("path/or/repo-id")
tok = BDHByteTokenizer()
out = model.generate(**tok("To be", return_tensors="pt"), max_new_tokens=50, do_sample=False)
print(tok.decode(out[0]))
```

The folder is also read by `bdh.load_pretrained(folder)`."""


def model_card(config: _FolderConfig, *, description: str = "", license: str | None = None):
    """A ``huggingface_hub.ModelCard`` (``README.md`` with YAML metadata) for a bdh model folder."""
    from huggingface_hub import ModelCard, ModelCardData

    cfg = config.to_bdh()
    tags = ["bdh", "byte-level"] + (
        ["dragon-hatchling", "linear-attention"] if isinstance(cfg, BDHConfig) else ["gpt", "baseline"]
    )
    data = ModelCardData(library_name="transformers", pipeline_tag="text-generation", license=license, tags=tags)
    if isinstance(cfg, BDHConfig):
        title = "BDH (Dragon Hatchling) language model"
        about = "A BDH-GPU model (Kosowski et al. 2025, *The Dragon Hatchling*, arXiv 2509.26507)."
        size = (
            f"L={cfg.n_layer}, D={cfg.n_embd}, h={cfg.n_head}, n={cfg.n}, vocabulary {cfg.vocab_size}; "
            f"recurrent state of {cfg.n_layer} x {cfg.state_size():,} numbers"
        )
    else:
        title = "GPT baseline language model (bdh)"
        about = "The GPT-2-style Transformer baseline of the bdh toolkit."
        size = (
            f"L={cfg.n_layer}, d={cfg.n_embd}, heads {cfg.n_head}, context {cfg.seq_len}, vocabulary {cfg.vocab_size}"
        )
    body = (
        f"---\n{data.to_yaml()}\n---\n\n# {title}\n\n{description or about}\n\n"
        f"Size: {size}; {cfg.num_params():,} parameters.\n\n{_CARD_USAGE}\n"
    )
    return ModelCard(body)


# ---------------------------------------------------------------------------------------------- registration
def _loaded_folder(path: Any, subfolder: Any) -> Any:
    """``path/subfolder`` for a folder on this machine, else ``path`` as given (a repo id)."""
    if not subfolder or not isinstance(path, (str, os.PathLike)) or not isinstance(subfolder, (str, os.PathLike)):
        return path
    return Path(path) / subfolder


def check_local_folder(path: Any) -> None:
    """A local model folder's checks before loading (meta.json checksums, config.json); a one-line `UserError` naming
    the file that fails. A repo id passes."""
    if not isinstance(path, (str, os.PathLike)):
        return
    folder = Path(path)
    try:
        if not folder.is_dir():
            return
    except OSError:  # a repo id that is no folder here
        return
    from bdh.train.run.checkpoint import verified

    verified(folder)
    if (folder / CONFIG_NAME).is_file() and (folder / WEIGHTS_NAME).is_file():
        note = check_config_changes(folder, read_model_config(folder)[1])
        if note is not None:
            warnings.warn(ConfigWarning(note), stacklevel=3)


def _guard_from_pretrained(owner: type) -> None:
    """Make ``owner.from_pretrained`` call `refuse_run_folder` first (idempotent)."""
    original = owner.__dict__.get("from_pretrained")
    func = getattr(original, "__func__", None)
    if func is None or getattr(func, "_bdh_guard", False):
        return

    @functools.wraps(func)
    def from_pretrained(cls, pretrained_model_name_or_path, *args, **kwargs):
        refuse_run_folder(_loaded_folder(pretrained_model_name_or_path, kwargs.get("subfolder")))
        return func(cls, pretrained_model_name_or_path, *args, **kwargs)

    from_pretrained._bdh_guard = True
    owner.from_pretrained = classmethod(from_pretrained)


def register() -> None:
    """Register BDH and GPT with the Auto classes (idempotent), refusing a bdh run folder in one line
    naming ``RUN/best``."""
    for owner in (AutoConfig, AutoTokenizer):
        _guard_from_pretrained(owner)
    for config_class, model_class in ((BDHHFConfig, BDHForCausalLM), (GPTHFConfig, GPTForCausalLM)):
        AutoConfig.register(config_class.model_type, config_class, exist_ok=True)
        AutoModelForCausalLM.register(config_class, model_class, exist_ok=True)
        try:
            AutoTokenizer.register(config_class, tokenizer_class=BDHByteTokenizer, exist_ok=True)
        except TypeError:  # transformers 4.x names it slow_tokenizer_class
            AutoTokenizer.register(config_class, slow_tokenizer_class=BDHByteTokenizer, exist_ok=True)


register()
