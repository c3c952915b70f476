"""``bdh eval`` as a library: what an evaluation of a trained run reads (`data`), how it is read, in windows or
in long streams by position (`plan`), and the call that loads, scores and reports (`run`). The scoring loop is the
trainer's own (`bdh.train.evaluate`), so a run's number and ``bdh eval``'s agree."""
