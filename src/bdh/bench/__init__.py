"""Side-by-side benchmark suites of BDH and the baselines (``bdh bench recall|boardpath|sudoku``).

* `bdh.bench.spec` — what a suite is made of: its runs, its sweep, its columns and score;
* `bdh.bench.models` — the models a suite compares, sized to BDH's parameter count;
* `bdh.bench.runner` — one training run per sweep point and the suite loop (resume ledger, output folder);
* `bdh.bench.results` — result rows: a model's scores, best over learning rates, summary, CSV and markdown;
* `bdh.bench.trivial` — the trivial answer, scored as a reference row;
* `bdh.bench.recall` — MQAR: BDH, GPT, BaseConv;
* `bdh.bench.boardpath` — board pathfinding: BDH, GPT, Hyper-SET;
* `bdh.bench.sudoku` — Sudoku and the test-time depth sweep: BDH, GPT, Hyper-SET;
* `bdh.bench.boards` — the parameter-matched model sections of the two board suites.
"""
