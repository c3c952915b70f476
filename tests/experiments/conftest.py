"""Fixtures shared by the experiment tests."""

from __future__ import annotations

import subprocess

import pytest

from bdh.cli import main


@pytest.fixture
def bdh(capsys):
    """``bdh ARGS`` in this process (no PyTorch to start each time), as a finished process."""

    def run(*args: str) -> subprocess.CompletedProcess:
        try:
            code = main(list(args))
        except SystemExit as exc:  # argparse's own errors
            code = exc.code
        out, err = capsys.readouterr()
        return subprocess.CompletedProcess(args, code, out, err)

    return run
