"""How sure a model is of a translation: each token's teacher-forced log-probability, each
word's score and the sentence's, as Bergamot's quality estimation defines them (Firefox
Translations): a word is the pieces the SentencePiece model joins into it (a piece starting
with "▁" starts one), its score the mean log-probability of its pieces; the sentence's score
the mean of its words' (the end of sentence is a token, not a word). `kt-score` prints them for
given source/target pairs.
"""
from __future__ import annotations

import dataclasses
import statistics
from typing import Callable, Optional, Sequence

import tensorflow as tf

from keras_transformer.config import EOS_ID, PAD_ID
from keras_transformer.data.sentencepiece_pair import Tokenizer
from keras_transformer.data.tokenizer import model_input_ids, text_pieces
from keras_transformer.decoding.transformer_search import token_log_probs
from keras_transformer.model import Transformer

WORD_START = "\u2581"  # SentencePiece's "▁"


@dataclasses.dataclass(frozen=True)
class Confidence:
    """A translation's scores: `tokens` its pieces (EOS last, as "</s>") with their
    log-probabilities, `words` its words with their scores, `sentence` the sentence's (0.0
    for an empty translation)."""

    tokens: list[tuple[str, float]]
    words: list[tuple[str, float]]
    sentence: float

    def to_dict(self) -> dict:
        """The JSON record `kt-score` prints."""
        return {"sentence": self.sentence, "words": [list(word) for word in self.words],
                "tokens": [list(token) for token in self.tokens]}


def word_scores(pieces: Sequence[str], log_probs: Sequence[float]) -> list[tuple[str, float]]:
    """The words of `pieces` (a translation's, without EOS) and each one's mean piece
    log-probability; a first piece without "▁" starts a word too."""
    words: list[tuple[str, list[float]]] = []
    for piece, log_prob in zip(pieces, log_probs):
        if piece.startswith(WORD_START) or not words:
            words.append((piece.removeprefix(WORD_START), [log_prob]))
        else:
            words[-1] = (words[-1][0] + piece, words[-1][1] + [log_prob])
    return [(word, statistics.fmean(scores)) for word, scores in words]


def confidence(pieces: Sequence[str], log_probs: Sequence[float]) -> Confidence:
    """The `Confidence` of a translation of `pieces` whose tokens (the pieces, then EOS) have
    `log_probs`."""
    words = word_scores(pieces, log_probs[:len(pieces)])
    return Confidence(list(zip([*pieces, "</s>"], log_probs)), words,
                      statistics.fmean(score for _, score in words) if words else 0.0)


def score_pairs(model: Transformer, tokenizer: Tokenizer, sources: Sequence[str],
                targets: Sequence[str], batch_size: int = 32,
                on_batch: Optional[Callable[[int], None]] = None) -> list[Confidence]:
    """The `Confidence` of each target as the translation of its source.

    Args:
        model: the model (of one target language).
        tokenizer: its tokenizer.
        sources: source texts.
        targets: their translations, one per source (ValueError naming the first line with more
            subwords than the model's positions).
        batch_size: pairs scored at once.
        on_batch: called with each batch's size once it is scored.

    Returns:
        One `Confidence` per pair, in order.
    """
    if len(sources) != len(targets):
        raise ValueError(f"{len(sources):,} sources but {len(targets):,} targets")
    max_length = model.config.max_length
    scored = []
    for start in range(0, len(sources), batch_size):
        texts = tf.constant(list(sources[start:start + batch_size]))
        source = model_input_ids(text_pieces(tokenizer, texts), model.config.vocab_size,
                                 max_length)
        source = tf.concat([source, tf.fill([source.nrows(), 1], EOS_ID)], 1)
        target = text_pieces(tokenizer, tf.constant(list(targets[start:start + batch_size])),
                             target=True)
        long = [start + index + 1 for index, length in enumerate(target.row_lengths().numpy())
                if length > max_length - 1]
        if long:
            raise ValueError(f"target line {long[0]:,}: more subwords than the model's "
                             f"{max_length - 1} (max_length {max_length}, EOS included)")
        target = tf.concat([target, tf.fill([target.nrows(), 1], EOS_ID)], 1)
        log_probs = token_log_probs(model, source.to_tensor(PAD_ID), target.to_tensor(PAD_ID))
        for row, values in zip(target.to_list(), log_probs.numpy().tolist()):
            pieces = tokenizer.id_to_piece(row[:-1]) if len(row) > 1 else []
            scored.append(confidence(pieces, values[:len(row)]))
        if on_batch is not None:
            on_batch(len(texts))
    return scored
