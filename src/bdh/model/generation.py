"""Generation on the recurrent state (Eq. 8): `GenerationMixin` gives `BDH` its ``stream`` and ``generate``."""

from __future__ import annotations

from collections.abc import Iterator, Sequence

import torch

from bdh.errors import UserError

from .sampling import PROMPT_CHUNK, _check_stop, check_sampling, penalize, sample
from .state import BDHState


class GenerationMixin:
    """Sampling from a model with ``step(tokens, state, mode=..., inplace=...)`` and ``init_state``."""

    def stream(
        self,
        prompt: torch.Tensor,
        max_new_tokens: int,
        *,
        temperature: float = 1.0,
        top_k: int | None = None,
        top_p: float | None = None,
        repetition_penalty: float = 1.0,
        stop: Sequence[Sequence[int]] | None = None,
        seed: int | None = None,
        state: BDHState | None = None,
        sparse: bool = False,
        prompt_chunk: int = PROMPT_CHUNK,
    ) -> Iterator[torch.Tensor]:
        """Yield (B,) sampled tokens one at a time, generating on the recurrent state (dropout off).

        The prompt is read in chunks of ``prompt_chunk`` tokens (bounded memory), then each token is one recurrent step.
        ``sparse=True`` (batch of one, no damping) skips the neurons that do not fire, with the same results; whether it
        is faster depends on the machine (docs/performance.md). Sampling as Hugging Face's: ``repetition_penalty``,
        ``temperature`` (0: greedy), ``top_k``, ``top_p``; ``stop``: token sequences that end the stream (batch of one).
        Arguments are checked when called (`UserError`)."""
        if not self.config.causal:
            raise UserError("BDH.generate: a bidirectional model (causal=false) cannot generate")
        check_sampling("BDH.generate", max_new_tokens, temperature, top_k, top_p, repetition_penalty)
        prompt = prompt.view(1, -1) if prompt.dim() == 1 else prompt
        if prompt.shape[1] == 0:
            raise UserError("BDH.generate: the prompt is empty; give at least one token")
        stops = _check_stop(stop, self.config.vocab_size, prompt.shape[0])
        return self._stream(
            prompt,
            max_new_tokens,
            temperature=temperature,
            top_k=top_k,
            top_p=top_p,
            repetition_penalty=repetition_penalty,
            stops=stops,
            seed=seed,
            state=state,
            sparse=sparse,
            prompt_chunk=prompt_chunk,
        )

    @torch.no_grad()
    def _stream(
        self,
        prompt: torch.Tensor,
        max_new_tokens: int,
        *,
        temperature: float,
        top_k: int | None,
        top_p: float | None,
        repetition_penalty: float,
        stops: list[tuple[int, ...]],
        seed: int | None,
        state: BDHState | None,
        sparse: bool,
        prompt_chunk: int,
    ) -> Iterator[torch.Tensor]:
        device = self.readout.device
        prompt = prompt.to(device)
        gen = None
        if seed is not None:
            gen = torch.Generator(device=device)
            gen.manual_seed(seed)
        seen = None
        if repetition_penalty != 1:
            seen = torch.zeros(prompt.shape[0], self.config.vocab_size, dtype=torch.bool, device=device)
            seen.scatter_(1, prompt, True)
        longest = max((len(s) for s in stops), default=0)
        tail: list[int] = []  # the last `longest` generated tokens (a batch of one)
        was_training = self.training
        self.eval()
        try:
            state = self.init_state(prompt.shape[0]) if state is None else state.clone()
            for start in range(0, prompt.shape[1], prompt_chunk):
                logits, state = self.step(prompt[:, start : start + prompt_chunk], state, mode="chunked", inplace=True)
            logits = logits[:, -1]
            for i in range(max_new_tokens):
                if seen is not None:
                    logits = penalize(logits, seen, repetition_penalty)
                nxt = sample(logits, temperature, top_k, gen, top_p=top_p)
                yield nxt
                if seen is not None:
                    seen.scatter_(1, nxt.view(-1, 1), True)
                if stops:
                    tail = (tail + [int(nxt[0])])[-longest:]
                    if any(len(s) <= len(tail) and tuple(tail[len(tail) - len(s) :]) == s for s in stops):
                        return
                if i + 1 < max_new_tokens:
                    logits, state = self.step(nxt, state, mode="sparse" if sparse else "recurrent", inplace=True)
        finally:
            self.train(was_training)

    def decoder(self, batch_size: int = 1, **options):
        """A `StateDecoder` of this model (batched, on-device sampling, CUDA graph); ``options``: its
        keyword arguments."""
        from .decoder import StateDecoder

        return StateDecoder(self, batch_size, **options)

    @torch.no_grad()
    def generate(
        self,
        prompt: torch.Tensor,
        max_new_tokens: int,
        *,
        temperature: float = 1.0,
        top_k: int | None = None,
        top_p: float | None = None,
        repetition_penalty: float = 1.0,
        stop: Sequence[Sequence[int]] | None = None,
        seed: int | None = None,
        sparse: bool = False,
    ) -> torch.Tensor:
        """The prompt (B, T) or (T,) and up to ``max_new_tokens`` generated tokens, (B, T + new); options
        are `stream`'s."""
        prompt2 = prompt.view(1, -1) if prompt.dim() == 1 else prompt
        options = dict(temperature=temperature, top_k=top_k, top_p=top_p, repetition_penalty=repetition_penalty)
        new = list(self.stream(prompt2, max_new_tokens, **options, stop=stop, seed=seed, sparse=sparse))
        out = torch.cat([prompt2.to(self.readout.device)] + [t.view(-1, 1) for t in new], dim=1)
        return out.view(-1) if prompt.dim() == 1 else out
