"""Side-by-side benchmark suites of BDH and the baselines (``bdh bench recall|boardpath|sudoku``).

* `bdh.bench.runner` — one training run per sweep point, result rows, best over learning rates, output files;
* `bdh.bench.recall` — MQAR: BDH, GPT, BaseConv;
* `bdh.bench.boardpath` — board pathfinding: BDH, GPT, Hyper-SET;
* `bdh.bench.sudoku` — Sudoku and the test-time depth sweep: BDH, GPT, Hyper-SET;
* `bdh.bench.boards` — the parameter-matched model sections of the two board suites.
"""
