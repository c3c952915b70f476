"""benchmarks/viz.py (the viewer's cost tables in docs/viz.md): ``--quick`` prints the command, machine and tables."""

from __future__ import annotations


def test_quick_prints_the_command_the_machine_and_both_tables(load_benchmark, capsys):
    assert load_benchmark("viz").main(["--quick", "--threads", "1"]) == 0
    out = capsys.readouterr().out
    assert "command: `python benchmarks/viz.py --quick --threads 1`" in out
    assert "cores, 1 torch threads" in out and "load average" in out
    rows = [line.split("|")[1:-1] for line in out.splitlines() if line.startswith("| ")]
    lengths = {int(r[0].replace(",", "")): r for r in rows if r[0].strip().replace(",", "").isdigit()}
    assert sorted(lengths) == [16, 32]
    sizes = [float(r[2].split()[0]) for r in lengths.values()]
    assert all(s > 0 for s in sizes)
    assert any("HTML size (16-byte prompt)" in r[0] for r in rows)
    assert any("peak resident memory" in r[0] and float(r[1].split()[0]) > 0 for r in rows)
