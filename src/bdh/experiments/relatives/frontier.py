"""Part (a) of ``bdh experiment relatives``: the MQAR frontier (Zoology, Arora et al. 2023, Figure 2).

The recall suite of ``bdh bench`` (`bdh.bench.recall`) with the pairs D tied to the lengths N one to one (Zoology's
sweep) and the models named by `bdh.experiments.relatives.zoo`, each but BDH sized to BDH's parameter count."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar

from bdh.bench.recall import RecallSweep
from bdh.bench.spec import BenchError

from . import zoo


@dataclass
class FrontierSweep(RecallSweep):
    """The MQAR frontier's sweep: `RecallSweep`'s fields, with ``num_pairs[i]`` the D of ``seq_lens[i]`` and
    ``models`` the comparison's labels (`zoo.check_labels`)."""

    suite = "frontier"
    #: how the experiment's config names the sweep's fields (errors name the field ``--set`` changes)
    CONFIG_NAMES: ClassVar[dict[str, str]] = {}

    models: tuple[str, ...] = zoo.MODELS

    @classmethod
    def _key(cls, field: str) -> str:
        return f"relatives.{cls.CONFIG_NAMES.get(field, field)}"

    def settings(self) -> list[tuple[int, int]]:
        """The (N, D) pairs: ``seq_lens`` and ``num_pairs`` taken together, one D per N."""
        return list(zip(self.seq_lens, self.num_pairs, strict=True))

    def section(self, model: str, width: int, seq_len: int) -> dict[str, Any]:
        """The model section of the label ``model`` at ``width`` (`zoo.section`)."""
        return zoo.section(
            model,
            width,
            vocab_size=self.vocab_size,
            seq_len=seq_len,
            n_layer=self.n_layer,
            n_head=self.n_head,
            neuron_mult=self.neuron_mult,
        )

    def validate(self) -> None:
        """One D per N with 4 D <= N, then the recall suite's rules (vocabulary, even lengths, neuron heads)."""
        zoo.check_labels(self.models)
        if len(self.seq_lens) != len(self.num_pairs):
            raise BenchError(
                f"{self._key('num_pairs')}: give one number of pairs per sequence length "
                f"({len(self.seq_lens)}), got {len(self.num_pairs)}"
            )
        for N, D in self.settings():
            if 4 * D > N or D > self.vocab_size // 2 - 1:
                raise BenchError(
                    f"{self._key('num_pairs')}: {D} pairs do not fit sequences of {N} tokens (4 D <= N) "
                    f"or a vocabulary of {self.vocab_size} (D < V / 2)"
                )
        super().validate()
