"""Side-by-side benchmark suites of BDH and the baselines (``bdh bench recall|boardpath|sudoku``); docs/bench.md."""
