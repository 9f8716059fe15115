"""Strings in, translations out: tokenizer, beam search and detokenizer in one graph.

A `Translator` is the module that `keras_transformer.export` saves; in-process it gives the
exported model's exact outputs.
"""
from __future__ import annotations

from typing import Optional

import tensorflow as tf

from keras_transformer.data.tokenizer import SubwordTokenizer
from keras_transformer.decoding.beam_search import search_beams
from keras_transformer.decoding.greedy import search_greedy
from keras_transformer.decoding.result import DecodeResult
from keras_transformer.model import Transformer
from keras_transformer.search_settings import SearchSettings
from keras_transformer.vocab_ids import BOS_ID, EOS_ID, PAD_ID, UNK_ID


class Translator(tf.Module):
    """Translates with fixed `SearchSettings` (beam size 1 runs the greedy fast path).

    `settings` default to the paper's (`SearchSettings()`: beam 4, alpha 0.6, +50).
    Inputs are truncated to `model.config.max_length - 1` subword ids (plus EOS); invalid UTF-8
    is decoded with U+FFFD replacements; out-of-vocabulary ids become UNK; PAD/BOS/EOS ids in a
    source are dropped; an empty source gets an empty translation with score 0.
    """

    def __init__(self, model: Transformer, tokenizer: SubwordTokenizer,
                 settings: Optional[SearchSettings] = None, name: str = "translator"):
        super().__init__(name=name)
        config = model.config
        self.model = model
        self.tokenizer = tokenizer
        self.settings = SearchSettings() if settings is None else settings
        if tokenizer.vocab_size != config.vocab_size:
            raise ValueError(f"tokenizer: vocabulary of {tokenizer.vocab_size} ids, but the "
                             f"model expects vocab_size={config.vocab_size}")

    @tf.function(input_signature=[tf.TensorSpec([None], tf.string, name="text")],
                 autograph=False)
    def translate(self, text: tf.Tensor) -> dict[str, tf.Tensor]:
        """`text` `[batch]` -> `translation` `[batch]` strings and `score` `[batch]`."""
        valid = tf.strings.unicode_transcode(text, "UTF-8", "UTF-8", errors="replace")
        best = self._translate_ragged(self.tokenizer.tokenize(valid))
        return {"translation": self.tokenizer.detokenize(best["ids"]), "score": best["score"]}

    @tf.function(input_signature=[tf.TensorSpec([None, None], tf.int32, name="source_ids")],
                 autograph=False)
    def translate_ids(self, source_ids: tf.Tensor) -> dict[str, tf.Tensor]:
        """`source_ids` `[batch, len]` subword ids (right-padded with 0) -> `ids`
        `[batch, len]` (EOS-terminated, 0-padded), `score` `[batch]`, and the n-best
        `nbest_ids` `[batch, beam, len]` and `nbest_scores` `[batch, beam]`."""
        return self._translate_ragged(tf.RaggedTensor.from_tensor(source_ids, padding=PAD_ID))

    def _translate_ragged(self, pieces: tf.RaggedTensor) -> dict[str, tf.Tensor]:
        config = self.model.config
        pieces = tf.ragged.map_flat_values(
            lambda ids: tf.where((ids < 0) | (ids >= config.vocab_size), UNK_ID, ids), pieces)
        pieces = tf.ragged.boolean_mask(pieces, (pieces != PAD_ID) & (pieces != BOS_ID)
                                        & (pieces != EOS_ID))[:, :config.max_length - 1]
        eos = tf.fill([pieces.nrows(), 1], EOS_ID)
        source_ids = tf.concat([pieces, eos], axis=1).to_tensor(default_value=PAD_ID)
        result = self._search(source_ids)
        empty = tf.equal(pieces.row_lengths(), 0)[:, None]
        ids = tf.where(empty[:, :, None], PAD_ID, result.ids)
        scores = tf.where(empty, 0.0, result.scores)
        return {"ids": ids[:, 0], "score": scores[:, 0], "nbest_ids": ids,
                "nbest_scores": scores}

    def _search(self, source_ids: tf.Tensor) -> DecodeResult:
        settings = self.settings
        if settings.beam_size == 1:
            return search_greedy(self.model, source_ids, settings.length_penalty,
                                 settings.max_decode_extra)
        return search_beams(self.model, source_ids, settings.beam_size,
                            settings.length_penalty, settings.max_decode_extra)
