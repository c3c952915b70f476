"""The README's first commands: the install lines a new user copies, and its Hugging Face example, run."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import torch

README = Path(__file__).resolve().parents[1] / "README.md"


def _section(title: str) -> str:
    """The text of the README section ``## title`` (up to the next ``## ``)."""
    text = README.read_text(encoding="utf-8")
    start = text.index(f"\n## {title}\n")
    end = text.find("\n## ", start + 1)
    return text[start : end if end > 0 else None]


def _blocks(section: str, language: str) -> list[str]:
    return re.findall(rf"```{language}\n(.*?)```", section, flags=re.S)


def test_install_gives_pytorch_s_own_commands_for_cpu_and_cuda():
    """As PyTorch's install page gives them: the CPU wheel index for machines without a GPU (the default build
    on Linux brings several GB of CUDA libraries), the plain command for CUDA; python3 -m venv."""
    (block,) = _blocks(_section("Install"), "bash")
    commands = [line.split("#")[0].strip() for line in block.splitlines()]
    assert any("python3 -m venv .venv" in c for c in commands)
    assert "pip install torch --index-url https://download.pytorch.org/whl/cpu" in commands
    assert "pip install torch" in commands
    assert not any("torch>=" in c for c in commands)  # a version range picks the newest, CUDA, build
    first = {
        p: next(i for i, c in enumerate(commands) if c.startswith(p)) for p in ("pip install torch", "pip install -e")
    }
    assert first["pip install torch"] < first["pip install -e"]  # PyTorch first, alone


def test_install_names_the_extras_a_user_needs_for_the_documented_features():
    """A new user followed the install lines, then read that lm-evaluation-harness works, but no line named the
    ``eval`` extra that installs it (and runs its test): every extra of pyproject.toml is named in the Install
    section, which says what each brings."""
    import tomllib

    extras = tomllib.loads((README.parent / "pyproject.toml").read_text())["project"]["optional-dependencies"]
    section = _section("Install")
    missing = [name for name in sorted(extras) if f"`{name}`" not in section]
    assert not missing, f"extras not named in the README's Install section: {missing}"


def test_the_install_line_brings_no_gpu_package():
    """The README's ``pip install -e ".[test,hf]"`` on a CPU machine pulled Triton (about 1 GB) through the
    ``test`` extra: no extra the Install block names may bring Triton or a CUDA package, but ``gpu``."""
    import tomllib

    extras = tomllib.loads((README.parent / "pyproject.toml").read_text())["project"]["optional-dependencies"]
    block = _blocks(_section("Install"), "bash")[0]
    named = set(re.findall(r'pip install -e "\.\[([^\]]+)\]"', block)[0].split(","))

    def brings(extra: str, seen: frozenset = frozenset()) -> set[str]:
        found = set()
        for req in extras[extra]:
            inner = re.match(r"bdh\[([^\]]+)\]", req)
            if inner:
                found |= set().union(*(brings(e, seen | {extra}) for e in inner.group(1).split(",") if e not in seen))
            else:
                found.add(re.split(r"[<>=;\[ ]", req, maxsplit=1)[0].lower())
        return found

    gpu = {p for e in named for p in brings(e) if p == "triton" or p.startswith(("nvidia-", "cuda"))}
    assert not gpu, f"the README's install line brings GPU packages: {sorted(gpu)}"
    assert "triton" in brings("gpu")  # where it is: CI installs it
    assert '"gpu"' not in "".join(extras["test"])


def test_the_hugging_face_example_runs_on_a_model_folder(tmp_path, monkeypatch, capsys):
    pytest.importorskip("transformers")
    import bdh

    section = _section("Hugging Face")
    (code,) = _blocks(section, "python")
    assert "import bdh.hf" in code and "AutoModelForCausalLM.from_pretrained(folder)" in code
    folder = tmp_path / "run" / "best"
    torch.manual_seed(0)
    bdh.BDH(bdh.BDHConfig(n_layer=2, n_embd=16, n_head=2, n_neurons=64)).save_pretrained(folder)
    assigned = re.search(r'^folder = "([^"]+)"', code, flags=re.M)
    assert assigned, "the example names its model folder in a line folder = '...'"
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    exec(compile(code.replace(assigned.group(1), str(folder)), "README.md", "exec"), {})
    assert capsys.readouterr().out.startswith("ROMEO:")


def test_the_python_example_runs_writes_nothing_where_it_runs_and_shows_a_generated_line(tmp_path, monkeypatch, capsys):
    """The README's Python block saved ``my-model/`` into the clone and printed only a parameter count: run from
    an empty folder it leaves that folder empty (it saves to a temporary one) and prints the count and a line
    that the model generated after the prompt."""
    (code,) = _blocks(_section("Python"), "python")
    monkeypatch.chdir(tmp_path)
    exec(compile(code, "README.md", "exec"), {})
    assert list(tmp_path.iterdir()) == []
    count, generated, *_ = capsys.readouterr().out.splitlines()
    assert count == "1638400" and generated.startswith("To be, or not to be") and len(generated) > 19


def test_the_readme_names_every_baseline_and_the_help_every_experiment(capsys):
    """The README listed 3 baselines of 8 and ``bdh --help`` 4 experiments of 6: every registered model is named
    in the README's overview, and the command's help lists every registered experiment."""
    from bdh import registry
    from bdh.cli import main

    head = README.read_text(encoding="utf-8").split("## Install")[0].replace("-", "").lower()
    missing = [name for name in registry.names("model") if name.replace("-", "") not in head]
    assert not missing, f"baselines not named in the README's overview: {missing}"
    with pytest.raises(SystemExit):
        main(["--help"])
    help_text = " ".join(capsys.readouterr().out.split())
    assert all(name in help_text for name in registry.names("experiment")), help_text
    with pytest.raises(SystemExit):
        main(["experiment", "--help"])
    assert "under 30 minutes" not in " ".join(capsys.readouterr().out.split())  # long-context takes hours


def _slug(heading: str) -> str:
    """The anchor GitHub gives a markdown heading."""
    return re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")


def test_what_we_measured_links_sections_that_exist_and_the_docs_index_every_page():
    """The README's answer to "what does BDH do better or worse than a Transformer" points to the docs' tables:
    every link names a page and a heading that exist; docs/index.md links every page of docs/."""
    links = re.findall(r"\]\((docs/[^)#]+)(?:#([^)]+))?\)", _section("What we measured: BDH against a Transformer"))
    assert len(links) >= 6
    for page, anchor in links:
        path = README.parent / page
        assert path.is_file(), page
        if anchor:
            headings = re.findall(r"^#+ (.+)$", path.read_text(encoding="utf-8"), flags=re.M)
            assert anchor in {_slug(h) for h in headings}, f"{page}#{anchor}: no such heading"
    index = (README.parent / "docs" / "index.md").read_text(encoding="utf-8")
    pages = sorted(p.name for p in (README.parent / "docs").glob("*.md") if p.name != "index.md")
    assert [p for p in pages if f"]({p})" not in index] == []


def test_the_bdh_against_a_transformer_table_states_only_what_its_pages_state():
    """The table of "What we measured" (one row per question): every number of a row's question, BDH, Transformer and
    verdict cells, and every count of runs ("on six runs"), is written on a page the row links, so that the table
    cannot drift from the measurements (as the README's "six runs" once stood against a page's "four runs")."""
    section = _section("What we measured: BDH against a Transformer")
    rows = [line for line in section.splitlines() if line.startswith("| ") and not line.startswith("| question")]
    assert len(rows) >= 9
    number = re.compile(r"\d[\d,]*(?:\.\d+)?")
    for row in rows:
        cells = [c.strip() for c in row.strip("|").split(" | ")]
        assert len(cells) == 6, row
        pages = re.findall(r"\]\((docs/[^)#]+)", cells[5])
        assert pages, row
        text = " ".join((README.parent / p).read_text(encoding="utf-8") for p in pages)
        claims = " ".join(cells[:4])
        for n in number.findall(claims):
            found = re.search(rf"(?<![\d.,]){re.escape(n)}(?![\d,]|\.\d)", text)
            assert found, f"README's table: {n} ({cells[0]}) is on none of {pages}"
        for runs in re.findall(r"\bon (\w+) runs\b", claims):
            assert f"on {runs} runs" in text, f"README's table: 'on {runs} runs' is on none of {pages}"


def test_ci_runs_the_readme_s_install_and_test_command_first():
    """The README's test command failed on the README's install while CI, which installed every extra, passed:
    .ci/run now runs the README's `pip install -e` line and its test command, verbatim, before any other extra."""
    ci = [line.split("  #")[0].strip() for line in (README.parent / ".ci" / "run").read_text().splitlines()]
    ci = [line for line in ci if line and not line.startswith("#")]
    (install,) = [c.split("#")[0].strip() for c in _blocks(_section("Install"), "bash")[0].splitlines() if "-e" in c]
    (test,) = [c for c in _blocks(_section("Tests"), "bash")[0].splitlines() if c.strip()]
    installs = [i for i, line in enumerate(ci) if "install" in line and "-e " in line]
    assert ci[installs[0]].startswith(install + " ")  # the README's line, its output sent to a log
    runs = [i for i, line in enumerate(ci) if "pytest" in line]
    assert ci[runs[0]] == test.strip() and installs[0] < runs[0] < installs[1]
