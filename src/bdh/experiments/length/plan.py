"""What ``bdh experiment length --show-config`` prints beside the config: the runs, the tokens they train and read."""

from __future__ import annotations

from .config import Config


def describe_plan(config: Config) -> str:
    """The runs, the tokens each trains and reads, and the lengths read."""
    runs = len(config.models) * len(config.tasks) * len(config.seeds)
    trained = config.steps * config.batch_size * config.seq_len
    read = config.test_sequences * sum(config.lengths)
    return (
        f"length plan: {runs} runs ({len(config.models)} models x {len(config.tasks)} tasks x {len(config.seeds)} "
        f"seeds), each {config.steps} steps of {config.batch_size} x {config.seq_len} tokens ({trained:,} tokens), "
        f"then {config.test_sequences} test sequences at each of {len(config.lengths)} lengths "
        f"({config.lengths[0]:,} to {config.lengths[-1]:,}: {read:,} tokens read per read form)"
    )
