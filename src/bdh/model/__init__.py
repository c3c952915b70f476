"""The BDH-GPU model: config, forward pass, attention forms, state, save/load, official interop."""

from .bdh import BDH, BDHCapture
from .config import BDHConfig
from .io import CheckpointError, load_pretrained
from .state import BDHState

__all__ = ["BDH", "BDHCapture", "BDHConfig", "BDHState", "CheckpointError", "load_pretrained"]
