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
    ``eval`` extra that installs it (and runs its test): every extra of pyproject.toml that adds a feature is
    named in the Install section (``test`` and ``lint`` are for contributors, ``gpu`` comes with ``test``)."""
    import tomllib

    extras = tomllib.loads((README.parent / "pyproject.toml").read_text())["project"]["optional-dependencies"]
    section = _section("Install")
    missing = [name for name in sorted(set(extras) - {"test", "lint", "gpu"}) if f"`{name}`" not in section]
    assert not missing, f"extras not named in the README's Install section: {missing}"


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
