"""Reproductions of the paper's section 4.2, 6.3 and 7 experiments at laptop scale (docs/experiments.md).

Each is a module with a typed ``Config`` (a CPU default and a ``quick`` preset) and ``run(config, out)``, which
writes ``report.md``, ``results.json`` and figures; ``bdh experiment NAME`` runs it and shows its module docstring's
first paragraph as help. Shared parts: `scaffold`, `common` (CONTRIBUTING.md, "Adding an experiment")."""
