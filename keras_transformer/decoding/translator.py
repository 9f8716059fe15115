"""Strings in, translations out: tokenizer, beam search and detokenizer in one graph.

A `TranslationModule` is the module that `keras_transformer.serving.export` saves; in-process it
gives the exported model's exact outputs.
"""
from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING, Callable, Optional, Sequence

import numpy as np
import tensorflow as tf

from keras_transformer.data.languages import LanguageTable, asked_languages
from keras_transformer.data.tokenizer import (SubwordTokenizer, model_input_ids, text_piece_ids,
                                              without_special_ids)
from keras_transformer.decoding.alignment import AlignmentHeads, attention_alignment
from keras_transformer.decoding.confidence import word_scores
from keras_transformer.decoding.shortlist import VocabularyShortlist
from keras_transformer.decoding.transformer_search import (ensemble_members, run_search_graph,
                                                           run_search_xla, token_and_end_log_probs)
from keras_transformer.model import Transformer
from keras_transformer.config import EOS_ID, PAD_ID, SearchSettings

if TYPE_CHECKING:
    from keras_transformer.data.languages import RunLanguages

XLA_WIDTH_STEP = 16  # source and prefix widths an XLA-compiled search is given: multiples of it
TEXT = tf.TensorSpec([None], tf.string, name="text")  # the input of the text signatures
# The further input of every signature of a model of several target languages: one per row.
TARGET_LANGUAGE = tf.TensorSpec([None], tf.string, name="target_language")
# And of a model whose sources start with their language's token (NLLB-200, M2M-100).
SOURCE_LANGUAGE = tf.TensorSpec([None], tf.string, name="source_language")
# `translate_with_terms`' further input: each row's target phrases, separated by tabs.
TERMS = tf.TensorSpec([None], tf.string, name="terms")
TERM_SEPARATOR = "\t"


class TranslationModule(tf.Module):
    """Translates with fixed `SearchSettings` (beam size 1 runs the greedy fast path): the
    module of graph signatures, tensors in and out, that an export saves and TF Serving runs
    (`serving.text_translation.LineTranslator` feeds it, or its SavedModel, lines of text).

    Signatures: `translate` (text -> best translation and score), `translate_ids` (ids -> best
    and n-best ids and scores), `translate_nbest` (text -> every hypothesis of the beam as text
    with its score, best first), `translate_with_prefix` (text and the start of its
    translation -> the best translation that starts so), `translate_with_terms` (text and
    target phrases -> the best translation that contains them, lexically constrained),
    `translate_with_scores` (text -> best translation with Bergamot's confidence: its
    sentence's and each word's, `decoding.confidence`) and `translate_with_alignment` (text
    -> best translation, its subword pieces and, for each, the source piece it attends to
    most: encoder-decoder attention
    of the decoder layer and heads `alignment` names, when that piece is predicted (the
    hypothesis teacher-forced, `decoding.alignment`). Default: every head of the second-to-last
    layer for 4 or more layers (Garg et al. 2019), else of the last (on the 2-layer demo model
    the last aligns more target words with their source words than the first); `kt-align`
    measures and records another (benchmarks/RESULTS.md, "Alignment").

    `jit_compile`: the search runs as one XLA-compiled function (fewer per-op costs at small
    batches; an export carries it, which TF Serving runs with `--xla_cpu_compilation_enabled`
    on CPU); a shortlist is then padded to a size the input shapes fix
    (`VocabularyShortlist.padded_target_ids`).

    `ensemble`: further models over the same vocabulary whose probabilities the search averages
    with `model`'s (the alignment is `model`'s own).

    `languages`: the target languages of a model trained on several language pairs
    (`RunLanguages`). Every signature then takes a further input, `target_language` `[batch]`
    strings, one per row (a row's text or source ids), each a language code of the model
    (`de`): its token (`<2de>`) goes first in the row's source or, forced, first in its
    translation (and then left out of every output), as the model was trained
    (`RunLanguages.placement`); a language the model has no token for is an
    InvalidArgumentError naming it and the model's languages. With the "source" placement the
    token asked for takes the place of one the text starts with, and a model whose language
    is optional (`RunLanguages.optional`: an imported multi-target model) takes "" for a row
    translated as its text says (`RunLanguages.with_source_tokens`). A model whose sources
    start with their own language's token (`RunLanguages.source_language_token`: NLLB-200,
    M2M-100) takes one more input, `source_language` `[batch]`, whose token goes first in the
    row's source. `IntoLanguage` asks for one language (and source language) in-process.

    `settings` default to the paper's (`SearchSettings()`: beam 4, alpha 0.6, +50). With a
    `shortlist`, each batch's search scores only its `shortlist.target_ids` (faster at large
    vocabularies; translations approximate the full vocabulary's, see `decoding.shortlist`).
    Inputs are truncated to `model.config.max_length - 1` subword ids (plus EOS); invalid UTF-8
    is decoded with U+FFFD replacements; out-of-vocabulary ids become UNK; PAD/BOS/EOS ids in a
    source are dropped (`data.tokenizer.text_piece_ids` and `model_input_ids`, the rule every
    backend follows); an empty source gets an empty translation with score 0.
    """

    def __init__(self, model: Transformer, tokenizer: SubwordTokenizer,
                 settings: Optional[SearchSettings] = None, name: str = "translator",
                 alignment: Optional[AlignmentHeads] = None,
                 shortlist: Optional[VocabularyShortlist] = None, jit_compile: bool = False,
                 ensemble: Sequence[Transformer] = (), languages: Optional[RunLanguages] = None):
        super().__init__(name=name)
        config = model.config
        self.model = model
        self.ensemble = list(ensemble)
        ensemble_members([model, *self.ensemble])  # one vocabulary size
        self.tokenizer = tokenizer
        self.settings = SearchSettings() if settings is None else settings
        self.alignment = (AlignmentHeads.default(config) if alignment is None
                          else alignment.check(config))
        if tokenizer.vocab_size != config.vocab_size:
            raise ValueError(f"tokenizer: vocabulary of {tokenizer.vocab_size} ids, but the "
                             f"model expects vocab_size={config.vocab_size}")
        if shortlist is not None and (shortlist.vocab_size, shortlist.target_vocab_size) != (
                config.vocab_size, config.target_vocab_size):
            raise ValueError(f"shortlist: built for a vocabulary of {shortlist.vocab_size} "
                             f"source and {shortlist.target_vocab_size} target ids, but the "
                             f"model has vocab_size={config.vocab_size} and "
                             f"{config.target_vocab_size} output ids")
        self.shortlist = shortlist
        self.jit_compile = jit_compile
        self.languages = languages
        language, language_ids = (), ()
        self.language_table = None if languages is None else LanguageTable(languages)
        if languages is not None:
            language = (TARGET_LANGUAGE,) + (
                (SOURCE_LANGUAGE,) if languages.source_language_token else ())
            language_ids = tuple(tf.TensorSpec([None], tf.int32, name) for name
                                 in ("language_ids", "source_language_ids")[:len(language)])
        # The search's input of a text, one graph function that the signatures of text call
        # (traced once, not once in each).
        self._text_source_ids = tf.function(self._source_ids_of_text,
                                            input_signature=[TEXT, *language_ids], autograph=False)
        # The signatures: functions of this instance's bound methods. They hold the instance
        # (a method decorated in the class holds it by a weak reference only, so that
        # `TranslationModule(...).translate(text)` would find it gone).
        self.translate = _signature(self._translate, TEXT, *language)
        self.translate_nbest = _signature(self._translate_nbest, TEXT, *language)
        self.translate_with_alignment = _signature(self._translate_with_alignment, TEXT,
                                                   *language)
        self.translate_with_prefix = _signature(self._translate_with_prefix, TEXT,
                                                tf.TensorSpec([None], tf.string, name="prefix"),
                                                *language)
        self.translate_with_terms = _signature(self._translate_with_terms, TEXT, TERMS,
                                               *language)
        self.translate_with_scores = _signature(self._translate_with_scores, TEXT, *language)
        self.translate_ids = _signature(
            self._translate_ids, tf.TensorSpec([None, None], tf.int32, name="source_ids"),
            *language)

    def _translate(self, text: tf.Tensor, target_language: Optional[tf.Tensor] = None,
                   source_language: Optional[tf.Tensor] = None) -> dict[str, tf.Tensor]:
        """`text` `[batch]` -> `translation` `[batch]` strings and `score` `[batch]`."""
        language_ids, source_language_ids = self._token_ids(target_language, source_language, text)
        source = self._text_source(text, language_ids, source_language_ids)
        best = self._search(source, language_ids)
        return {"translation": self.tokenizer.detokenize(best["ids"]), "score": best["score"]}

    def _translate_nbest(self, text: tf.Tensor, target_language: Optional[tf.Tensor] = None,
                         source_language: Optional[tf.Tensor] = None) -> dict[str, tf.Tensor]:
        """`text` `[batch]` -> `nbest_translations` `[batch, beam]` strings and `nbest_scores`
        `[batch, beam]`, best first."""
        language_ids, source_language_ids = self._token_ids(target_language, source_language, text)
        source = self._text_source(text, language_ids, source_language_ids)
        result = self._search(source, language_ids)
        ids = result["nbest_ids"]
        shape = tf.shape(ids)
        # Not [-1, len]: for an empty batch, [0, beam, 0] ids would reshape to [beam, 0].
        texts = self.tokenizer.detokenize(tf.reshape(ids, [shape[0] * shape[1], shape[2]]))
        return {"nbest_translations": tf.reshape(texts, shape[:2]),
                "nbest_scores": result["nbest_scores"]}

    def _translate_with_alignment(self, text: tf.Tensor,
                                  target_language: Optional[tf.Tensor] = None,
                                  source_language: Optional[tf.Tensor] = None
                                  ) -> dict[str, tf.Tensor]:
        """`text` `[batch]` -> `translation`, `score`, `target_pieces` `[batch, T]` (the best
        hypothesis' subwords up to its EOS, "" after), `source_pieces` `[batch, S]` (the
        source's subwords and EOS, "" after: the encoder's input, with the "source" placement
        of `languages` the language token first) and `alignment` `[batch, T]` int32: for each
        target piece the index of the source piece it is aligned to (-1 after the end)."""
        language_ids, source_language_ids = self._token_ids(target_language, source_language, text)
        source = self._text_source(text, language_ids, source_language_ids)
        best = self._search(source, language_ids)
        source_ids, ids = best["source_ids"], best["searched_ids"]
        alignment = attention_alignment(self.model, source_ids, ids, self.alignment)
        pieces = tf.where(ids != PAD_ID, self.tokenizer.pieces(ids), "")
        return {"translation": self.tokenizer.detokenize(best["ids"]), "score": best["score"],
                "target_pieces": self._without_language_ids(pieces, language_ids, ""),
                "source_pieces": tf.where(source_ids != PAD_ID,
                                          self.tokenizer.source_pieces_of(source_ids), ""),
                "alignment": self._without_language_ids(alignment, language_ids, -1)}

    def _translate_with_prefix(self, text: tf.Tensor, prefix: tf.Tensor,
                               target_language: Optional[tf.Tensor] = None,
                               source_language: Optional[tf.Tensor] = None
                               ) -> dict[str, tf.Tensor]:
        """`text` and `prefix` `[batch]` -> `translation` `[batch]` starting with that row's
        `prefix` (the target text typed so far; "" leaves the row free) and its `score`.

        The prefix is tokenized like any target text (`tokenize_target`) and forced on every
        hypothesis; the search continues after it as usual (an empty source still gets "")."""
        language_ids, source_language_ids = self._token_ids(target_language, source_language, text)
        source = self._text_source(text, language_ids, source_language_ids)
        best = self._search(source, language_ids,
                            prefix=prefix)
        return {"translation": self.tokenizer.detokenize(best["ids"]), "score": best["score"]}

    def _translate_with_terms(self, text: tf.Tensor, terms: tf.Tensor,
                              target_language: Optional[tf.Tensor] = None,
                              source_language: Optional[tf.Tensor] = None
                              ) -> dict[str, tf.Tensor]:
        """`text` and `terms` `[batch]` -> `translation` `[batch]` containing each of that
        row's `terms` (target phrases separated by tabs, tokenized as target text; "" leaves
        the row free), its `score`, and `missing_terms` `[batch]`: the phrases it does not
        contain (tab-separated, in the order given; "" when all are in), because the length
        limit came first (or the source is empty).

        The search is the constrained beam search (`keras_transformer.constraints`): a row
        without terms gets exactly the `translate` signature's translation (of a translator
        that samples, the beam search's of its beam size: terms are placed by a search)."""
        language_ids, source_language_ids = self._token_ids(target_language, source_language, text)
        phrases = tf.strings.split(terms, TERM_SEPARATOR)
        phrases = tf.ragged.boolean_mask(phrases, tf.strings.length(tf.strings.strip(phrases)) > 0)
        piece_ids = model_input_ids(
            text_piece_ids(self.tokenizer, phrases.flat_values, target=True),
            self.model.config.target_vocab_size, self.model.config.max_length)
        constraints = tf.RaggedTensor.from_row_lengths(piece_ids, phrases.row_lengths())
        source = self._text_source(text, language_ids, source_language_ids)
        best = self._search(source, language_ids,
                            constraints=constraints.to_tensor(default_value=PAD_ID))
        missing = tf.RaggedTensor.from_tensor(best["unplaced"], lengths=phrases.row_lengths())
        return {"translation": self.tokenizer.detokenize(best["ids"]), "score": best["score"],
                "missing_terms": tf.strings.reduce_join(tf.ragged.boolean_mask(phrases, missing),
                                                        axis=1, separator=TERM_SEPARATOR)}

    def _translate_with_scores(self, text: tf.Tensor, target_language: Optional[tf.Tensor] = None,
                               source_language: Optional[tf.Tensor] = None
                               ) -> dict[str, tf.Tensor]:
        """`text` `[batch]` -> `translation`, `score`, and how sure the model is of it
        (Bergamot's quality estimation, `decoding.confidence.word_scores`): `confidence`
        `[batch]` (the mean of its word scores and of ending where it ends), `words` `[batch, W]`
        ("" after the last), `word_scores` `[batch, W]` (each word's mean piece log-probability;
        0.0 after) and `token_scores` `[batch, T]` (each piece's, then EOS's; 0.0 after). The
        log-probabilities are `model`'s, teacher-forced over the whole vocabulary (not an
        ensemble's or a shortlist's)."""
        language_ids, source_language_ids = self._token_ids(target_language, source_language, text)
        source = self._text_source(text, language_ids, source_language_ids)
        best = self._search(source, language_ids)
        ids = best["ids"]
        log_probs, end = token_and_end_log_probs(self.model, best["source_ids"],
                                                 best["searched_ids"])
        log_probs = self._without_language_ids(log_probs, language_ids, 0.0)
        real = tf.not_equal(ids, PAD_ID) & tf.not_equal(ids, EOS_ID)
        words, scores, sentence = word_scores(self.tokenizer.pieces(ids), log_probs, real, end)
        return {"translation": self.tokenizer.detokenize(ids), "score": best["score"],
                "confidence": sentence, "words": words.to_tensor(""),
                "word_scores": scores.to_tensor(0.0), "token_scores": log_probs}

    def _translate_ids(self, source_ids: tf.Tensor, target_language: Optional[tf.Tensor] = None,
                       source_language: Optional[tf.Tensor] = None) -> dict[str, tf.Tensor]:
        """`source_ids` `[batch, len]` subword ids (right-padded with 0) -> `ids`
        `[batch, len]` (EOS-terminated, 0-padded), `score` `[batch]`, and the n-best
        `nbest_ids` `[batch, beam, len]` and `nbest_scores` `[batch, beam]`."""
        language_ids, source_language_ids = self._token_ids(target_language, source_language,
                                                            source_ids)
        source = self._source_ids(tf.RaggedTensor.from_tensor(source_ids, padding=PAD_ID),
                                  language_ids, source_language_ids)
        result = self._search(source, language_ids)
        return {key: result[key] for key in ("ids", "score", "nbest_ids", "nbest_scores")}

    def _token_ids(self, target_language: Optional[tf.Tensor],
                   source_language: Optional[tf.Tensor], rows: tf.Tensor
                ) -> tuple[Optional[tf.Tensor], Optional[tf.Tensor]]:
        """The `[batch]` token ids of the signature's languages, one per row of `rows`
        (`LanguageTable.token_ids`; None, None for a model of one target language)."""
        if self.language_table is None:
            return None, None
        return self.language_table.token_ids(target_language, source_language, rows)

    def _without_language_ids(self, values: tf.Tensor, language_ids: Optional[tf.Tensor],
                              default: int | float | str = PAD_ID) -> tf.Tensor:
        """`values` (of the shape of the translations' ids, `[batch, ..., length]`) without
        their first position, which holds the row's token of `language_ids` forced into it (the
        "target" placement; a model may emit the token again later, which stays), the rest
        moved up and padded with `default` to the same shape; `values` itself for the "source"
        placement or when `language_ids` is None."""
        if language_ids is None or self.languages.placement != "target":
            return values
        padding = [[0, 0]] * (values.shape.rank - 1) + [[0, 1]]
        return tf.pad(values[..., 1:], padding, constant_values=default)

    def _prefix_ids(self, prefix: Optional[tf.Tensor], language_ids: Optional[tf.Tensor]
                    ) -> Optional[tf.Tensor]:
        """The `[batch, P]` ids each hypothesis is forced to start with: `prefix`'s target
        pieces (None: none), after the row's token of `language_ids` with the "target" placement;
        None when there are neither."""
        into_target = language_ids is not None and self.languages.placement == "target"
        if prefix is None and not into_target:
            return None
        piece_ids = (tf.RaggedTensor.from_tensor(tf.zeros([tf.shape(language_ids)[0], 0], tf.int32))
                     if prefix is None else text_piece_ids(self.tokenizer, prefix, target=True))
        if into_target:
            piece_ids = _prepended(language_ids, piece_ids)
        return model_input_ids(piece_ids, self.model.config.target_vocab_size,
                               self.model.config.max_length).to_tensor(default_value=PAD_ID)

    def _text_source(self, text: tf.Tensor, language_ids: Optional[tf.Tensor],
                     source_language_ids: Optional[tf.Tensor]) -> tuple[tf.Tensor, tf.Tensor]:
        """`_source_ids` of the subwords of `text` `[batch]`, by the one graph function of
        them the signatures share."""
        return self._text_source_ids(text, *(row_ids for row_ids
                                             in (language_ids, source_language_ids)
                                             if row_ids is not None))

    def _source_ids_of_text(self, text: tf.Tensor, language_ids: Optional[tf.Tensor] = None,
                            source_language_ids: Optional[tf.Tensor] = None
                            ) -> tuple[tf.Tensor, tf.Tensor]:
        return self._source_ids(text_piece_ids(self.tokenizer, text), language_ids,
                                source_language_ids)

    def _source_ids(self, piece_ids: tf.RaggedTensor, language_ids: Optional[tf.Tensor] = None,
                    source_language_ids: Optional[tf.Tensor] = None) -> tuple[tf.Tensor, tf.Tensor]:
        """The search's input: the `model_input_ids` of `piece_ids` (after the row's token of
        `language_ids` with the "source" placement, or of `source_language_ids`, its source
        language's) plus EOS, 0-padded; and `[batch, 1]` True for empty sources (a token alone is
        none)."""
        piece_ids = model_input_ids(piece_ids, self.model.config.vocab_size,
                                 self.model.config.max_length)
        empty = tf.equal(piece_ids.row_lengths(), 0)[:, None]
        if language_ids is not None and self.languages.placement == "source":
            piece_ids = self.languages.with_source_tokens(
                piece_ids, language_ids)[:, :self.model.config.max_length - 1]
        if source_language_ids is not None:
            piece_ids = _prepended(source_language_ids,
                                   piece_ids)[:, :self.model.config.max_length - 1]
        eos = tf.fill([piece_ids.nrows(), 1], EOS_ID)
        source_ids = tf.concat([piece_ids, eos], axis=1).to_tensor(default_value=PAD_ID)
        return source_ids, empty

    def _search(self, source: tuple[tf.Tensor, tf.Tensor], language_ids: Optional[tf.Tensor] = None,
                prefix: Optional[tf.Tensor] = None, constraints: Optional[tf.Tensor] = None
                ) -> dict[str, tf.Tensor]:
        """The search over the sources of `source` (the search's input and which rows are empty,
        `_source_ids`), its XLA-compiled form with `jit_compile`. `language_ids` are each row's
        target-language token (`_token_ids`; None: a model of one); `prefix`, optional `[batch]`,
        the target texts every hypothesis of the row starts with; `constraints`, optional
        `[batch, C, L]`, target phrases' ids: the constrained search (a beam search of the settings'
        beam size, also where the settings sample).

        It returns `source_ids` (the search's input, `_source_ids`), the best's `ids` and `score`,
        the n-best `nbest_ids` and `nbest_scores` (an empty source's: PAD and 0), the ids without
        the language tokens (`_without_language_ids`); `searched_ids`, the best's ids as searched
        (the language tokens kept); with `constraints`, the best's `unplaced` `[batch, C]` (every
        phrase of an empty source).
        """
        source_ids, empty = source
        prefix_ids = self._prefix_ids(prefix, language_ids)
        search, searched_source = run_search_graph, source_ids
        if self.jit_compile:
            # XLA compiles once per input shape: padded widths bound the shapes a server sees.
            search = run_search_xla
            searched_source = self._padded_width(source_ids)
            prefix_ids = None if prefix_ids is None else self._padded_width(prefix_ids)
            if constraints is not None:
                constraints = tf.transpose(self._padded_width(tf.transpose(
                    self._padded_width(constraints), [0, 2, 1])), [0, 2, 1])
        models = (self.model, *self.ensemble) if self.ensemble else self.model
        settings = self.settings
        if constraints is not None and settings.sampling:
            settings = dataclasses.replace(settings, sampling=False)
        result = search(models, searched_source, settings, prefix_ids=prefix_ids,
                        shortlist=self.shortlist, static_shapes=self.jit_compile,
                        constraints=constraints)
        ids = tf.where(empty[:, :, None], PAD_ID, result.ids)
        scores = tf.where(empty, 0.0, result.scores)
        found = {"source_ids": source_ids,
                 "ids": self._without_language_ids(ids[:, 0], language_ids),
                 "score": scores[:, 0], "nbest_ids": self._without_language_ids(ids, language_ids),
                 "nbest_scores": scores, "searched_ids": ids[:, 0]}
        if constraints is not None:
            present = tf.reduce_any(tf.not_equal(constraints, PAD_ID), axis=2)
            found["unplaced"] = (result.unplaced[:, 0] | empty) & present
        return found

    def _padded_width(self, ids: tf.Tensor) -> tf.Tensor:
        """`ids` `[..., length]` PAD-padded to the next multiple of `XLA_WIDTH_STEP` (at most
        the model's `max_length`, or `length` if longer)."""
        length = tf.shape(ids)[-1]
        width = tf.maximum(length, tf.minimum((length + XLA_WIDTH_STEP - 1) // XLA_WIDTH_STEP
                                              * XLA_WIDTH_STEP, self.model.config.max_length))
        padding = [[0, 0]] * (ids.shape.rank - 1) + [[0, width - length]]
        return tf.pad(ids, padding, constant_values=PAD_ID)


class IntoLanguage:
    """A `TranslationModule` of several target languages (`TranslationModule.languages`) asked for
    one, `language`, in every call (and, of a model that reads the source language too,
    `source_language`): the calls of a `TranslationModule` of one (`translate`, `translate_ids`,
    `translate_nbest`, `translate_with_prefix`, `translate_with_terms`,
    `translate_with_scores`, `translate_with_alignment`), its `tokenizer`
    and `model`. The languages are checked by `asked_languages` (a `LanguageError` names one
    the model does not have, or one missing or not wanted); "" asks for none where the
    language is optional (`RunLanguages.optional`: the texts as they are)."""

    def __init__(self, translator: TranslationModule, language: str,
                 source_language: Optional[str] = None):
        asked = asked_languages(translator.languages, language, source_language)
        self.translator, self.language, self.source_language = (translator, asked.target,
                                                                 asked.source)
        self.tokenizer, self.model = translator.tokenizer, translator.model

    def translate(self, text: tf.Tensor) -> dict[str, tf.Tensor]:
        """`TranslationModule.translate` into the language."""
        return self.translator.translate(text, *self._languages(text))

    def translate_ids(self, source_ids: tf.Tensor) -> dict[str, tf.Tensor]:
        """`TranslationModule.translate_ids` into the language."""
        return self.translator.translate_ids(source_ids, *self._languages(source_ids))

    def translate_nbest(self, text: tf.Tensor) -> dict[str, tf.Tensor]:
        """`TranslationModule.translate_nbest` into the language."""
        return self.translator.translate_nbest(text, *self._languages(text))

    def translate_with_prefix(self, text: tf.Tensor, prefix: tf.Tensor) -> dict[str, tf.Tensor]:
        """`TranslationModule.translate_with_prefix` into the language."""
        return self.translator.translate_with_prefix(text, prefix, *self._languages(text))

    def translate_with_terms(self, text: tf.Tensor, terms: tf.Tensor) -> dict[str, tf.Tensor]:
        """`TranslationModule.translate_with_terms` into the language."""
        return self.translator.translate_with_terms(text, terms, *self._languages(text))

    def translate_with_scores(self, text: tf.Tensor) -> dict[str, tf.Tensor]:
        """`TranslationModule.translate_with_scores` into the language."""
        return self.translator.translate_with_scores(text, *self._languages(text))

    def translate_with_alignment(self, text: tf.Tensor) -> dict[str, tf.Tensor]:
        """`TranslationModule.translate_with_alignment` into the language."""
        return self.translator.translate_with_alignment(text, *self._languages(text))

    def _languages(self, rows: tf.Tensor) -> tuple[tf.Tensor, ...]:
        """The language once per row of `rows`, and the source language's where given."""
        count = tf.shape(rows)[:1]
        return (tf.fill(count, self.language),) + (
            () if self.source_language is None else (tf.fill(count, self.source_language),))


def _signature(method: Callable[..., dict[str, tf.Tensor]],
               *input_signature: tf.TensorSpec) -> tf.types.experimental.PolymorphicFunction:
    """`method` as a signature: a graph function of the given inputs (no autograph)."""
    return tf.function(method, input_signature=list(input_signature), autograph=False)


def _prepended(language_ids: tf.Tensor, piece_ids: tf.RaggedTensor) -> tf.RaggedTensor:
    """Each row of `piece_ids` after its token of `language_ids` `[batch]`."""
    return tf.concat([tf.cast(language_ids, tf.int32)[:, None], tf.cast(piece_ids, tf.int32)],
                     axis=1)


def truncated_sources(tokenizer: SubwordTokenizer, texts: Sequence[bytes | str],
                      max_length: int, batch_size: int = 10_000,
                      languages: Optional[RunLanguages] = None,
                      language: Optional[str] = None,
                      source_language: Optional[str] = None) -> list[int]:
    """The indices of the `texts` that a `TranslationModule` of a model of `max_length` cuts to
    their first `max_length - 1` subwords (the search's source holds those and EOS): the
    texts of more pieces, counted as the `TranslationModule` counts them, `batch_size` texts at a
    time. Of a model of several target languages (`languages`) asked for `language`, with
    the "source" placement, the language token counts as a piece
    (`RunLanguages.with_source_tokens`), as does the token of `source_language` of a model that
    reads it."""
    indices: list[int] = []
    for start in range(0, len(texts), batch_size):
        piece_ids = without_special_ids(text_piece_ids(
            tokenizer, tf.constant(list(texts[start:start + batch_size]), tf.string)))
        if languages is not None and languages.placement == "source":
            token = languages.token_id(language)
            piece_ids = languages.with_source_tokens(
                piece_ids, tf.fill([piece_ids.nrows()], -1 if token is None else token))
        lengths = piece_ids.row_lengths().numpy() + int(source_language is not None)
        indices += (np.flatnonzero(lengths > max_length - 1) + start).tolist()
    return indices
