"""bdh viz / bdh plot from the command line: files written, inputs checked, one-line errors, the
loopback server."""

from __future__ import annotations

import json
import os
import queue
import re
import socket
import subprocess
import sys
import threading
import urllib.error
import urllib.request
from pathlib import Path

import pytest

from bdh.cli import main
from bdh.viz import inputs
from bdh.viz.server import address, make_server

from .conftest import BOARD, SUDOKU


def run_cli(capsys, *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def page_data(path: Path) -> dict:
    page = path.read_text(encoding="utf-8")
    start = page.index('id="bdh-data">') + len('id="bdh-data">')
    return json.loads(page[start : page.index("</script>", start)])


# ---------------------------------------------------------------------- bdh viz


def test_viz_prompt_writes_the_page_into_reports(text_run, capsys):
    code, out, err = run_cli(capsys, "viz", str(text_run), "--prompt", "héllo, world", "--hubs", "12")
    assert code == 0, err
    (path,) = (text_run / "reports").glob("viz-hello-world-*.html")  # named after the prompt
    assert f"wrote {path}" in out
    data = page_data(path)
    assert data["tokens"] == list("héllo, world".encode()) and data["kind"] == "text"
    assert len(data["graph"]["nodes"]) == 12 and data["meta"]["layers"] == 3
    assert oct(path.stat().st_mode & 0o777) != oct(0o600)  # an ordinary file, not a private temp file


def test_viz_fact_adds_the_memory_panel(text_run, tmp_path, capsys):
    out = tmp_path / "fact.html"
    code, _, err = run_cli(capsys, "viz", str(text_run), "--prompt", "a cat; a cat", "--fact", "2", "--out", str(out))
    assert code == 0, err
    fact = page_data(out)["fact"]
    assert (fact["write"], fact["read"]) == (2, 11) and len(fact["heads"]) == 3 * 2 and fact["neurons"]
    assert page_data(out)["tokens"] == list(b"a cat; a cat")


def test_viz_and_plot_print_what_they_wrote_on_stdout_and_the_model_on_stderr(text_run, tmp_path, capsys):
    """As for bdh generate: stdout holds what a script reads (the file or folder written), stderr the model
    folder the command loaded."""
    for command, out_path in (("viz", tmp_path / "v.html"), ("plot", tmp_path / "plots")):
        code, out, err = run_cli(capsys, command, str(text_run), "--prompt", "to be", "--out", str(out_path))
        assert code == 0, err
        assert out.splitlines()[0].startswith(f"wrote {out_path}"), out
        assert "model: " not in out and f"model: {text_run / 'best'}" in err, (out, err)


def test_viz_board_file_and_default_board(board_run, tmp_path, capsys):
    f = tmp_path / "board.txt"
    f.write_text("// an 8 x 8 board\n" + BOARD.replace("", " ").strip() + "\n", encoding="utf-8")
    out_file = tmp_path / "b.html"
    code, out, err = run_cli(capsys, "viz", str(board_run), "--board", str(f), "--out", str(out_file))
    assert code == 0, err
    data = page_data(out_file)
    assert data["kind"] == "boardpath" and data["board_size"] == 8
    assert data["tokens"][0] == 2 and data["tokens"][3] == 1 and data["tokens"][63] == 3
    assert len(data["lens"]) == 3 and len(data["lens"][0]) == 64
    # no input: a board from the task's own generator at the run's size
    code, out, err = run_cli(capsys, "viz", str(board_run / "best"), "--out", str(tmp_path / "c.html"))
    assert code == 0, err
    data = page_data(tmp_path / "c.html")
    assert data["board_size"] == 8 and data["tokens"].count(2) == 1 and data["tokens"].count(3) == 1


def test_viz_sudoku(sudoku_run, tmp_path, capsys):
    code, out, err = run_cli(capsys, "viz", str(sudoku_run), "--sudoku", SUDOKU, "--out", str(tmp_path / "s.html"))
    assert code == 0, err
    data = page_data(tmp_path / "s.html")
    assert data["kind"] == "sudoku" and data["tokens"][:3] == [5, 3, 0] and len(data["tokens"]) == 81


@pytest.mark.parametrize(
    "which, extra, message",
    [
        ("missing", ["--prompt", "hi"], "no such run or model folder"),
        ("board", ["--prompt", "hi"], "not a byte-level model"),
        ("text", ["--tokens", "1 2 300"], "outside the model's vocabulary"),
        ("board", ["--board", "SMALL"], "3 x 3 but the model was trained on 8 x 8"),
        ("board", ["--board", "NOFILE"], "no such board file"),
        ("text", ["--board", "SMALL"], "needs a board pathfinding model"),
        ("sudoku", ["--sudoku", "123"], "81 cells, got 3"),
        ("text", ["--hubs", "0"], "--hubs: must be an integer in [1, 4096]"),
        ("text", ["--prompt", ""], "prompt is empty"),
        ("text", ["--prompt", "hi", "--fact", "1"], "the fact's position must lie before the input's last token (1)"),
        ("board", ["--board", "SMALL", "--fact", "1"], "--fact traces a fact in text or token ids"),
        ("text", ["--prompt", "hi", "--fact", "-1"], "--fact: must be an integer"),
    ],
)
def test_viz_bad_input_is_one_line_exit_2(which, extra, message, text_run, board_run, sudoku_run, tmp_path, capsys):
    small = tmp_path / "small.txt"
    small.write_text("S..\n.E.\n...\n", encoding="utf-8")
    runs = {"text": text_run, "board": board_run, "sudoku": sudoku_run, "missing": tmp_path / "nope"}
    extra = [str(small) if e == "SMALL" else str(tmp_path / "none.txt") if e == "NOFILE" else e for e in extra]
    code, out, err = run_cli(capsys, "viz", str(runs[which]), *extra, "--out", str(tmp_path / "x.html"))
    assert code == 2
    assert err.count("\n") == 1 and err.startswith("bdh: error: ") and message in err, err
    assert not (tmp_path / "x.html").exists()


def test_parse_board_errors():
    tokens, size = inputs.parse_board(BOARD)
    assert size == 8 and len(tokens) == 64
    with pytest.raises(ValueError, match="row 2 has 2 cells"):
        inputs.parse_board("S.E\n..\n...\n")
    with pytest.raises(ValueError, match="exactly one start"):
        inputs.parse_board("S.S\n...\n..E\n")
    with pytest.raises(ValueError, match="exactly one end"):
        inputs.parse_board("S..\n...\n...\n")
    with pytest.raises(ValueError, match="unknown cell 'x'"):
        inputs.parse_board("S.x\n...\n..E\n")
    with pytest.raises(ValueError, match="no rows"):
        inputs.parse_board("\n// nothing\n")
    assert inputs.parse_sudoku(SUDOKU.replace("0", "."))[:4] == [5, 3, 0, 0]
    with pytest.raises(ValueError, match="unknown cell 'x'"):
        inputs.parse_sudoku("x" * 81)


# ---------------------------------------------------------------------- the server


def test_server_serves_only_the_page_on_loopback():
    server = make_server(b"<html>page</html>", 0)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        url = address(server)
        assert url.startswith("http://127.0.0.1:")
        assert server.server_address[0] == "127.0.0.1"
        with urllib.request.urlopen(url, timeout=10) as r:
            assert r.status == 200 and r.read() == b"<html>page</html>"
        with pytest.raises(urllib.error.HTTPError) as e:
            urllib.request.urlopen(url + "etc/passwd", timeout=10)
        assert e.value.code == 404
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=10)


def test_port_in_use_is_one_line_exit_2(text_run, tmp_path, capsys):
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen(1)
        port = s.getsockname()[1]
        code, out, err = run_cli(
            capsys,
            "viz",
            str(text_run),
            "--prompt",
            "hi",
            "--serve",
            "--port",
            str(port),
            "--out",
            str(tmp_path / "p.html"),
        )
    assert code == 2 and f"port {port} on 127.0.0.1 is in use" in err and err.count("\n") == 1
    code, out, err = run_cli(capsys, "viz", str(text_run), "--serve", "--port", "70000")
    assert code == 2 and "[0, 65535]" in err


def test_viz_serve_subprocess(text_run, tmp_path):
    """`bdh viz --serve` prints its address, serves the page over loopback, and stops when terminated."""
    out_file = tmp_path / "served.html"
    env = dict(os.environ, PYTHONUNBUFFERED="1")
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "bdh",
            "viz",
            str(text_run),
            "--prompt",
            "served page",
            "--serve",
            "--out",
            str(out_file),
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
    )
    lines: queue.Queue[str] = queue.Queue()
    reader = threading.Thread(target=lambda: [lines.put(x) for x in iter(proc.stdout.readline, "")], daemon=True)
    reader.start()
    try:
        url = None
        for _ in range(20):  # "wrote ..." then "serving ..."
            try:
                line = lines.get(timeout=90)
            except queue.Empty:
                break
            m = re.search(r"serving (http://127\.0\.0\.1:\d+/)", line)
            if m:
                url = m.group(1)
                break
        assert url, proc.stderr.read() if proc.poll() is not None else "no address printed within the time limit"
        with urllib.request.urlopen(url, timeout=15) as r:
            body = r.read()
        assert body == out_file.read_bytes()
        assert b'id="bdh-data"' in body
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=15)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=15)
        proc.stdout.close()
        proc.stderr.close()


def test_viz_and_plot_with_another_prompt_write_beside_the_first(tmp_path, capsys):
    import bdh

    from .conftest import make_run

    run = make_run(tmp_path / "run", bdh.BDHConfig(n_layer=2, n_embd=16, n_head=2, n_neurons=64), {"name": "text"})
    for command in ("viz", "plot"):
        for prompt in ("To be, or not", "ROMEO: what"):
            code, out, err = run_cli(capsys, command, str(run), "--prompt", prompt)
            assert code == 0, err
        code, out, err = run_cli(capsys, command, str(run), "--prompt", "ROMEO: what")  # the same one again
        assert code == 2 and "--overwrite" in err
    names = sorted(p.name for p in (run / "reports").iterdir())
    assert len(names) == 4 and sum(n.startswith("viz-to-be-or-not-") for n in names) == 1, names
    assert sum(n.startswith("plots-romeo-what-") for n in names) == 1, names


def test_a_python_caller_of_write_view_gets_what_bdh_viz_printed(text_run, tmp_path, capsys):
    from bdh.cli.checks import checked_model_dir, load_model
    from bdh.viz.export import ViewOptions, write_view
    from bdh.viz.inputs import choose_input

    cli_out = tmp_path / "cli.html"
    code, out, err = run_cli(capsys, "viz", str(text_run), "--prompt", "to be", "--hubs", "9", "--out", str(cli_out))
    assert code == 0, err
    folder = checked_model_dir(text_run)
    model = load_model(folder, announce=False)
    inp = choose_input(model, folder, b"to be", None, None, None, 0)
    written = write_view(
        model,
        inp,
        tmp_path / "lib.html",
        options=ViewOptions(hubs=9),
        title=f"BDH viewer: {text_run.name}",
        origin=str(folder),
    )
    printed = out.splitlines()[-1]
    shape = r"wrote (.+) \((\d+\.\d\d) MB, (\d+) tokens, \d+\.\d s\)"
    (cli_path, cli_mb, cli_tokens), (lib_path, lib_mb, lib_tokens) = (
        re.fullmatch(shape, line).groups() for line in (printed, written.summary())
    )
    assert (cli_path, lib_path) == (str(cli_out), str(tmp_path / "lib.html"))
    assert (cli_tokens, lib_tokens) == ("5", "5") and written.tokens == 5
    lib_file = tmp_path / "lib.html"
    assert written.size == lib_file.stat().st_size and written.page == lib_file.read_text(encoding="utf-8")
    cli_data, lib_data = page_data(cli_out), page_data(lib_file)
    for data in (cli_data, lib_data):  # the time the export took is the one field two runs may not share
        data["meta"].pop("export_seconds")
    # the same code on the same model, input and thread count in one process: the same quantised document; the
    # pages' sizes differ only by the digits of export_seconds, a few bytes, so at most one unit of the printed MB
    assert lib_data == cli_data and abs(float(lib_mb) - float(cli_mb)) <= 0.01 + 1e-9
