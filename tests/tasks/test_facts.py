"""The recall curriculum (``task.facts``): facts written over training rows, never over validation text."""

from __future__ import annotations

import re

import numpy as np
import pytest

from bdh.errors import UserError
from bdh.tasks.facts import MIN_DISTANCE, PAIR_BYTES, apply_overlays, plan_facts
from bdh.tasks.text import LANE_FACT_WINDOWS, TextConfig, TextTask

PAIR = re.compile(rb" The word for ([a-z]{5}) is ([a-z]{5})\. ")
ASK = re.compile(rb" The word for ([a-z]{5}) is ([a-z]{5})\.")


def _rows(x) -> list[bytes]:
    return [bytes(r.tolist()) for r in x]


def test_plan_places_pairs_that_answer_their_facts():
    rng = np.random.Generator(np.random.PCG64(0))
    row = np.full(4096, ord("."), dtype=np.uint8)
    overlays = plan_facts(rng, len(row), per_kilobyte=3.0, reach=2000)
    assert len(overlays) >= 4 and len(overlays) % 2 == 0
    text = apply_overlays(row, overlays).tobytes()
    for fact, ask in zip(overlays[::2], overlays[1::2], strict=True):
        key, value = PAIR.fullmatch(fact.data).groups()
        assert ASK.fullmatch(ask.data).groups() == (key, value)  # the question answers with the fact's value
        distance = ask.at - (fact.at + len(fact.data))
        assert MIN_DISTANCE <= distance <= 2000
        assert text[fact.at : fact.at + len(fact.data)] == fact.data  # no later pair overwrote it
        assert text[ask.at : ask.at + len(ask.data)] == ask.data


def test_plan_is_empty_when_off_or_when_no_pair_fits():
    rng = np.random.Generator(np.random.PCG64(0))
    assert plan_facts(rng, 4096, per_kilobyte=0.0, reach=100) == []
    assert plan_facts(rng, PAIR_BYTES + MIN_DISTANCE - 1, per_kilobyte=100.0, reach=100) == []


def test_overlays_cut_at_any_offset_equal_the_whole_row():
    rng = np.random.Generator(np.random.PCG64(3))
    row = np.arange(3000, dtype=np.int64).astype(np.uint8)
    overlays = plan_facts(rng, len(row), per_kilobyte=5.0, reach=3000)
    whole = apply_overlays(row, overlays)
    pieces = [apply_overlays(row[a : a + 129], overlays, a) for a in range(0, 2871, 128)]
    assert np.array_equal(np.concatenate([p[:128] for p in pieces]), whole[: 128 * len(pieces)])


def test_window_batches_carry_facts_only_in_training():
    task = TextTask(TextConfig(seq_len=128, facts=20.0))
    plain = TextTask(TextConfig(seq_len=128))
    x, y = task.batch("train", 0, 16, seed=0)
    assert any(PAIR.search(r) for r in _rows(x))
    assert (x[:, 1:] == y[:, :-1]).all()  # the targets are still the inputs shifted by one byte
    for a, b in zip(task.batch("val", 0, 4, 0), plain.batch("val", 0, 4, 0), strict=True):
        assert (a == b).all()  # validation text is never changed
    again = task.batch("train", 0, 16, seed=0)[0]
    assert (again == x).all()  # a pure function of (split, index, seed): exact resume


@pytest.mark.parametrize("windows", [8, None])
def test_streams_continue_across_windows_with_their_facts(windows):
    task = TextTask(TextConfig(seq_len=64, facts=10.0))
    count = windows or LANE_FACT_WINDOWS + 2  # lanes: past the first block of planned facts
    batches = [task.stream_batch("train", i, 2, 0, stream_windows=windows) for i in range(count)]
    for a, b in zip(batches, batches[1:], strict=False):
        assert (a[1][:, -1] == b[0][:, 0]).all()  # a window's last target is the next window's first input
    stream = b"".join(bytes(b[0][0].tolist()) for b in batches)
    asks = [m for m in ASK.finditer(stream) if stream.find(b" The word for " + m.group(1) + b" is ") < m.start()]
    assert asks, "a question answered by a fact read windows earlier"


def test_bad_values_are_one_line_errors():
    with pytest.raises(UserError, match="facts"):
        TextConfig(facts=-1.0)
    with pytest.raises(UserError, match="fact_reach"):
        TextConfig(fact_reach=2)
