"""Where and how a process trains: its device and the operations that depend on it (`device.Runtime`), what the
hardware can do (`hardware`), the processes of a ``torchrun`` run (`distributed`), fully sharded training
(`sharded`) and the memory check before the first step (`memory`)."""
