"""What ``bdh experiment length --show-config`` prints beside the config: the runs, the tokens they train and read,
and their cost estimated by timing `PROBE_STEPS` steps and one read at 4T of each model here (an upper bound:
every length is counted, and a whole attention read is scaled in proportion to the length)."""

from __future__ import annotations

import time
from functools import partial

import torch

from bdh.registry import get_model
from bdh.tasks.lengths import fixed_test_set

from ..common import duration
from . import reading
from .config import Config

#: timed training steps per model
PROBE_STEPS = 2


def _build(config: Config, name: str, task: str) -> torch.nn.Module:
    section = config.model_section(name, task)
    cls = get_model(section.pop("name"))
    return cls(cls.config_class(**section))


def step_seconds(config: Config, model: torch.nn.Module, vocab: int) -> float:
    """Seconds of one training step of ``model`` on a batch of the config's size (CPU threads as set)."""
    opt = torch.optim.Adam(model.parameters(), lr=config.lr)
    x = torch.randint(0, vocab, (config.batch_size, config.seq_len))
    times = []
    for _ in range(PROBE_STEPS + 1):
        start = time.perf_counter()
        logits = model(x)
        torch.nn.functional.cross_entropy(logits.flatten(0, 1).float(), x.flatten()).backward()
        opt.step()
        opt.zero_grad()
        times.append(time.perf_counter() - start)
    return sum(times[1:]) / PROBE_STEPS


def read_seconds(config: Config, name: str, model: torch.nn.Module, task: object) -> float:
    """Estimated seconds of every read of one run: each read form timed once at 4T on as many sequences as a read
    holds at once (a loop over tokens costs per step, not per sequence, so fewer rows would overstate it)."""
    from .experiment import ATTENTION, read_model, reads_of, rows_per_read

    model.eval()
    probe, total = 4 * config.seq_len, 0.0
    for read in reads_of(name, model, config.hard_reads, config.hard_read_top1_heads):
        rows = max(1, min(rows_per_read(config, name, model, read, probe), config.test_sequences))
        x, y = fixed_test_set(task, probe, n=config.test_sequences, rows=range(rows))
        fn = {
            "state": partial(reading.read_state, chunk=config.seq_len),
            "whole": reading.read_whole,
            "window": partial(reading.read_window, window=config.seq_len),
        }["state" if read.startswith("state") else read]  # a hard read: the state of its twin (`read_model`)
        start = time.perf_counter()
        tokens = fn(read_model(model, read, config.hard_read_top1_heads), x, y)[3]
        per_token = (time.perf_counter() - start) / tokens
        for length in config.lengths:
            if read == "window":
                total += per_token * tokens / rows * config.test_sequences  # the same windows at any length
            elif read == "whole" and name in ATTENTION:
                if reading.attention_bytes(model, 1, length) <= config.attention_gb * 2**30:
                    total += per_token * config.test_sequences * length * length / probe
            else:
                total += per_token * config.test_sequences * length
    return total


def describe_plan(config: Config, probe: bool = True) -> str:
    """The runs, the tokens each trains and reads, and (``probe``) each model's cost timed here."""
    from .experiment import _task

    runs_each = sum(len(config.trained_facts(task)) for task in config.tasks) * len(config.seeds)
    runs = len(config.models) * runs_each
    kinds = f"{runs_each // len(config.seeds)} tasks" + " and trained counts of facts" * bool(config.facts)
    # after a curriculum's short phase the steps at T take their own batch (`batch_at_t`)
    batch_t = config.batch_at_t if config.short_steps and config.batch_at_t is not None else config.batch_size
    trained = config.steps * config.seq_len * batch_t + config.short_steps * config.short_len * config.batch_size
    short = f"{config.short_steps} steps of {config.batch_size} at {config.short_len}, then " * bool(config.short_steps)
    read = config.test_sequences * sum(config.lengths)
    lines = [
        f"length plan: {runs} runs ({len(config.models)} models x {kinds} x {len(config.seeds)} seeds), each "
        f"{short}{config.steps} steps of {batch_t} x {config.seq_len} tokens ({trained:,} tokens), "
        f"then {config.test_sequences} test sequences at each of {len(config.lengths)} lengths "
        f"({config.lengths[0]:,} to {config.lengths[-1]:,}: {read:,} tokens per read form)"
    ]
    if config.facts_read:
        lines[0] += f"; recall_gap also read at {len(config.facts_read)} more counts of facts (a read form each)"
    if not probe:
        return lines[0]
    total = 0.0
    for name in config.models:
        task_name = config.tasks[0]
        task = _task(config, task_name, config.trained_facts(task_name)[0])
        model = _build(config, name, task_name)
        # a step of the short phase is timed as its share of tokens of a step at T (an upper bound: attention is
        # quadratic inside a chunk)
        steps = config.steps * batch_t / config.batch_size + config.short_steps * config.short_len / config.seq_len
        train_s = steps * step_seconds(config, model, task.vocab_size)
        read_s = read_seconds(config, name, model, task) * (1 + len(config.facts_read) * (task_name == "recall_gap"))
        cost = (train_s + read_s) * runs_each
        total += cost
        lines.append(
            f"  {name}: {model.num_params():,} parameters, per run {duration(train_s, 2)} training + at most "
            f"{duration(read_s, 2)} reading; {duration(cost, 2)} for its {runs_each} runs"
        )
    threads = torch.get_num_threads()
    lines.append(f"estimated: at most {duration(total, 2)} in all with {threads} thread(s), timed on this machine")
    return "\n".join(lines)
