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
from collections import Counter
from pathlib import Path
from typing import Optional, Sequence

import numpy as np
import tensorflow as tf

from keras_transformer.config import BOS_ID, EOS_ID, PAD_ID, TransformerConfig
from keras_transformer.data.tokenizer import model_input_ids, text_piece_ids
from keras_transformer.data.word_links import WORD, Links, piece_kinds, piece_words

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
    attention = teacher_forced_attention(model, source_ids, target_ids)
    return heads_alignment(attention[choice.layer], target_ids, choice.heads)


def teacher_forced_attention(model, source_ids: tf.Tensor, target_ids: tf.Tensor
                             ) -> list[tf.Tensor]:
    """Each decoder layer's encoder-decoder attention `[batch, heads, T, S]` as each piece of
    `target_ids` is predicted."""
    target_in = tf.concat([tf.fill([tf.shape(target_ids)[0], 1], BOS_ID), target_ids[:, :-1]],
                          axis=1)
    return model.attention_probabilities(source_ids, target_in)["encoder_decoder"]


def heads_alignment(attention: tf.Tensor, target_ids: tf.Tensor,
                    heads: Optional[tuple[int, ...]] = None) -> tf.Tensor:
    """The argmax over the source of one layer's `attention` `[batch, heads, T, S]`, averaged
    over `heads` (None: all), -1 where `target_ids` is PAD."""
    if heads is not None:
        attention = tf.gather(attention, list(heads), axis=1)
    heads_mean = tf.reduce_mean(attention, axis=1)  # [b, T, S]
    # A column of -1 (below any attention weight) keeps argmax defined for an empty batch,
    # whose source has no column.
    heads_mean = tf.pad(heads_mean, [[0, 0], [0, 0], [0, 1]], constant_values=-1.0)
    return tf.where(target_ids != PAD_ID,
                    tf.argmax(heads_mean, axis=-1, output_type=tf.int32), -1)


def word_alignment(target_pieces: Sequence[str], source_pieces: Sequence[str],
                   alignment: Sequence[int], target_words: int, source_words: int
                   ) -> Optional[list[int]]:
    """For each target word, the source word most of its pieces are aligned to (the first of
    a tie; -1: none), from the subword alignment; None when the pieces do not make as many
    words as the texts have. Pieces before a text's first word (a language token) and after
    its last (EOS) belong to no word."""
    source_word = _piece_words(source_pieces)
    target_word = _piece_words(target_pieces)
    if (max(source_word, default=-1) + 1 != source_words
            or max(target_word, default=-1) + 1 != target_words):
        return None
    votes: list[Counter] = [Counter() for _ in range(target_words)]
    for piece, aligned in enumerate(alignment[:len(target_pieces)]):
        if target_word[piece] >= 0 and 0 <= aligned < len(source_word):
            if source_word[aligned] >= 0:
                votes[target_word[piece]][source_word[aligned]] += 1
    return [min(vote, key=lambda word: (-vote[word], word)) if vote else -1 for vote in votes]


def _piece_words(pieces: Sequence[str]) -> list[int]:
    """Each piece's word index (`word_links.piece_words`; the mark alone before byte pieces
    starts a word); an end-of-sentence piece belongs to none (-1). Pieces before the first word
    (a language token, or byte pieces the model put first: the words then miscount, and markup
    falls back to positions) belong to none."""
    ends = [piece == "</s>" for piece in pieces]
    # The end as a word of its own: the mark alone before it is whitespace.
    words = piece_words(np.where(ends, WORD, piece_kinds(pieces)))
    return [-1 if end else int(word) for end, word in zip(ends, words)]


def candidate_heads(config: TransformerConfig) -> list[AlignmentHeads]:
    """Every decoder layer with all its heads averaged, and each of its heads alone."""
    return [choice for layer in range(config.decoder_depth)
            for choice in [AlignmentHeads(layer)] + [
                AlignmentHeads(layer, (head,)) for head in range(config.num_heads)]]


def attention_links(model, tokenizer, sources: Sequence[str], targets: Sequence[str],
                    choices: Sequence[AlignmentHeads], batch_size: int = 64
                    ) -> dict[AlignmentHeads, list[Links]]:
    """For each choice, the word links of each pair of `sources` and `targets` (the target
    teacher-forced; each target word linked to the source word `word_alignment` gives, none
    where the pieces do not make the texts' words). A model of one language pair: no language
    token is placed; a side longer than the model takes is cut, its pair left without links."""
    config = model.config
    found: dict[AlignmentHeads, list[Links]] = {choice: [] for choice in choices}
    for start in range(0, len(sources), batch_size):
        batch = slice(start, start + batch_size)
        source_ids, target_ids = (_with_eos(model_input_ids(
            text_piece_ids(tokenizer, tf.constant(texts[batch]), target), config.vocab_size,
            config.max_length)) for texts, target in ((sources, False), (targets, True)))
        attention = teacher_forced_attention(model, source_ids, target_ids)
        source_pieces = _piece_rows(tokenizer, source_ids)
        target_pieces = _piece_rows(tokenizer, target_ids)
        for choice in choices:
            argmax = heads_alignment(attention[choice.layer], target_ids, choice.heads).numpy()
            for row, (source, target) in enumerate(zip(sources[batch], targets[batch])):
                words = word_alignment(target_pieces[row], source_pieces[row], argmax[row],
                                       len(target.split()), len(source.split()))
                found[choice].append(set() if words is None else {
                    (word, index) for index, word in enumerate(words) if word >= 0})
    return found


def _with_eos(ids: tf.RaggedTensor) -> tf.Tensor:
    """Ragged ids, each row ended by EOS, padded dense."""
    eos = tf.fill([ids.nrows(), 1], tf.constant(EOS_ID, ids.dtype))
    return tf.concat([ids, tf.RaggedTensor.from_tensor(eos)], axis=1).to_tensor(PAD_ID)


def _piece_rows(tokenizer, ids: tf.Tensor) -> list[list[str]]:
    """Each row's piece texts up to its PAD."""
    pieces = tokenizer.pieces(ids).numpy()
    return [[piece.decode("utf-8") for piece, id_ in zip(row, ids_row) if id_ != PAD_ID]
            for row, ids_row in zip(pieces, ids.numpy())]


def alignment_error(found: Sequence[Links], reference: Sequence[Links]) -> dict[str, float]:
    """Precision, recall and alignment error rate (Och and Ney 2003, every reference link
    sure) of `found` against `reference`, over all sentence pairs."""
    if len(found) != len(reference):
        raise ValueError(f"{len(found)} alignments against {len(reference)} reference ones")
    both = sum(len(a & r) for a, r in zip(found, reference))
    found_links = sum(map(len, found))
    reference_links = sum(map(len, reference))
    return {"precision": both / max(found_links, 1), "recall": both / max(reference_links, 1),
            "aer": 1 - 2 * both / max(found_links + reference_links, 1)}


def choose_heads(errors: dict[AlignmentHeads, dict[str, float]]) -> AlignmentHeads:
    """The choice of lowest alignment error (the first of a tie)."""
    return min(errors, key=lambda choice: errors[choice]["aer"])


def write_alignment_heads(directory: str | os.PathLike, choice: AlignmentHeads,
                          measured: Optional[dict] = None) -> Path:
    """Records `choice` (and what it was measured with) as `directory`'s `alignment.json`."""
    path = Path(directory) / ALIGNMENT_FILE
    path.write_text(json.dumps({**choice.to_json(), **({"measured": measured} if measured
                                                         else {})}, indent=1) + "\n",
                    encoding="utf-8")
    return path
