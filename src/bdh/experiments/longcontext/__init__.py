"""BDH past its training window: why the recurrent state breaks, and recipes that keep it reading.

`bdh experiment long-context` trains the main job's model with each recipe (`config.RECIPES`) and two
seeds, measures each on long held-out streams (`bdh.analysis.loss_by_position`), probes recall through the state and
long generation (`probes`), and writes report.md, results.json and figures (`report`).
"""

from .config import RECIPES, Config
from .experiment import MARKER, prepare_resume, run

__all__ = ["MARKER", "RECIPES", "Config", "prepare_resume", "run"]
