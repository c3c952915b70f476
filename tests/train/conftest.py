"""Fixtures of the training-engine tests."""

from __future__ import annotations

from pathlib import Path

import pytest

from bdh.tasks.text import embedded_corpus


@pytest.fixture(scope="session")
def corpus_file(tmp_path_factory) -> Path:
    """The first 200 kB of the embedded corpus as a file."""
    path = tmp_path_factory.mktemp("corpus") / "plays.txt"
    path.write_bytes(embedded_corpus()[:200_000])
    return path
