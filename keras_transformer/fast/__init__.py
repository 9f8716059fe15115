"""The opt-in speed subpackage: fast twins of the core's hooks and packed-token training
steps (the private Keras/TensorFlow APIs they use are in `keras_transformer.compat`).

It depends on the core and never the reverse. Use it with

    from keras_transformer import fast
    fast.set_implementation("fast")  # or fast.implementation_scope("fast"); KT_KERNELS=fast
    model = fast.FastTransformer(config)  # the Transformer with packed-token fit steps

| trick | module | the core's reference |
| --- | --- | --- |
| float32 gradients in oneDNN's faster layouts | `twins.linear` | `layers.dense.linear` |
| closed-form layer-norm backward | `twins.layer_norm` | `layers.residual.layer_norm` |
| 16-bit dropout masks | `twins.dropout` | `layers.residual.dropout` |
| packed real tokens in training steps | `packed`, `model.FastTransformer` | `Transformer.call` |
| loss through the logits' factors | `loss` | `losses.smoothed_cross_entropy` |
| one softmax a step for the loss and metrics | `loss.log_normalizer` | `metrics.log_normalizer` |
| one argmax a step for the loss and metrics | `loss.predicted_ids` | `metrics.predicted_ids` |
| fused Adam update | `optimizers.FusedAdam` | `optimization.adam` |

Each is tested against its reference in value and gradient (tests/unit/fast/test_twins.py,
tests/unit/test_model.py, tests/unit/test_losses.py), and the suite passes with either set.
Decoding has no twin here: its cached step (`Transformer.decode_step`) is the core's, and a search
runs the references whichever set is in force (`hooks.references`).
"""
from keras_transformer.fast.model import FastTransformer
from keras_transformer.fast.selection import (FAST, IMPLEMENTATION_CHOICES, IMPLEMENTATIONS,
                                              REFERENCE, active, implementation_scope,
                                              set_implementation)

__all__ = ["FAST", "FastTransformer", "IMPLEMENTATION_CHOICES", "IMPLEMENTATIONS", "REFERENCE",
           "active", "implementation_scope", "set_implementation"]
