"""Training support: distribution strategy, run directories, checkpoints and callbacks."""
