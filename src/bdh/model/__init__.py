"""The BDH-GPU model: config, forward pass, attention forms, state, save/load, official interop (imported on
first use)."""

from .._lazy import exports

__all__ = [
    "BDH",
    "BDHCapture",
    "BDHConfig",
    "BDHState",
    "CheckpointError",
    "StateDecoder",
    "hard_read",
    "load_pretrained",
]

__getattr__, __dir__ = exports(
    __name__,
    {
        "BDH": ".bdh:BDH",
        "BDHCapture": ".capture:BDHCapture",
        "BDHConfig": ".config:BDHConfig",
        "BDHState": ".state:BDHState",
        "CheckpointError": ".io:CheckpointError",
        "StateDecoder": ".decoder:StateDecoder",
        "hard_read": ".bdh:hard_read",
        "load_pretrained": ".io:load_pretrained",
    },
    globals(),
)
