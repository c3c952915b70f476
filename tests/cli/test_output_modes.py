"""Every command's outputs get the modes the user's umask gives (some were written 0600 before)."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest
import torch

import bdh
from bdh.cli import main


@pytest.fixture
def umask_022():
    old = os.umask(0o022)
    yield
    os.umask(old)


def _modes(root: Path) -> dict[str, int]:
    return {str(p.relative_to(root)): stat.S_IMODE(p.stat().st_mode) for p in [root, *root.rglob("*")]}


def test_outputs_follow_the_umask(tmp_path, monkeypatch, umask_022, capsys):
    monkeypatch.chdir(tmp_path)
    torch.manual_seed(0)
    bdh.BDH(bdh.BDHConfig(n_layer=1, n_embd=16, n_head=2, n_neurons=64)).save_pretrained("a")
    commands = {
        "merged": ["merge", "a", "a", "merged"],
        "corpus.txt": ["corpus", "corpus.txt", "--size", "2KB"],
        "viz.html": ["viz", "a", "--prompt", "hello", "--out", "viz.html"],
        "dmft": [
            "dmft",
            "convergence",
            "--n",
            "30,60",
            "--seeds",
            "2",
            "--steps",
            "40",
            "--keep",
            "20",
            "--out",
            "dmft",
        ],
    }
    for target, argv in commands.items():
        assert main(argv) == 0, capsys.readouterr().err
        for name, mode in _modes(Path(target)).items():
            expected = 0o755 if (Path(target) / name).is_dir() else 0o644
            assert mode == expected, f"{target}/{name}: mode {mode:o}, expected {expected:o} under umask 022"
