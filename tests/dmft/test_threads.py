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
    # Not bit-equality: BLAS/torch may split float64 sums between threads in another order (last-ulp
    # changes, ~1e-16 relative). None of these runs amplifies them much: the sweep is non-chaotic, the
    # finite network's tokens are discrete bits, the probe is 50 tokens long (a float32-ulp change of the
    # weights moved its readout by 4e-7 relative). 1e-9 relative (1e-12 absolute for entries near 0,
    # values are 1e-3 to 1) leaves a margin of 1e5, while a real thread dependence (a race, a lost
    # partial sum) changes the results by their own size.
    for k in one:
        np.testing.assert_allclose(one[k], two[k], rtol=1e-9, atol=1e-12, err_msg=k)
