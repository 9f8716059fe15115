"""Teacher-forced scoring of given hypotheses, on the scale the decoders report."""
from __future__ import annotations

import tensorflow as tf

from keras_transformer.decoding.length_penalty import length_divisor
from keras_transformer.model import Transformer, source_padding_mask
from keras_transformer.vocab_ids import BOS_ID, PAD_ID


def score_hypotheses(model: Transformer, source_ids, hypothesis_ids, alpha: float = 0.6
                     ) -> tf.Tensor:
    """`[batch]` sum of log p(y_t | y_<t, x) over each hypothesis' tokens (EOS included,
    PAD excluded) divided by `length_divisor(length, alpha)`, from one `model.decode` pass.

    `hypothesis_ids`: `[batch, length]` without BOS, right-padded with PAD.
    """
    source_ids = tf.convert_to_tensor(source_ids, tf.int32)
    targets = tf.convert_to_tensor(hypothesis_ids, tf.int32)
    inputs = tf.concat([tf.fill([tf.shape(targets)[0], 1], BOS_ID), targets[:, :-1]], axis=1)
    logits = model.decode(inputs, model.encode(source_ids, training=False),
                          source_padding_mask(source_ids), training=False)
    log_probs = tf.gather(tf.nn.log_softmax(tf.cast(logits, tf.float32)), targets, batch_dims=2)
    real = tf.not_equal(targets, PAD_ID)
    total = tf.reduce_sum(tf.where(real, log_probs, 0.0), axis=1)
    return total / length_divisor(tf.reduce_sum(tf.cast(real, tf.int32), axis=1), alpha)
