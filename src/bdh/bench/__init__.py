"""Side-by-side benchmark suites of BDH and the baselines (``bdh bench recall|boardpath|sudoku``): `spec` (what a
suite is), `models` (sizing to BDH's parameter count), `runner` and `engine` (the sweep loop and its ledger),
`results` (rows, best learning rate, winners), `trivial` (the reference row); docs/bench.md."""
