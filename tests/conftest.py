"""Shared test settings: deterministic, small, CPU; tests marked ``cuda`` run only where a GPU is."""

import pytest
import torch

NO_GPU = "needs a CUDA GPU: torch.cuda.is_available() is False on this machine"


def pytest_collection_modifyitems(config, items):
    """Skip every ``@pytest.mark.cuda`` test (tests/cuda) when there is no GPU, before any of them runs."""
    if torch.cuda.is_available():
        return
    skip = pytest.mark.skip(reason=NO_GPU)
    for item in items:
        if item.get_closest_marker("cuda") is not None:
            item.add_marker(skip)


@pytest.fixture(autouse=True)
def _seed():
    torch.manual_seed(0)
    yield
