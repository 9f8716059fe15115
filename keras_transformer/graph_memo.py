"""Values computed once per traced `tf.function` graph and shared by every caller in it."""
from __future__ import annotations

import tensorflow as tf


def graph_memo(name: str) -> dict | None:
    """The dict called `name` of the graph being traced (created empty on first use), or None
    when executing eagerly. Keys are usually `tensor.ref()`; the dict lives as long as the graph.
    """
    if tf.executing_eagerly():
        return None
    graph = tf.compat.v1.get_default_graph()  # the function being traced (tensors may be captures)
    attribute = "_keras_transformer_memo_" + name
    if not hasattr(graph, attribute):
        setattr(graph, attribute, {})
    return getattr(graph, attribute)
