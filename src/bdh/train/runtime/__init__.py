"""Where and how a process trains: `device.Runtime`, `hardware`, `distributed` (torchrun), `sharded`
(FSDP2), `memory`."""
