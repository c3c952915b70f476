"""Results do not depend on the number of threads (BLAS/OpenMP/torch): 1 vs 2 threads in subprocesses."""

import os
import subprocess
import sys
from pathlib import Path

import numpy as np


def _run(tmp_path: Path, threads: int) -> dict:
    env = dict(os.environ)
    for var in ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS", "NUMEXPR_NUM_THREADS"):
        env[var] = str(threads)
    out = tmp_path / f"t{threads}.npz"
    worker = Path(__file__).with_name("_thread_worker.py")
    subprocess.run([sys.executable, str(worker), str(out), str(threads)], check=True, env=env, timeout=300)
    with np.load(out) as z:
        return {k: z[k] for k in z.files}


def test_results_independent_of_thread_count(tmp_path):
    one, two = _run(tmp_path, 1), _run(tmp_path, 2)
    assert one.keys() == two.keys()
    for k in one:
        np.testing.assert_allclose(one[k], two[k], rtol=0, atol=1e-12, err_msg=k)
