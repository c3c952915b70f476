"""benchmarks/recall_probe.py: its variants are valid configs, a tiny run prints the table, bad names are refused."""

from __future__ import annotations

import pytest


@pytest.fixture
def probe(load_benchmark):
    return load_benchmark("recall_probe")


def test_a_tiny_run_prints_one_row_per_variant_with_its_curve(probe, tmp_path, capsys):
    out = tmp_path / "table.md"
    argv = ["--only", "bdh,bdh-no-rope,gpt", "--steps", "4", "--every", "2", "--seq-len", "16", "--pairs", "2"]
    assert probe.main([*argv, "--vocab", "32", "--out", str(out)]) == 0
    text = capsys.readouterr().out
    assert out.read_text() == text.rstrip("\n") + "\n"
    rows = [line for line in text.splitlines() if line.startswith("| bdh") or line.startswith("| gpt")]
    assert [r.split("|")[1].strip() for r in rows] == ["bdh", "bdh-no-rope", "gpt"]
    assert "step 2" in text and "step 4" in text
    for r in rows:  # parameters, then an accuracy in [0, 1] at both evaluations
        cells = [c.strip() for c in r.split("|")[4:-1]]
        assert int(cells[0].replace(",", "")) > 0
        assert all(0.0 <= float(c) <= 1.0 for c in cells[1:])


def test_every_variant_builds_a_valid_model(probe):
    from bdh.bench.recall import RecallSweep, model_section
    from bdh.registry import get_model

    for v in probe.VARIANTS:
        sweep = RecallSweep(vocab_size=64, n_layer=v.n_layer, n_head=v.n_head, neuron_mult=v.neuron_mult)
        section = {**model_section(v.model, 32, sweep, 32), **v.section}
        name = section.pop("name")
        assert name == v.model
        get_model(name).config_class.from_dict(section)


def test_unknown_variants_are_refused(probe, capsys):
    with pytest.raises(SystemExit) as exc:
        probe.main(["--only", "bdh,nope"])
    assert exc.value.code == 2
    assert "unknown variant(s) nope" in capsys.readouterr().err
