"""Reproductions of the paper's section 4.2, section 6.3 and section 7 experiments at laptop scale.

Each experiment is a module with a typed config (a CPU default and a ``quick`` size for smoke tests) and
a ``run(config, out)`` that trains what it needs, measures, and writes ``report.md``, ``results.json``
and figures into ``out``. The command line is ``bdh experiment NAME``; the names are the registry's
(`bdh.registry.BUILTIN_EXPERIMENTS`), the help of each its module docstring's first paragraph. What they share:
`scaffold` (the marked output folder, ``--resume``, the runs ledger), `common` (corpora, training, `Report`);
"better beyond the seeds" is `bdh.seeds.beyond_seeds` (CONTRIBUTING.md, "Adding an experiment").

* `bdh.experiments.synapses` — monosemantic synapses (section 6.3, Figs. 12-13);
* `bdh.experiments.merge` — model merging by concatenation (section 7.1, Table 2);
* `bdh.experiments.nobptt` — training without backprop through time (section 7.2);
* `bdh.experiments.scaling` — BDH-GPU against a GPT-2-style Transformer at equal parameters, across sizes
  (section 4.2, Fig. 7);
* `bdh.experiments.longcontext` — BDH past its training window: recipes that keep the recurrent state reading;
* `bdh.experiments.relatives` — BDH among its relatives: Zoology's MQAR frontier, a byte-level language model,
  and BDH taken apart, judged against the seed spread.
"""
