"""The command lines (kt-train, kt-evaluate, kt-average-checkpoints, kt-export, ...): thin
layers over the library."""
