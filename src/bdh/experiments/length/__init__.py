"""Memory past the training length: induction heads and recall through a gap, for BDH and the zoo. Its capacity map
(facts; the recipe of docs/long-context.md): about 1 h of training a count, reads 25 min to 4k and 45 min at 2^20
(one thread).

Each model is trained at T on `bdh.tasks.induction` and `bdh.tasks.recall_gap`, then read on fixed test sets of
T, 2T, 4T, ... through its state, whole, or through a window of T (`reading`); docs/experiments.md has the protocol."""

from .config import MODELS, TASKS, Config
from .experiment import MARKER, prepare_resume, run
from .plan import describe_plan
from .preflight import check_before_training

__all__ = ["MARKER", "MODELS", "TASKS", "Config", "check_before_training", "describe_plan", "prepare_resume", "run"]
