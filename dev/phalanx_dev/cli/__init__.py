"""The development commands: `phalanx cluster` (the local control plane and its operator) and `phalanx demo`."""
