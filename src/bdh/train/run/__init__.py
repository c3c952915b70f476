"""A run's folder: what a run writes into it (`folder.RunFolder`: the lock, config.yaml, `checkpoint`s, best/,
the `log` of its metrics) and what is read back from a finished one (`listing`: the runs under a directory,
`report`: what ``bdh train`` says at the end, `model`: a run's model loaded as it ran)."""
