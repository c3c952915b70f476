"""bdh: the Dragon Hatchling (BDH) architecture, trained, compared and looked inside.

    >>> import torch, bdh
    >>> model = bdh.BDH(bdh.BDHConfig(n_layer=2, n_embd=32, n_head=2, n_neurons=256))
    >>> model(torch.zeros(1, 8, dtype=torch.long)).shape
    torch.Size([1, 8, 256])
"""

__version__ = "0.1.0"

from .model import BDH, BDHCapture, BDHConfig, BDHState, CheckpointError, graph, interop, load_pretrained  # noqa: E402

load = load_pretrained

__all__ = ["BDH", "BDHCapture", "BDHConfig", "BDHState", "CheckpointError", "graph", "interop", "load", "load_pretrained", "__version__"]
