"""benchmarks/long_price.py (the price of a long context in docs/long-context.md) at a tiny size."""

from __future__ import annotations


def _rows(out: str, header: str) -> list[list[str]]:
    block = out.split(header, 1)[1]
    lines = [line for line in block.splitlines() if line.startswith("| ") and not line.startswith("|---")]
    rows = []
    for line in lines[1:]:
        if not line.startswith("| "):
            break
        rows.append([c.strip() for c in line.split("|")[1:-1]])
    return rows


def test_both_tables_measure_every_context_and_model(load_benchmark, capsys):
    bench = load_benchmark("long_price")
    argv = ["--tokens", "96", "--windows", "1", "--contexts", "8", "40", "--new-tokens", "2", "--width", "8"]
    argv += ["--models", "gla", "--threads", "1"]
    assert bench.main(argv) == 0
    out = capsys.readouterr().out
    assert "command: `python benchmarks/long_price.py --tokens 96" in out
    read = _rows(out, "Read:")
    assert [r[0] for r in read[:2]] == ["bdh-nopos-lg", "gla"]
    for row in read[:2]:
        windowed, state, ratio = (float(c.replace(",", "")) for c in row[2:5])
        assert windowed > 0 and state > 0
        # tokens/s printed to units, the ratio to two decimals: off by at most their rounding
        assert abs(ratio - state / windowed) <= 0.005 + ratio * (0.5 / windowed + 0.5 / state) * 1.01
    gen = _rows(out, "Generation:")
    assert [r[0] for r in gen] == ["8", "40"]
    for row in gen:
        bdh_ms, gpt_ms, ratio = (float(c) for c in row[1:4])
        assert bdh_ms > 0 and gpt_ms > 0
        # each printed to two decimals: the ratio of the printed times is off by at most their rounding
        slack = 0.005 + ratio * (0.005 / bdh_ms + 0.005 / gpt_ms) * 1.01
        assert abs(ratio - gpt_ms / bdh_ms) <= slack
