"""A run's folder: `folder.RunFolder`, its `checkpoint`s and `log`, and what is read back (`listing`,
`report`, `model`)."""
