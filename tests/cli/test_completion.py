"""``bdh completion``: the generated script completes commands, sub-commands and flags in a real bash."""

from __future__ import annotations

import shutil
import subprocess

import pytest

from bdh.cli import build_parser, main
from bdh.cli.completion import script, tree


def test_the_tree_holds_every_command_and_its_flags():
    words = tree(build_parser())
    assert {"train", "eval", "dmft", "completion"} <= set(words[""])
    assert {"bifurcation", "trajectory"} <= set(words["dmft"])
    assert "--carry-state" in words["eval"] and "--resume" in words["train"]


@pytest.mark.skipif(shutil.which("bash") is None, reason="needs bash")
@pytest.mark.parametrize(
    "line, expected",
    [
        (["bdh", "tr"], ["train"]),
        (["bdh", "dmft", "tra"], ["trajectory"]),
        (["bdh", "train", "--res"], ["--resume"]),
        (["bdh", "--debug", "ev"], ["eval"]),  # flags before the command are skipped
        (["bdh", "eval", "runs/x", "--carry"], ["--carry-state"]),
        (["bdh", "generate", "ru"], []),  # a positional argument: left to file-name completion
    ],
)
def test_bash_completes(line, expected, capsys):
    assert main(["completion", "bash"]) == 0
    generated = capsys.readouterr().out
    words = " ".join(f"'{w}'" for w in line)
    program = f'{generated}\nCOMP_WORDS=({words}); COMP_CWORD={len(line) - 1}; _bdh; printf "%s\\n" "${{COMPREPLY[@]}}"'
    out = subprocess.run(["bash", "-c", program], capture_output=True, text=True, check=True).stdout
    assert out.split() == expected


def test_zsh_script_loads_bash_compatibility():
    text = script(build_parser(), "zsh")
    assert text.startswith("autoload -U +X bashcompinit && bashcompinit") and "complete -o default -F _bdh bdh" in text
