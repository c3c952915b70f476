"""Generation on the recurrent state: `GenerationMixin` gives `BDH` its ``stream`` and ``generate``.

The prompt is read in one chunked pass; every new token is then one recurrent step (paper Eq. 8) whose
time and memory do not depend on the context length. The state is updated in place (no autograd).
"""

from __future__ import annotations

from collections.abc import Iterator

import torch

from bdh.errors import UserError

from .state import BDHState

#: prompt tokens read into the state per chunk by `GenerationMixin.stream` (bounds its memory)
PROMPT_CHUNK = 1024


class GenerationMixin:
    """Sampling from a model with ``step(tokens, state, mode=..., inplace=...)`` and ``init_state``."""

    @torch.no_grad()
    def stream(
        self,
        prompt: torch.Tensor,
        max_new_tokens: int,
        *,
        temperature: float = 1.0,
        top_k: int | None = None,
        seed: int | None = None,
        state: BDHState | None = None,
        sparse: bool = False,
        prompt_chunk: int = PROMPT_CHUNK,
    ) -> Iterator[torch.Tensor]:
        """Yield (B,) sampled tokens one at a time, generating on the recurrent state.

        The prompt is read with the chunked form, ``prompt_chunk`` tokens at a time into the state, so memory
        does not grow with its length (any prompt length reads in bounded memory); each new token then
        costs one recurrent step, whose time and memory do not grow with the context. Dropout is off.
        ``temperature=0`` is greedy decoding. ``sparse=True`` (a batch of one sequence, no damping)
        makes each step skip the neurons that do not fire (`bdh.model.kernels.sparse`); the results are
        the same. It is off by default: whether it is faster depends on the machine and on how sparse
        the model fires (docs/performance.md has measurements). Measure before turning it on.
        """
        if not self.config.causal:
            raise UserError("BDH.generate: a bidirectional model (causal=false) cannot generate")
        if isinstance(max_new_tokens, bool) or not isinstance(max_new_tokens, int) or max_new_tokens < 0:
            raise UserError(f"BDH.generate: max_new_tokens must be a non-negative integer, got {max_new_tokens!r}")
        if temperature < 0:
            raise UserError(f"BDH.generate: temperature must be >= 0, got {temperature}")
        if top_k is not None and (isinstance(top_k, bool) or not isinstance(top_k, int) or top_k < 1):
            raise UserError(f"BDH.generate: top_k must be a positive integer or None, got {top_k!r}")
        prompt = prompt.view(1, -1) if prompt.dim() == 1 else prompt
        if prompt.shape[1] == 0:
            raise UserError("BDH.generate: the prompt is empty; give at least one token")
        device = self.readout.device
        prompt = prompt.to(device)
        gen = None
        if seed is not None:
            gen = torch.Generator(device=device)
            gen.manual_seed(seed)
        was_training = self.training
        self.eval()
        try:
            state = self.init_state(prompt.shape[0]) if state is None else state.clone()
            for start in range(0, prompt.shape[1], prompt_chunk):
                logits, state = self.step(prompt[:, start : start + prompt_chunk], state, mode="chunked", inplace=True)
            logits = logits[:, -1]
            for i in range(max_new_tokens):
                nxt = sample(logits, temperature, top_k, gen)
                yield nxt
                if i + 1 < max_new_tokens:
                    logits, state = self.step(nxt, state, mode="sparse" if sparse else "recurrent", inplace=True)
        finally:
            self.train(was_training)

    @torch.no_grad()
    def generate(
        self,
        prompt: torch.Tensor,
        max_new_tokens: int,
        *,
        temperature: float = 1.0,
        top_k: int | None = None,
        seed: int | None = None,
        sparse: bool = False,
    ) -> torch.Tensor:
        """The prompt (B, T) or (T,) followed by ``max_new_tokens`` generated tokens, (B, T + new)."""
        prompt2 = prompt.view(1, -1) if prompt.dim() == 1 else prompt
        new = list(self.stream(prompt2, max_new_tokens, temperature=temperature, top_k=top_k, seed=seed, sparse=sparse))
        out = torch.cat([prompt2.to(self.readout.device)] + [t.view(-1, 1) for t in new], dim=1)
        return out.view(-1) if prompt.dim() == 1 else out


def sample(
    logits: torch.Tensor, temperature: float, top_k: int | None, generator: torch.Generator | None
) -> torch.Tensor:
    """Draw one token per row of (B, V) logits: greedy at temperature 0, else softmax(logits / T) over the top k."""
    if temperature == 0:
        return logits.argmax(dim=-1)
    logits = logits.float() / temperature
    if top_k is not None and top_k < logits.shape[-1]:
        kth = torch.topk(logits, top_k, dim=-1).values[:, -1:]
        logits = logits.masked_fill(logits < kth, float("-inf"))
    probs = torch.softmax(logits, dim=-1)
    return torch.multinomial(probs, 1, generator=generator).view(-1)
