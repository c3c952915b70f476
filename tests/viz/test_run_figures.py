"""`bdh.viz.run_figures` and `bdh.viz.inputs.choose_input`: what ``bdh plot`` draws and reads is chosen in the
library, and a Python caller gets the files the command wrote."""

from __future__ import annotations

import shutil

import pytest

from bdh.cli import main
from bdh.errors import UserError
from bdh.model import BDH
from bdh.viz.inputs import choose_input, output_stem, report_path
from bdh.viz.run_figures import check_indices, holds_any_model, plot_run, write_figures

from .conftest import BOARD


def test_a_python_caller_writes_the_figures_bdh_plot_wrote(text_run, tmp_path, capsys):
    model = BDH.from_pretrained(text_run / "best")
    inp = choose_input(model, text_run / "best", prompt=b"to be or not")
    made, skipped = write_figures(text_run, tmp_path, model, inp, layer=1, head=0)
    assert skipped == [] and all(path.is_file() for path in made)
    out = tmp_path / "cli"
    assert (
        main(["plot", str(text_run), "--prompt", "to be or not", "--layer", "1", "--head", "0", "--out", str(out)]) == 0
    )
    printed = [line.removeprefix("wrote ") for line in capsys.readouterr().out.splitlines() if line.startswith("wrote")]
    assert printed == [str(out / path.name) for path in made]


def test_write_figures_says_what_it_skipped(text_run, tmp_path):
    run = tmp_path / "run"
    shutil.copytree(text_run, run)
    (run / "metrics.jsonl").write_text("")
    shutil.rmtree(run / "best")
    assert not holds_any_model(run) and holds_any_model(text_run)
    made, skipped = write_figures(run, tmp_path / "out")
    assert made == [] and skipped == [f"curves: no records in {run / 'metrics.jsonl'}"]


def test_inputs_and_names_are_chosen_in_the_library(text_run, board_run, tmp_path):
    model = BDH.from_pretrained(text_run / "best")
    default = choose_input(model, text_run / "best")  # no input: the probe text, every window of it
    assert default.windows and report_path(text_run, "plots", default) == text_run / "reports" / (
        f"plots-{output_stem(default)}"
    )
    assert report_path(text_run, "plots", None) == text_run / "reports" / "plots"
    assert choose_input(model, text_run / "best", tokens="1 2 3").tokens == [1, 2, 3]
    board = tmp_path / "b.txt"
    board.write_text(BOARD)
    boards = BDH.from_pretrained(board_run / "best")
    assert choose_input(boards, board_run / "best", board=str(board)).kind == "boardpath"
    with pytest.raises(UserError, match="--layer 9: the model has 3 layers"):
        check_indices(model, None, 9)


def test_a_python_caller_gets_what_bdh_plot_printed(text_run, tmp_path, capsys):
    model = BDH.from_pretrained(text_run / "best")
    inp = choose_input(model, text_run / "best", prompt=b"to be or not")
    figures = plot_run(text_run, tmp_path / "lib", model, inp, layer=1, head=0)
    assert figures.files and all(path.is_file() for path in figures.files)
    out = tmp_path / "cli"
    argv = ["plot", str(text_run), "--prompt", "to be or not", "--layer", "1", "--head", "0", "--out", str(out)]
    assert main(argv) == 0
    printed = capsys.readouterr().out  # the model loaded is named on stderr
    assert printed == figures.summary().replace(str(tmp_path / "lib"), str(out)) + "\n"


def test_plot_run_without_a_model_says_why_as_bdh_plot_does(text_run, tmp_path, capsys):
    run = tmp_path / "run"
    run.mkdir()
    shutil.copy(text_run / "metrics.jsonl", run / "metrics.jsonl")
    figures = plot_run(run, tmp_path / "lib")
    assert figures.skipped == [f"model figures (sparsity, heatmap, degrees): {run} holds no model yet"]
    assert main(["plot", str(run), "--out", str(tmp_path / "cli")]) == 0
    assert capsys.readouterr().out == figures.summary().replace(str(tmp_path / "lib"), str(tmp_path / "cli")) + "\n"
    with_model = plot_run(text_run, tmp_path / "no-model-given")  # a run that has one, not passed in
    assert with_model.skipped == ["model figures (sparsity, heatmap, degrees): no model was given"]
