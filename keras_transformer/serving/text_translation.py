"""Translating many lines of text with an export or an in-process `TranslationModule`: the same
calls for both, whatever computes them (a SavedModel, a `TranslationModule`, or any backend that
gives the functions, e.g. `ctranslate2_export.CTranslate2Search`), n-best lists as text, batches
sorted by length under a budget."""
from __future__ import annotations

import contextlib
import functools
import logging
import os
from pathlib import Path
from typing import TYPE_CHECKING, Callable, Iterator, Optional, Sequence

import numpy as np
import tensorflow as tf

from keras_transformer.data.text_files import line_list
from keras_transformer.data.sentencepiece_pair import load_tokenizer
from keras_transformer.data.tokenizer import (SubwordTokenizer, native_info_lines_hidden,
                                              text_piece_ids)
from keras_transformer.decoding.translator import (TERM_SEPARATOR, IntoLanguage, TranslationModule,
                                                  truncated_sources)
from keras_transformer.config import PAD_ID

if TYPE_CHECKING:
    from keras_transformer.data.languages import RunLanguages
    from keras_transformer.model import Transformer


@contextlib.contextmanager
def quiet_export_loading() -> Iterator[None]:
    """Hides what loading an export prints that is no news: sentencepiece's INFO line as it
    parses the model (`native_info_lines_hidden`), and TensorFlow's warning, for each function
    it imports, that ops with custom gradients have no saved gradients (exports are saved
    without them on purpose: they only infer)."""
    def news(record: logging.LogRecord) -> bool:
        return "with ops with unsaved custom gradients" not in record.getMessage()

    absl = logging.getLogger("absl")  # the logger TensorFlow's SavedModel loader warns through
    absl.addFilter(news)
    try:
        with native_info_lines_hidden():
            yield
    finally:
        absl.removeFilter(news)


class LineTranslator:
    """Lines of text (Python bytes) in, translations out, batch by batch, whatever computes
    them: the command lines' side of a backend. The backend is a `decoding.TranslationModule` (the
    graph module of tensor signatures that an export saves), the SavedModel it was saved as,
    or a CTranslate2 model, each giving the same calls.

    Best and n-best translations of strings, through `translate_text` (`[batch]` strings ->
    `translation`, `score`), `translate_ids` (`[batch, len]` ids -> `nbest_ids`,
    `nbest_scores`) with `tokenizer` for the n-best lists' text, and `translate_prefixed`
    (texts and prefixes -> `translation`, `score`; None for exports older than it) and
    `translate_terms` (texts and their tab-separated target phrases -> `translation`, `score`,
    `missing_terms`; None for backends without a constrained search) and `translate_scored`
    (texts -> `translation`, `score`, `confidence`, `words`, `word_scores`; None for backends
    without it) and `translate_aligned` (texts -> `translation`, `score`, `target_pieces`,
    `source_pieces`, `alignment`; None for backends without it); `model`: the in-process
    model the functions search with (a `TranslationModule`'s; None for an export); `owner`
    is kept alive for them (a loaded SavedModel, or the `TranslationModule` whose methods they are);
    `max_length`: the model's, whose sources longer than `max_length - 1` subwords are cut
    (`truncated` names them; None: not known, as for exports without a provenance record);
    `languages` and `language`: of a model of several target languages, its languages and the
    one asked for (with the "source" placement its token is one of those subwords);
    `source_language`: the source texts' language, of a model that reads it (its token is one
    more subword)."""

    def __init__(self, translate_text: Callable[[tf.Tensor], dict],
                 translate_ids: Callable[[tf.Tensor], dict], tokenizer: SubwordTokenizer,
                 owner: object = None,
                 translate_prefixed: Optional[Callable[[tf.Tensor, tf.Tensor], dict]] = None,
                 max_length: Optional[int] = None, languages: Optional[RunLanguages] = None,
                 language: Optional[str] = None, source_language: Optional[str] = None,
                 translate_terms: Optional[Callable[[tf.Tensor, tf.Tensor], dict]] = None,
                 translate_scored: Optional[Callable[[tf.Tensor], dict]] = None,
                 translate_aligned: Optional[Callable[[tf.Tensor], dict]] = None,
                 model: Optional[Transformer] = None):
        self._owner = owner
        self._translate_aligned = translate_aligned
        self.model = model
        self._translate_terms = translate_terms
        self._translate_scored = translate_scored
        self.max_length = max_length
        self.languages, self.language = languages, language
        self.source_language = source_language
        self._translate_text = translate_text
        self._translate_ids = translate_ids
        self._translate_prefixed = translate_prefixed
        self.tokenizer = tokenizer

    @functools.cached_property
    def beam_size(self) -> int:
        """The hypotheses the search keeps (its n-best lists' length), read off a translation:
        an export's settings are fixed in its graph."""
        return int(self._translate_ids(tf.constant([[PAD_ID]], tf.int32))["nbest_ids"].shape[1])

    @classmethod
    def from_saved_model(cls, version: str | os.PathLike, max_length: Optional[int] = None,
                         target_language: Optional[str] = None,
                         languages: Optional[RunLanguages] = None,
                         source_language: Optional[str] = None) -> "LineTranslator":
        """The SavedModel in the directory `version` (its search settings are fixed), of a
        model of `max_length` (None: not known); of a model of several target languages
        (`languages`), translating into `target_language` (each signature's `target_language`
        input) from `source_language` where the model reads it (`source_language`)."""
        version = Path(version)
        with quiet_export_loading():
            loaded = tf.saved_model.load(os.fspath(version))
        signatures = loaded.signatures

        def call(signature: str, rows: tf.Tensor, **inputs: tf.Tensor) -> dict:
            if target_language is not None:
                inputs["target_language"] = tf.fill(tf.shape(rows)[:1], target_language)
            if source_language is not None:
                inputs["source_language"] = tf.fill(tf.shape(rows)[:1], source_language)
            return signatures[signature](**inputs)

        prefixed = with_terms = scored = aligned = None
        if "translate_with_prefix" in signatures:  # not in exports written before it
            def prefixed(text: tf.Tensor, prefix: tf.Tensor) -> dict:
                return call("translate_with_prefix", text, text=text, prefix=prefix)
        if "translate_with_terms" in signatures:
            def with_terms(text: tf.Tensor, terms: tf.Tensor) -> dict:
                return call("translate_with_terms", text, text=text, terms=terms)
        if "translate_with_scores" in signatures:
            def scored(text: tf.Tensor) -> dict:
                return call("translate_with_scores", text, text=text)
        if "translate_with_alignment" in signatures:
            def aligned(text: tf.Tensor) -> dict:
                return call("translate_with_alignment", text, text=text)
        return cls(lambda text: call("serving_default", text, text=text),
                   lambda ids: call("translate_ids", ids, source_ids=ids),
                   load_tokenizer(version / "assets"), owner=loaded,
                   translate_prefixed=prefixed, max_length=max_length, languages=languages,
                   language=target_language, source_language=source_language,
                   translate_terms=with_terms, translate_scored=scored,
                   translate_aligned=aligned)

    @classmethod
    def from_translator(cls, translator: TranslationModule | IntoLanguage) -> "LineTranslator":
        """An in-process `TranslationModule` (what its export would compute), or one of several
        target languages asked for one (`IntoLanguage`)."""
        into = isinstance(translator, IntoLanguage)
        return cls(translator.translate, translator.translate_ids, translator.tokenizer,
                   owner=translator, translate_prefixed=translator.translate_with_prefix,
                   max_length=translator.model.config.max_length,
                   languages=translator.translator.languages if into else None,
                   language=translator.language if into else None,
                   source_language=translator.source_language if into else None,
                   translate_terms=translator.translate_with_terms,
                   translate_scored=translator.translate_with_scores,
                   translate_aligned=translator.translate_with_alignment,
                   model=translator.model)

    def truncated(self, texts: Sequence[bytes]) -> list[int]:
        """The indices of the `texts` translated from their first `max_length - 1` subwords
        only (`translator.truncated_sources`; none when `max_length` is not known)."""
        if self.max_length is None:
            return []
        return truncated_sources(self.tokenizer, texts, self.max_length,
                                 languages=self.languages, language=self.language,
                                 source_language=self.source_language)

    @property
    def takes_prefixes(self) -> bool:
        """Whether `best` can force prefixes (exports written before that signature cannot)."""
        return self._translate_prefixed is not None

    @property
    def takes_terms(self) -> bool:
        """Whether `best_lines` can constrain translations to terms (a SavedModel export, a
        run)."""
        return self._translate_terms is not None

    @property
    def takes_alignment(self) -> bool:
        """Whether `best_lines` can give word alignments (a run; a SavedModel, CTranslate2 or
        LiteRT export written by this version)."""
        return self._translate_aligned is not None

    @property
    def takes_scores(self) -> bool:
        """Whether `best_lines` can give word scores (a SavedModel export, a run)."""
        return self._translate_scored is not None

    def best_function(self, terms: bool = False, scores: bool = False, prefixes: bool = False,
                      alignment: bool = False) -> Callable[..., dict]:
        """The backend's function of a batch of best translations (its inputs `[batch]` strings,
        its outputs a dict of tensors), the first one asked for: with `terms`, of the texts and
        their target phrases separated by tabs (-> `translation`, `score`, `missing_terms`); with
        `scores`, of the texts, with how sure the model is (-> `translation`, `score`,
        `confidence`, `words`, `word_scores`); with `prefixes`, of the texts and their prefixes
        (-> `translation`, `score`); with `alignment`, of the texts, with the source piece each
        target piece is aligned to (-> `translation`, `score`, `target_pieces`, `source_pieces`,
        `alignment`); with none asked for, of the texts alone (-> `translation`, `score`). A
        ValueError when the backend has none (`takes_terms`, `takes_scores`, `takes_prefixes`)."""
        if terms:
            function, lacking = self._translate_terms, (
                "terms: this model has no constrained search (a SavedModel exported by this "
                "version or a run directory has)")
        elif scores:
            function, lacking = self._translate_scored, (
                "scores: this model gives no word scores (a SavedModel exported by this "
                "version or a run directory does)")
        elif prefixes:
            function, lacking = self._translate_prefixed, (
                "prefixes: this export has no translate_with_prefix signature; export it "
                "again with this version")
        elif alignment:
            function, lacking = self._translate_aligned, (
                "alignment: this model gives no word alignment (a run directory, or a "
                "SavedModel, CTranslate2 or LiteRT export written by this version, does)")
        else:
            return self._translate_text
        if function is None:
            raise ValueError(lacking)
        return function

    def best(self, texts: Sequence[bytes], prefixes: Optional[Sequence[bytes]] = None
             ) -> tuple[list[bytes], list[float]]:
        """The best translation (UTF-8) and score of each text, starting with its prefix when
        `prefixes` are given (b"" leaves a text free); invalid UTF-8 is decoded with U+FFFD
        replacements, an empty text gets an empty translation and a `blank` one itself."""
        columns = [searched(texts)] if prefixes is None else [searched(texts), prefixes]
        outputs = self.best_function(prefixes=prefixes is not None)(
            *(tf.constant(list(column), tf.string) for column in columns))
        translations = outputs["translation"].numpy().tolist()
        return ([text if is_blank(text) else translation
                 for text, translation in zip(texts, translations)],
                outputs["score"].numpy().tolist())

    def nbest(self, texts: Sequence[bytes], k: int) -> list[list[tuple[bytes, float]]]:
        """The `k` best (translation, score) pairs of each text, best first (a `blank` text's
        translations: itself, as an empty text's are empty)."""
        if not 1 <= k <= self.beam_size:
            raise ValueError(f"--nbest: {k} is not between 1 and the beam size "
                             f"{self.beam_size}")
        ids = text_piece_ids(self.tokenizer, tf.constant(searched(texts), tf.string)).to_tensor(
            default_value=PAD_ID)
        if ids.shape[1] == 0:  # every text empty
            ids = tf.fill([len(texts), 1], PAD_ID)
        outputs = self._translate_ids(tf.cast(ids, tf.int32))
        hypotheses = outputs["nbest_ids"][:, :k]
        words = self.tokenizer.detokenize(tf.reshape(hypotheses, [-1, hypotheses.shape[-1]]))
        words = np.reshape(words.numpy(), [len(texts), k])
        scores = outputs["nbest_scores"][:, :k].numpy()
        return [list(zip([text] * k if is_blank(text) else row.tolist(), row_scores.tolist()))
                for text, row, row_scores in zip(texts, words, scores)]


def is_blank(text: bytes) -> bool:
    """Whether `text` is whitespace alone (spaces, tabs, no-break spaces, ...), not empty: a
    line with nothing to translate, passed through as it is (as an empty line gives an empty
    one) rather than given to the model, which would invent a sentence."""
    return bool(text) and not text.decode("utf-8", errors="replace").strip()


def searched(texts: Sequence[bytes]) -> list[bytes]:
    """`texts` as the model is given them: a `blank` one as an empty one."""
    return [b"" if is_blank(text) else text for text in texts]


def closest_lines(translator: LineTranslator, lines: Sequence[bytes],
                  references: Sequence[bytes], similarity: Callable[[str, str], float],
                  batch_size: int = 64, batch_tokens: int = 6000) -> list[str]:
    """Of each line of `lines`, its n-best list by `translator` (a beam search: its every hypothesis
    is a candidate), the translation most similar to the line's reference in `references` (raw
    reference lines, one per input line), as an `output_line`, one output line per input line: Kim &
    Rush's (2016) sequence-level interpolation, the distillation target between the teacher's best
    translation and the reference. A tie goes to the better-scored translation.

    `lines` are raw input lines (possibly invalid UTF-8: decoded with replacements). `similarity`
    takes (translation, reference) to a number, higher is closer (e.g. `evaluation.sentence_bleu`).
    A batch holds at most `batch_size` lines and at most `batch_tokens` padded words.
    """
    if len(references) != len(lines):
        raise ValueError(f"references: {len(references)} for {len(lines)} lines")
    outputs = [""] * len(lines)
    for batch in length_batches([len(line.split()) for line in lines], batch_size,
                                batch_tokens):
        nbest = translator.nbest([lines[index] for index in batch], translator.beam_size)
        for index, hypotheses in zip(batch, nbest):
            reference = output_line(references[index])
            candidates = [output_line(text) for text, _ in hypotheses]
            outputs[index] = max(candidates, key=lambda text: similarity(text, reference))
    return outputs


def length_batches(lengths: Sequence[int], batch_size: int,
                   batch_tokens: int) -> Iterator[list[int]]:
    """Indices of texts in batches sorted by length: at most `batch_size` texts and, padded
    to the batch's longest, at most `batch_tokens` tokens (a longer text goes alone)."""
    batch: list[int] = []
    for index in np.argsort(lengths, kind="stable").tolist():
        if batch and (len(batch) == batch_size
                      or (len(batch) + 1) * max(lengths[index], 1) > batch_tokens):
            yield batch
            batch = []
        batch.append(index)
    if batch:
        yield batch


def truncation_warning(name: str, line_numbers: Sequence[int], max_length: int,
                       done: str = "translated") -> str:
    """The warning that the lines `line_numbers` (1-based, ascending) of the input `name` are
    `done` ("translated", "scored") from their first `max_length - 1` subwords only
    (`truncated_sources`)."""
    count = len(line_numbers)
    return (f"{name}: {count:,} line{'s' if count > 1 else ''} longer than the model takes "
            f"(max_length {max_length}), {done} from {'their' if count > 1 else 'its'} "
            f"first {max_length - 1} subwords: {line_list(line_numbers)}")


def output_line(text: bytes) -> str:
    """A translation as one output line: invalid UTF-8 (a byte-level vocabulary can produce
    it) decoded with U+FFFD replacements, line breaks (LF, CR) as spaces, so that output line N
    stays input line N's translation."""
    return text.decode("utf-8", errors="replace").replace("\r", " ").replace("\n", " ")


def best_lines(translator: LineTranslator, lines: Sequence[bytes], batch_size: int = 64,
               batch_tokens: int = 6000, prefixes: Optional[Sequence[bytes]] = None,
               on_batch: Optional[Callable[[int], None]] = None,
               terms: Optional[Sequence[str]] = None,
               on_missing: Optional[Callable[[int, list[str]], None]] = None,
               on_scores: Optional[Callable[[int, dict], None]] = None,
               on_alignment: Optional[Callable[[int, dict], None]] = None) -> list[str]:
    """The best translation by `translator` of each of `lines` (raw input lines, possibly invalid
    UTF-8: decoded with replacements) as an `output_line`, one output line per input line, in the
    lines' order, translated in `length_batches` of the lines' word counts; an empty line gives an
    empty line, a `blank` one itself (its confidence record, its missing terms: an empty line's).

    A batch holds at most `batch_size` lines and at most `batch_tokens` padded words; `on_batch` is
    called with each batch's size after it is translated. `prefixes`, optional, one per line, are
    the start forced on its translation. `terms`, optional, one per line, are the target phrases its
    translation must contain (tab-separated); `on_missing` is called with a line's index and the
    terms its translation lacks. `on_scores`, when given, is called with each line's index and its
    translation's confidence record (`TranslationModule.translate_with_scores`); with `terms`, a
    record of the search's score alone (`{"score": score}`: the constrained search gives no
    confidence; `trainers.translate` scores its translations as kt-score does). `on_alignment`,
    when given (alone), is called with each line's index and its `target_pieces`,
    `source_pieces` (as text, padding left out) and `alignment`
    (`TranslationModule.translate_with_alignment`).
    """
    translate = translator.best_function(terms=terms is not None, scores=on_scores is not None,
                                         prefixes=prefixes is not None,
                                         alignment=on_alignment is not None)
    extra = terms if terms is not None else prefixes if on_scores is None else None
    columns = [searched(lines)] if extra is None else [searched(lines), extra]
    outputs = [""] * len(lines)
    for batch in length_batches([len(line.split()) for line in lines], batch_size,
                                batch_tokens):
        found = translate(*(tf.constant([column[index] for index in batch], tf.string)
                            for column in columns))
        for index, text in zip(batch, found["translation"].numpy().tolist()):
            outputs[index] = output_line(lines[index] if is_blank(lines[index]) else text)
        if terms is not None:
            for index, lacking in zip(batch, _missing_terms(found)):
                if lacking and on_missing is not None:
                    on_missing(index, lacking)
            for index, score in zip(batch, found["score"].numpy().tolist()):
                if on_scores is not None:
                    on_scores(index, {"score": score})
        elif on_scores is not None:
            for index, record in zip(batch, _confidence_records(found)):
                on_scores(index, record)
        elif on_alignment is not None:
            for index, record in zip(batch, _alignment_records(found)):
                on_alignment(index, record)
        if on_batch is not None:
            on_batch(len(batch))
    return outputs


def _alignment_records(outputs: dict) -> list[dict]:
    """Each translation's pieces, its source's pieces (padding left out) and the source piece
    each target piece is aligned to."""
    records = []
    for target, source, alignment in zip(outputs["target_pieces"].numpy().tolist(),
                                         outputs["source_pieces"].numpy().tolist(),
                                         outputs["alignment"].numpy().tolist()):
        target = [piece.decode("utf-8", "replace") for piece in target if piece]
        records.append({"target_pieces": target,
                        "source_pieces": [piece.decode("utf-8", "replace")
                                          for piece in source if piece],
                        "alignment": alignment[:len(target)]})
    return records


def _missing_terms(outputs: dict) -> list[list[str]]:
    """The phrases each translation of a batch with terms does not contain (its
    `missing_terms`: the length limit came first)."""
    return [[phrase for phrase in row.decode("utf-8").split(TERM_SEPARATOR) if phrase]
            for row in outputs["missing_terms"].numpy().tolist()]


def _confidence_records(outputs: dict) -> list[dict]:
    """How sure the model is of each translation of a batch with scores:
    `{"score": search score, "sentence": confidence, "words": [[word, score], ...]}`
    (`TranslationModule.translate_with_scores`)."""
    return [{"score": score, "sentence": sentence,
             "words": [[word.decode("utf-8"), value]
                       for word, value in zip(words, values) if word]}
            for score, sentence, words, values in zip(
                outputs["score"].numpy().tolist(), outputs["confidence"].numpy().tolist(),
                outputs["words"].numpy().tolist(), outputs["word_scores"].numpy().tolist())]
