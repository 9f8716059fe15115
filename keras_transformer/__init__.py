"""keras-transformer: the Transformer of "Attention Is All You Need" for Keras 3 / TensorFlow."""
import os

# Keras 3 must run on TensorFlow here: tf.data, tf-text and SavedModel export depend on it.
# Only a default: an explicit KERAS_BACKEND set by the user still wins (and then fails loudly).
os.environ.setdefault("KERAS_BACKEND", "tensorflow")

from keras_transformer.config import (BOS_ID, EOS_ID, PAD_ID, PRESETS, Recipe,  # noqa: E402
                                      SearchSettings, TrainingSettings, TransformerConfig, UNK_ID)
from keras_transformer.losses import LabelSmoothedCrossEntropy  # noqa: E402
from keras_transformer.metrics import MaskedTokenAccuracy, Perplexity  # noqa: E402
from keras_transformer.model import Transformer  # noqa: E402
from keras_transformer.optimization import (  # noqa: E402
    LossScaleOptimizer, TransformerSchedule, make_optimizer)
from keras_transformer.training.loaded_run import LoadedRun, load_run  # noqa: E402

__all__ = ["BOS_ID", "EOS_ID", "LabelSmoothedCrossEntropy", "LoadedRun", "LossScaleOptimizer",
           "MaskedTokenAccuracy", "PAD_ID", "PRESETS", "Perplexity", "Recipe", "SearchSettings",
           "TrainingSettings", "Transformer", "TransformerConfig", "TransformerSchedule", "UNK_ID",
           "load_run", "make_optimizer"]
