"""How sure a model is of a translation: each token's teacher-forced log-probability, each
word's score and the sentence's, as Bergamot's quality estimation defines them (Firefox
Translations): a word is the pieces the SentencePiece model joins into it (a piece starting
with "▁" starts one), its score the mean log-probability of its pieces; the sentence's score
the mean of its words' (the end of sentence is a token, not a word). `kt-score` prints them for
given source/target pairs.
"""
from __future__ import annotations

import dataclasses
from typing import Callable, Optional, Sequence

import tensorflow as tf

from keras_transformer.config import EOS_ID, PAD_ID
from keras_transformer.data.sentencepiece_pair import Tokenizer
from keras_transformer.data.tokenizer import model_input_ids, text_piece_ids
from keras_transformer.data.word_links import WORD_START
from keras_transformer.decoding.transformer_search import token_log_probs
from keras_transformer.model import Transformer



@dataclasses.dataclass(frozen=True)
class Confidence:
    """A translation's scores: `tokens` its pieces (EOS last, as "</s>") with their
    log-probabilities, `words` its words with their scores, `sentence` the sentence's (the mean
    of the words' and EOS's)."""

    tokens: list[tuple[str, float]]
    words: list[tuple[str, float]]
    sentence: float

    def to_dict(self) -> dict:
        """The JSON record `kt-score` prints."""
        return {"sentence": self.sentence, "words": [list(word) for word in self.words],
                "tokens": [list(token) for token in self.tokens]}


def word_scores(pieces: tf.Tensor, log_probs: tf.Tensor, real: tf.Tensor, end: tf.Tensor
                ) -> tuple[tf.RaggedTensor, tf.RaggedTensor, tf.Tensor]:
    """Bergamot's scores of translations, in the graph (`kt-score` and the SavedModel's
    `translate_with_scores` alike): `(words, scores, sentence)`, `[batch, (W)]` each translation's
    words (a "▁" piece, or the first, starts one; "▁" dropped), `[batch, (W)]` each word's mean
    piece log-probability, and `[batch]` the mean of each translation's word scores and `end`.

    `pieces` are `[batch, T]` strings, each translation's pieces (EOS left out by `real`);
    `log_probs` `[batch, T]` float32, each piece's log-probability; `real` `[batch, T]` bool, the
    positions of the pieces (not EOS, not padding); `end` `[batch]` float32, the log-probability of
    ending where each translation ends (`token_and_end_log_probs`).
    """
    first = tf.equal(tf.range(tf.shape(pieces)[1]), 0)[None]
    starts = tf.ragged.boolean_mask(
        first | tf.strings.regex_full_match(pieces, f"{WORD_START}.*"), real)
    flat_pieces = tf.ragged.boolean_mask(pieces, real).flat_values
    flat_log_probs = tf.ragged.boolean_mask(log_probs, real).flat_values
    word = tf.cumsum(tf.cast(starts.flat_values, tf.int32)) - 1
    count = tf.reduce_sum(tf.cast(starts.flat_values, tf.int32))
    text = tf.strings.regex_replace(tf.strings.unsorted_segment_join(flat_pieces, word, count),
                                    f"^{WORD_START}", "")
    mean = tf.math.unsorted_segment_mean(flat_log_probs, word, count)
    per_row = tf.reduce_sum(tf.cast(starts, tf.int32), axis=1)
    words = tf.RaggedTensor.from_row_lengths(text, per_row)
    scores = tf.RaggedTensor.from_row_lengths(mean, per_row)
    sentence = (tf.reduce_sum(scores, axis=1) + end) / tf.cast(per_row + 1, tf.float32)
    return words, scores, sentence


def confidence(pieces: Sequence[str], log_probs: Sequence[float]) -> Confidence:
    """The `Confidence` of a translation of `pieces` whose tokens (the pieces, then EOS) have
    `log_probs` (EOS's: the log-probability of ending there)."""
    return confidences([list(pieces)], [list(log_probs)])[0]


def confidences(pieces: Sequence[Sequence[str]], log_probs: Sequence[Sequence[float]]
                ) -> list[Confidence]:
    """The `Confidence` of each translation of `pieces` whose tokens (its pieces, then EOS)
    have `log_probs` (`word_scores`, in one batch)."""
    width = max(len(row) for row in pieces) if pieces else 0
    texts = tf.constant([[*row, *[""] * (width - len(row))] for row in pieces], tf.string,
                        shape=[len(pieces), width])
    values = tf.constant([[*row[:len(text)], *[0.0] * (width - len(text))]
                          for row, text in zip(log_probs, pieces)], tf.float32,
                         shape=[len(pieces), width])
    real = tf.sequence_mask([len(row) for row in pieces], width)
    end = tf.constant([row[len(text)] for row, text in zip(log_probs, pieces)], tf.float32,
                      shape=[len(pieces)])
    words, scores, sentence = word_scores(texts, values, real, end)
    return [Confidence(list(zip([*text, "</s>"], row)),
                       [(word.decode("utf-8"), score) for word, score in zip(row_words,
                                                                             row_scores)],
                       float(row_sentence))
            for text, row, row_words, row_scores, row_sentence in zip(
                pieces, log_probs, words.to_list(), scores.to_list(), sentence.numpy())]


def score_pairs(model: Transformer, tokenizer: Tokenizer, sources: Sequence[str],
                targets: Sequence[str], batch_size: int = 32,
                on_batch: Optional[Callable[[int], None]] = None) -> list[Confidence]:
    """The `Confidence` of each of `targets` as the translation of its source in `sources` (one
    target per source), one per pair, in order, by `model` (of one target language) and its
    `tokenizer`, `batch_size` pairs scored at once; `on_batch` is called with each batch's size
    once it is scored. A ValueError names the first line of `targets` with more subwords than the
    model's positions."""
    if len(sources) != len(targets):
        raise ValueError(f"{len(sources):,} sources but {len(targets):,} targets")
    max_length = model.config.max_length
    scored = []
    for start in range(0, len(sources), batch_size):
        texts = tf.constant(list(sources[start:start + batch_size]))
        source = model_input_ids(text_piece_ids(tokenizer, texts), model.config.vocab_size,
                                 max_length)
        source = tf.concat([source, tf.fill([source.nrows(), 1], EOS_ID)], 1)
        target = text_piece_ids(tokenizer, tf.constant(list(targets[start:start + batch_size])),
                                target=True)
        long = [start + index + 1 for index, length in enumerate(target.row_lengths().numpy())
                if length > max_length - 1]
        if long:
            raise ValueError(f"target line {long[0]:,}: more subwords than the model's "
                             f"{max_length - 1} (max_length {max_length}, EOS included)")
        target = tf.concat([target, tf.fill([target.nrows(), 1], EOS_ID)], 1)
        log_probs = token_log_probs(model, source.to_tensor(PAD_ID), target.to_tensor(PAD_ID))
        rows = target.to_list()
        scored += confidences([tokenizer.id_to_piece(row[:-1]) if len(row) > 1 else []
                               for row in rows],
                              [values[:len(row)] for row, values in
                               zip(rows, log_probs.numpy().tolist())])
        if on_batch is not None:
            on_batch(len(texts))
    return scored
