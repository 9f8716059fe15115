"""Word alignment read from a model's encoder-decoder attention.

For each target piece, the source piece it attends to most when it is predicted (the
translation teacher-forced), in one decoder layer, averaged over some of its heads (Garg et al.
2019 read the second-to-last layer). Which layer and heads align best is measured against a
statistical aligner's alignments (`benchmarks/alignment_error.py`) and recorded in a run's
`alignment.json` (`read_alignment_heads`), which every export then carries.
"""
import dataclasses
import json
import os
from pathlib import Path
from typing import Optional

import tensorflow as tf

from keras_transformer.config import TransformerConfig
from keras_transformer.config import BOS_ID, PAD_ID

ALIGNMENT_FILE = "alignment.json"


@dataclasses.dataclass(frozen=True)
class AlignmentHeads:
    """The decoder layer whose encoder-decoder attention aligns, and its heads averaged
    (`None`: every head)."""
    layer: int
    heads: Optional[tuple[int, ...]] = None

    @classmethod
    def default(cls, config: TransformerConfig) -> "AlignmentHeads":
        """The second-to-last layer of 4 or more, else the last; every head."""
        depth = config.decoder_depth
        return cls(depth - (2 if depth >= 4 else 1))

    def check(self, config: TransformerConfig) -> "AlignmentHeads":
        """`self`, or a ValueError naming what `config`'s decoder does not have."""
        if not 0 <= self.layer < config.decoder_depth:
            raise ValueError(f"alignment layer: {self.layer} is not a layer of a "
                             f"{config.decoder_depth}-layer decoder")
        if self.heads is not None and (
                not self.heads or not all(0 <= head < config.num_heads for head in self.heads)
                or len(set(self.heads)) != len(self.heads)):
            raise ValueError(f"alignment heads: {list(self.heads)} are not distinct heads of "
                             f"{config.num_heads}")
        return self

    def to_json(self) -> dict:
        return {"layer": self.layer, "heads": None if self.heads is None else list(self.heads)}

    @classmethod
    def from_json(cls, record: dict) -> "AlignmentHeads":
        heads = record.get("heads")
        return cls(int(record["layer"]), None if heads is None else tuple(map(int, heads)))


def read_alignment_heads(directory: str | os.PathLike, config: TransformerConfig
                         ) -> AlignmentHeads:
    """The choice recorded in `directory`'s `alignment.json`, else `AlignmentHeads.default`."""
    path = Path(directory) / ALIGNMENT_FILE
    if not path.exists():
        return AlignmentHeads.default(config)
    try:
        choice = AlignmentHeads.from_json(json.loads(path.read_text(encoding="utf-8")))
        return choice.check(config)
    except (ValueError, KeyError, TypeError) as error:
        raise ValueError(f"{path}: not an alignment choice of this model ({error})") from None


def attention_alignment(model, source_ids: tf.Tensor, target_ids: tf.Tensor,
                        choice: AlignmentHeads) -> tf.Tensor:
    """For `target_ids` `[batch, T]` (translations of `source_ids` `[batch, S]`, PAD after
    their end), `[batch, T]` int32: each piece's most attended source position, -1 at PAD."""
    target_in = tf.concat([tf.fill([tf.shape(target_ids)[0], 1], BOS_ID), target_ids[:, :-1]],
                          axis=1)
    attention = model.attention_weights(source_ids, target_in)["encoder_decoder"][choice.layer]
    if choice.heads is not None:
        attention = tf.gather(attention, list(choice.heads), axis=1)
    heads_mean = tf.reduce_mean(attention, axis=1)  # [b, T, S]
    # A column of -1 (below any attention weight) keeps argmax defined for an empty batch,
    # whose source has no column.
    heads_mean = tf.pad(heads_mean, [[0, 0], [0, 0], [0, 1]], constant_values=-1.0)
    return tf.where(target_ids != PAD_ID,
                    tf.argmax(heads_mean, axis=-1, output_type=tf.int32), -1)
