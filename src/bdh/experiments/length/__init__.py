"""Memory past the training length: induction heads and recall through a gap, for BDH and the zoo.

`bdh experiment length` trains each model (BDH, GPT, Mamba, GLA, RWKV, Based by default) at T on the two tasks of
`bdh.tasks.induction` (Mamba's induction heads) and `bdh.tasks.recall_gap` (MQAR's facts asked after a gap), two
seeds, then reads the fixed test sets of T, 2T, 4T, ... (`bdh.tasks.lengths`) through each model's state, whole, or
through a window of T (`reading`), with the accuracy's Wilson interval, the memory and the tokens/s of every read;
text models given by ``text_models`` get the long-context experiment's recall probe (`text`). It writes report.md,
results.json and figures (`report`); ``--resume`` keeps finished trainings and reads.
"""

from .config import MODELS, TASKS, Config
from .experiment import MARKER, prepare_resume, run
from .plan import describe_plan

__all__ = ["MARKER", "MODELS", "TASKS", "Config", "describe_plan", "prepare_resume", "run"]
