"""Settings of the GPU tests: the CPU tests' helpers on the import path, and exact fp32 matmuls in every test.

Every test here is marked ``cuda`` and skipped without a GPU (tests/conftest.py).
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
import torch

TESTS = Path(__file__).resolve().parents[1]

# The helpers of the CPU equivalence tests (tests/model/helpers.py as ``model.helpers``, the trainer tests'
# ``_train_helpers``, the baselines' tiny configs), importable under the names pytest itself gives them when
# it collects those folders (it puts the same folders first on the path), also when tests/cuda runs alone.
for folder in (TESTS, TESTS / "train", TESTS / "baselines"):
    if str(folder) not in sys.path:
        sys.path.insert(0, str(folder))


@pytest.fixture(autouse=True)
def _exact_fp32_matmuls():
    """TF32 off for the length of a test, as it was before after it.

    With TF32 an fp32 matmul keeps 10 bits of mantissa: the fp32 comparisons below (1e-5 of the scale) would
    measure TF32, not our kernels. The trainer turns TF32 on (on Ampere and newer, `bdh.train.runtime.hardware`); the
    trainer tests here do not compare fp32 values across code paths.
    """
    saved = (
        torch.backends.cuda.matmul.allow_tf32,
        torch.backends.cudnn.allow_tf32,
        torch.get_float32_matmul_precision(),
    )
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    torch.set_float32_matmul_precision("highest")
    yield
    torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32 = saved[:2]
    torch.set_float32_matmul_precision(saved[2])
