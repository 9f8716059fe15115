"""The command lines (kt-train, kt-evaluate, kt-average-checkpoints, kt-export, ...): thin
layers over the library. Importing this package imports TensorFlow quietly
(`trainers.quiet_start`)."""
from trainers.quiet_start import import_tensorflow_quietly

import_tensorflow_quietly()
