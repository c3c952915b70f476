"""Batched generation on the recurrent state as one static step: what a CUDA graph captures once and replays.

`StateDecoder` does `BDH.step`'s arithmetic (Eq. 8) on buffers allocated once (state, position, tokens, logits, seen
mask, sampling), with no host synchronisation; on CUDA the third step is captured in a `torch.cuda.CUDAGraph`. Stop
sequences are not supported."""

from __future__ import annotations

import torch

from bdh.errors import UserError

from .kernels import Pass
from .kernels.pytorch.rope import rope_tables_at
from .sampling import PROMPT_CHUNK, check_sampling, penalize, sample
from .state import BDHState

#: eager steps (on a side stream) before the CUDA graph is captured
WARMUP_STEPS = 2


class StateDecoder:
    """Generation for a batch of B sequences on preallocated buffers, one token per sequence per `step`.

        >>> dec = StateDecoder(model, batch_size=8, temperature=0)
        >>> tokens = dec.generate(prompt, 256)          # prompt (8, T) -> (8, T + 256)

    ``model`` is put in eval mode; sampling options are `GenerationMixin.stream`'s; ``cuda_graph`` defaults to
    on CUDA."""

    def __init__(
        self,
        model,
        batch_size: int,
        *,
        temperature: float = 1.0,
        top_k: int | None = None,
        top_p: float | None = None,
        repetition_penalty: float = 1.0,
        seed: int | None = None,
        cuda_graph: bool | None = None,
    ):
        if not model.config.causal:
            raise UserError("StateDecoder: a bidirectional model (causal=false) cannot generate")
        check_sampling("StateDecoder", 0, temperature, top_k, top_p, repetition_penalty)
        if isinstance(batch_size, bool) or not isinstance(batch_size, int) or batch_size < 1:
            raise UserError(f"StateDecoder: batch_size must be a positive integer, got {batch_size!r}")
        self.model = model
        self.options = dict(temperature=temperature, top_k=top_k, top_p=top_p)
        self.penalty = repetition_penalty
        device = model.readout.device
        self.graphed = device.type == "cuda" if cuda_graph is None else bool(cuda_graph)
        if self.graphed and device.type != "cuda":
            raise UserError(f"StateDecoder: cuda_graph=True needs a model on a CUDA device, not {device}")
        self.generator = None
        if seed is not None:
            self.generator = torch.Generator(device=device)
            self.generator.manual_seed(seed)
            # a graph replays a generator of its own only where torch can register it (else: eager steps)
            self.graphed = self.graphed and hasattr(torch.cuda.CUDAGraph, "register_generator_state")
        model.eval()  # the kernels below are chosen for inference: no dropout
        self.rho = model.init_state(batch_size).rho
        self.position = torch.zeros((), dtype=torch.long, device=device)
        self.tokens = torch.zeros(batch_size, dtype=torch.long, device=device)
        self.logits = torch.zeros(batch_size, model.config.vocab_size, device=device)
        self.seen = None if repetition_penalty == 1 else torch.zeros_like(self.logits, dtype=torch.bool)
        with torch.no_grad():  # an in-place pass is chosen only without autograd
            self.kernels = model.kernels(Pass("recurrent", 0, 1, carried=True, need_state=True, inplace=True))
        self._graph: torch.cuda.CUDAGraph | None = None
        self._eager_steps = 0

    @property
    def batch_size(self) -> int:
        return self.tokens.shape[0]

    @property
    def state(self) -> BDHState:
        """The state so far (its rho is the buffer, not a copy); reading it waits for the device."""
        return BDHState(self.rho, int(self.position))

    # ------------------------------------------------------------------ starting points
    @torch.no_grad()
    def prefill(self, prompt: torch.Tensor, prompt_chunk: int = PROMPT_CHUNK) -> torch.Tensor:
        """Read a (B, T) prompt into an empty state (chunked form) and return the first new tokens, (B,)."""
        prompt = prompt.view(1, -1) if prompt.dim() == 1 else prompt
        if prompt.dim() != 2 or prompt.shape[0] != self.batch_size or prompt.shape[1] == 0:
            raise UserError(
                f"StateDecoder: the prompt must be ({self.batch_size}, T) tokens with T >= 1, got {tuple(prompt.shape)}"
            )
        prompt = prompt.to(self.tokens.device)
        state = BDHState(self.rho.zero_(), 0)
        for start in range(0, prompt.shape[1], prompt_chunk):
            logits, state = self.model.step(
                prompt[:, start : start + prompt_chunk], state, mode="chunked", inplace=True
            )
        if self.seen is not None:
            self.seen.zero_().scatter_(1, prompt, True)
        return self.start(state, logits[:, -1])

    @torch.no_grad()
    def start(self, state: BDHState, logits: torch.Tensor) -> torch.Tensor:
        """Continue from ``state`` (batch B, or 1: copied to all) with last ``logits`` (B or 1, V); returns the first
        tokens (B,)."""
        rho = state.rho
        if rho.dim() != 5 or rho.shape[1] not in (1, self.batch_size) or rho.shape[2:] != self.rho.shape[2:]:
            raise UserError(
                f"StateDecoder: the state must be {tuple(self.rho.shape)} (or batch 1), got {tuple(rho.shape)}"
            )
        if rho.data_ptr() != self.rho.data_ptr():
            self.rho.copy_(rho)
        self.position.fill_(state.pos)
        self.logits.copy_(logits.float().expand_as(self.logits))
        self._draw(self.logits)
        return self.tokens

    # ------------------------------------------------------------------ the step
    def _draw(self, logits: torch.Tensor) -> None:
        """The next tokens from (B, V) logits into ``tokens`` (with the penalty and the seen mask)."""
        if self.seen is not None:
            logits = penalize(logits, self.seen, self.penalty)
        nxt = sample(
            logits, self.options["temperature"], self.options["top_k"], self.generator, top_p=self.options["top_p"]
        )
        if self.seen is not None:
            self.seen.scatter_(1, nxt.view(-1, 1), True)
        self.tokens.copy_(nxt)

    def _advance(self) -> None:
        """Read ``tokens`` at ``position`` into the state and draw the next ones; static shapes (what the
        graph captures)."""
        k = self.kernels
        kind = k.choice.positional
        if kind != "none":
            k = k.at(rope_tables_at(kind, self.model.freqs, self.position.view(1)))
        logits, _ = self.model.stack(self.tokens.view(-1, 1), self.rho, k, self.model.config.n_layer)
        self.position.add_(1)
        self.logits.copy_(logits[:, -1])
        self._draw(self.logits)

    @torch.no_grad()
    def step(self) -> torch.Tensor:
        """Advance every sequence by one token; returns the (B,) buffer of new tokens (overwritten next step)."""
        self.model.eval()
        if self._graph is not None:
            self._graph.replay()
        elif self.graphed and self._eager_steps >= WARMUP_STEPS:
            self._capture()
            self._graph.replay()  # capturing records the step without running it
        elif self.graphed:
            side = torch.cuda.Stream(device=self.tokens.device)
            side.wait_stream(torch.cuda.current_stream(self.tokens.device))
            with torch.cuda.stream(side):
                self._advance()
            torch.cuda.current_stream(self.tokens.device).wait_stream(side)
            self._eager_steps += 1
        else:
            self._advance()
        return self.tokens

    def _capture(self) -> None:
        graph = torch.cuda.CUDAGraph()
        if self.generator is not None:
            graph.register_generator_state(self.generator)  # its draws advance with every replay
        with torch.cuda.graph(graph):
            self._advance()
        self._graph = graph

    @torch.no_grad()
    def generate(self, prompt: torch.Tensor, max_new_tokens: int) -> torch.Tensor:
        """The (B, T) prompt followed by ``max_new_tokens`` generated tokens, (B, T + new); one host wait at the end."""
        check_sampling("StateDecoder", max_new_tokens, **self.options, repetition_penalty=self.penalty)
        prompt = prompt.view(1, -1) if prompt.dim() == 1 else prompt
        out = torch.empty(self.batch_size, max_new_tokens, dtype=torch.long, device=self.tokens.device)
        if max_new_tokens:
            out[:, 0] = self.prefill(prompt)
        for i in range(1, max_new_tokens):
            out[:, i] = self.step()
        return torch.cat([prompt.to(out.device), out], dim=1)
