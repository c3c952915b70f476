"""Run in a subprocess by test_threads.py: compute a few arrays and save them to the path in argv[1]."""

import sys

import numpy as np
import torch

import bdh
from bdh.dmft.experiments import run_sweep
from bdh.dmft.network import FiniteNetwork
from bdh.dmft.probe import ProbeConfig, run_probe
from bdh.dmft.weights import paper_weights

if __name__ == "__main__":
    threads = int(sys.argv[2])
    torch.set_num_threads(threads)
    # betas below the first chaos (1.2654; lambda_1 < -0.018 for all of them): a rounding difference
    # between thread counts would not be amplified, so test_threads can compare with a tolerance
    # (in a chaotic sweep any last-ulp change grows to O(1) within a few hundred steps)
    sweep = run_sweep(np.linspace(0.6, 1.2, 12), n_steps=1000, n_keep=300, n_lyap=300, init="continue")
    net = FiniteNetwork(paper_weights(), 3_000, sampler="bits", seed=1).simulate(np.full(3, 1.28), 200, 100)
    torch.manual_seed(0)
    model = bdh.BDH(bdh.BDHConfig(n_layer=2, n_embd=32, n_head=2, n_neurons=256))
    _, probe = run_probe(model, ProbeConfig(temperatures=(0.7, 1.2), n_transient=10, n_steps=40, threads=threads))
    np.savez(
        sys.argv[1],
        mo=sweep.mo_se,
        lyap=sweep.lyap,
        net=net.mo_se,
        readout=probe["readout"],
        growth=probe["log_growth"],
    )
