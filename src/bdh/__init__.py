"""bdh: the Dragon Hatchling (BDH) architecture, trained, compared and looked inside.

    >>> import torch, bdh
    >>> model = bdh.BDH(bdh.BDHConfig(n_layer=2, n_embd=32, n_head=2, n_neurons=256))
    >>> model(torch.zeros(1, 8, dtype=torch.long)).shape
    torch.Size([1, 8, 256])

The names below are imported on first use, so ``import bdh`` is instant."""

from ._lazy import exports

__version__ = "0.1.0"

__all__ = [
    "BDH",
    "BDHCapture",
    "BDHConfig",
    "BDHState",
    "CheckpointError",
    "graph",
    "interop",
    "load",
    "load_pretrained",
    "__version__",
]

__getattr__, __dir__ = exports(
    __name__,
    {
        "BDH": ".model.bdh:BDH",
        "BDHCapture": ".model.bdh:BDHCapture",
        "BDHConfig": ".model.config:BDHConfig",
        "BDHState": ".model.state:BDHState",
        "CheckpointError": ".model.io:CheckpointError",
        "load_pretrained": ".model.io:load_pretrained",
        "load": ".model.io:load_pretrained",
        "graph": ".model.graph",
        "interop": ".model.interop",
    },
    globals(),
)
