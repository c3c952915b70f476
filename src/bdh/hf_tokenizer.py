"""`BDHByteTokenizer`: BDH's byte-level tokenizer as a `transformers` tokenizer.

Token id ``b`` is the byte ``b`` (``vocab_size = 256``, section 7); no BOS/EOS; the pad token is NUL, on the left."""

from __future__ import annotations

from typing import ClassVar

from transformers import PreTrainedTokenizer

N_BYTES = 256


class BDHByteTokenizer(PreTrainedTokenizer):
    """Bytes 0..255 <-> token ids 0..255; saved as a ``tokenizer_config.json`` alone."""

    vocab_files_names: ClassVar[dict[str, str]] = {}
    model_input_names: ClassVar[list[str]] = ["input_ids", "attention_mask"]

    def __init__(self, pad_token: str = "\x00", padding_side: str = "left", **kwargs):
        super().__init__(pad_token=pad_token, padding_side=padding_side, **kwargs)

    @property
    def vocab_size(self) -> int:
        return N_BYTES

    def get_vocab(self) -> dict[str, int]:
        return {chr(b): b for b in range(N_BYTES)}

    def _tokenize(self, text: str, **kwargs) -> list[str]:
        return [chr(b) for b in text.encode("utf-8")]

    def _convert_token_to_id(self, token: str) -> int:
        if len(token) != 1 or ord(token) >= N_BYTES:
            raise ValueError(f"BDHByteTokenizer: {token!r} is not a byte token")
        return ord(token)

    def _convert_id_to_token(self, index: int) -> str:
        if not 0 <= index < N_BYTES:
            raise ValueError(f"BDHByteTokenizer: token id {index} is outside the byte range 0..255")
        return chr(index)

    def convert_tokens_to_string(self, tokens: list[str]) -> str:
        return bytes(ord(t) for t in tokens).decode("utf-8", errors="replace")

    def save_vocabulary(self, save_directory: str, filename_prefix: str | None = None) -> tuple[str, ...]:
        return ()  # the vocabulary is the byte range itself
