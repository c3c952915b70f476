"""`bdh.train.run.listing`: the run listing is a library function, read from a run folder's files alone."""

import json

import pytest

from bdh.errors import UserError
from bdh.train.run.listing import COLUMNS, list_runs, run_folders, summarize_run


def make_run(root, name, *, steps=3, max_steps=10, best=None, checkpoint_total=None, val_bpb=2.5):
    run = root / name
    run.mkdir(parents=True)
    (run / "config.yaml").write_text(f"model:\n  name: bdh\ntask:\n  name: text\ntrain:\n  max_steps: {max_steps}\n")
    records = [{"kind": "train", "step": s, "tokens": 100 * s} for s in range(1, steps + 1)]
    records.append({"kind": "eval", "step": steps, "val_bpb": val_bpb})
    (run / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records))
    if best is not None:
        (run / "best").mkdir()
        (run / "best" / "meta.json").write_text(best)
    if checkpoint_total is not None:
        folder = run / "checkpoints" / f"step-{steps}"
        folder.mkdir(parents=True)
        (folder / "meta.json").write_text(json.dumps({"total_steps": checkpoint_total}))
    return run


def test_a_run_summary_reads_the_config_metrics_best_and_checkpoint(tmp_path):
    best = json.dumps({"metric": "val_loss", "value": 1.25, "step": 3})
    run = make_run(tmp_path, "a", best=best, checkpoint_total=7)
    s = summarize_run(run)
    assert (s.model, s.task, s.step, s.tokens) == ("bdh", "text", 3, 300)
    assert s.total_steps == 7  # the checkpoint's length (a time budget shortened the run), not max_steps 10
    assert s.best == ("val_loss", 1.25, 3) and s.last_val_bpb == 2.5 and s.checkpoint == "step-3"
    assert s.row() == ("a", "bdh", "text", "3/7", "300", "val_loss 1.2500 @3", "2.5000", "step-3")
    assert len(s.row()) == len(COLUMNS)


def test_a_run_its_time_budget_cut_shows_planned_against_trained_steps_and_the_budget(tmp_path):
    run = make_run(tmp_path, "cut", steps=186, max_steps=2000, checkpoint_total=186)
    config = run / "config.yaml"
    config.write_text(config.read_text() + "  max_minutes: 10.0\n  max_tokens: null\n")
    s = summarize_run(run)
    assert (s.step, s.total_steps, s.step_limit, s.max_minutes) == (186, 186, 2000, 10.0)
    assert s.row()[3] == "186/186 of 2000 (cut by train.max_minutes=10)"
    # a token limit below max_steps, not the budget, set this length: nothing is said of a cut
    config.write_text(config.read_text().replace("max_tokens: null", "max_tokens: 18600"))  # 100 tokens a step
    assert summarize_run(run).row()[3] == "186/186"


def test_damaged_files_cost_one_field_not_the_listing(tmp_path):
    make_run(tmp_path, "a", best="{not json", val_bpb=float("nan"))
    make_run(tmp_path, "b")
    (tmp_path / "c").mkdir()
    (tmp_path / "c" / "config.yaml").write_text(":\n- [")  # a config that cannot be read: skipped
    runs = list_runs(tmp_path)
    assert [r.path.name for r in runs] == ["a", "b"]
    assert runs[0].best == "?" and runs[0].last_val_bpb is None  # NaN is shown as "-", not "nan"
    assert runs[1].best is None and runs[1].row()[5] == "-" and runs[1].total_steps == 10


def test_a_config_whose_sections_are_not_mappings_is_listed_with_unknowns(tmp_path):
    """A config.yaml cut inside the first key of a section still parses (``train:`` then ``  d`` is ``train: d``):
    `bdh runs` showed an internal error; the sections it cannot read cost their fields."""
    run = make_run(tmp_path, "a")
    (run / "config.yaml").write_text("model: 3\ntask:\n- text\ntrain:\n  d")
    s = summarize_run(run)
    assert (s.model, s.task, s.total_steps, s.step_limit) == ("?", "?", "?", None)


def test_a_run_folder_lists_itself_and_a_file_is_refused_in_one_line(tmp_path):
    run = make_run(tmp_path, "a")
    assert run_folders(run) == [run] and run_folders(tmp_path) == [run]
    (tmp_path / "f.txt").write_text("x")
    with pytest.raises(UserError, match="not a folder"):
        run_folders(tmp_path / "f.txt")
    with pytest.raises(FileNotFoundError, match="no such folder"):
        run_folders(tmp_path / "missing")
