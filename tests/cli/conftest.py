"""Fixtures shared by the command-line tests: the bad-input fixture tree, built once per test session."""

from __future__ import annotations

from pathlib import Path

import pytest

from .bad_input_fixtures import build_fixtures


@pytest.fixture(scope="session")
def pristine(tmp_path_factory) -> Path:
    """The fixture tree of `bad_input_fixtures`, built once; every case copies the parts it names."""
    return build_fixtures(tmp_path_factory.mktemp("bad-input") / "fx")
