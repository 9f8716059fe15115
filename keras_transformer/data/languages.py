"""Several language pairs in one model: pairs as data, target-language tokens, a vocabulary
balanced over the languages.

A pair is written `SRC-TGT` (`en-de`). The target language is chosen by a token reserved in
the shared vocabulary, `<2de>` (`language_token`): one piece with an id of its own (a
SentencePiece user-defined symbol, right after the special ids), never split. Where it goes is
the run's placement, one of `PLACEMENTS`:

- "source": first in the source, [<2de>, x1, ..., EOS] (Johnson et al., 2017); the decoder
  starts from BOS as a one-pair model's does.
- "target": first in the target, after BOS: the decoder reads [BOS, <2de>, y1, ...] and is not
  trained to predict the token (its label is padding); a translation is forced to start with
  it (a target prefix, as CTranslate2's `target_prefix`).

A model of several target languages records them, each its token's piece and id, and the
placement (`RunLanguages`, `languages.json` in the run directory): a run of several pairs
kt-train trained, or a multi-target model kt-import imported (an OPUS-MT model's `>>fra<<`
pieces, the "source" placement; there the language is optional, as a text may start with its
own token). `RunLanguages.with_source_tokens` puts the tokens first in the sources, in the
graph; `LanguageTokenizer` puts the token of one target language where the placement says
around the run's tokenizer (kt-train's attention plots of a pair's dev sentences).
`asked_languages` is the one check of the languages a request names (the target, and the
source of a model that reads it), for the API, the command lines and every export's functions.
"""
from __future__ import annotations

import re
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any, Optional

import sentencepiece
import tensorflow as tf

from keras_transformer.config import PLACEMENTS
from keras_transformer.data.prepare import ParallelSource, drawn
from keras_transformer.data.tokenizer import SubwordTokenizer
_CODE = "[A-Za-z][A-Za-z0-9_]*"
_PAIR = re.compile(f"({_CODE})-({_CODE})")


def language_token(language: str) -> str:
    """The vocabulary piece that asks for a translation into `language`: `<2de>` for de."""
    return f"<2{language}>"


@dataclass(frozen=True)
class LanguagePair:
    """A translation direction: source and target language codes (letters, digits, `_`)."""

    source: str
    target: str

    @property
    def name(self) -> str:
        """`SRC-TGT`, e.g. `en-de`."""
        return f"{self.source}-{self.target}"

    @classmethod
    def parse(cls, text: str) -> "LanguagePair":
        """The pair `SRC-TGT` names (ValueError quoting `text` otherwise)."""
        match = _PAIR.fullmatch(text)
        if not match or match.group(1) == match.group(2):
            raise ValueError(f"{text!r} is not a language pair: expected SRC-TGT, two "
                             "different language codes of letters, digits and _ (e.g. en-de)")
        return cls(match.group(1), match.group(2))


def target_languages(pairs: Sequence[LanguagePair]) -> list[str]:
    """The languages `pairs` translate into, sorted: each has a token."""
    return sorted({pair.target for pair in pairs})


def reserved_tokens(pairs: Sequence[LanguagePair]) -> list[str]:
    """The pieces a vocabulary for `pairs` reserves: one `language_token` per target
    language, in `target_languages` order (their ids follow the special ids in this order)."""
    return [language_token(language) for language in target_languages(pairs)]


def language_token_ids(tokenizer: SubwordTokenizer, languages: Sequence[str],
                       where: str) -> dict[str, int]:
    """The id of each language's token in `tokenizer`'s vocabulary; ValueError naming
    `where` (the vocabulary's place) and the token when one is not a piece of its own."""
    processor = sentencepiece.SentencePieceProcessor(model_proto=tokenizer.model_proto)
    ids = {}
    for language in languages:
        token = language_token(language)
        ids[language] = processor.piece_to_id(token)
        if ids[language] == processor.unk_id():
            raise ValueError(f"{where} has no piece {token!r}: a vocabulary for these pairs "
                             "reserves one token per target language (learn it with them, or "
                             "use a new --output-dir)")
    return ids


def sample_language_sentences(sides: Sequence[tuple[str, ParallelSource, int]],
                              sentences: int, seed: int) -> Iterator[str]:
    """The texts a vocabulary shared by several languages is learned from, at most `sentences` in
    all, each language's share the same: `sentences // L` of each of the L languages, a uniform
    sample of all its lines drawn from `seed` (a language with fewer lines is taken whole), empty
    lines left out; one language after the other, in sorted order.

    `sides` holds (language, source, side) for every side of every corpus: `side` 0 for the pairs'
    source texts, 1 for their targets.
    """
    languages = sorted({language for language, _, _ in sides})
    wanted = max(1, sentences // len(languages))
    for number, language in enumerate(languages):
        mine = [(source, side) for name, source, side in sides if name == language]
        count = sum(source.count() for source, _ in mine)
        lines = (pair[side] for source, side in mine for pair in source.pairs())
        yield from (text for text in drawn(lines, count, wanted, [seed, number]) if text)


@dataclass(frozen=True)
class RunLanguages:
    """The target languages of a model of several (`languages.json` in its run directory):
    each language's token, its piece (`pieces`, e.g. `<2de>` or `>>fra<<`) and its id
    (`token_ids`), and where it goes (`placement`, one of `PLACEMENTS`). A run of several
    pairs kt-train trained records the temperature its pairs were sampled at and per pair its
    languages, its batches per epoch and its share of the training batches (`pairs`; an
    imported model has neither). `optional`: a text may be translated without a language, as
    it is (an imported multi-target model, whose texts may start with their own token): the
    language "" asks for none. `source_language_token`: the model's languages are its source
    languages too, and a source starts with its own language's token (NLLB-200, M2M-100: a
    request names both languages)."""

    placement: str
    token_ids: dict[str, int]
    pieces: dict[str, str]
    temperature: Optional[float] = None
    pairs: list[dict[str, Any]] = field(default_factory=list)
    optional: bool = False
    source_language_token: bool = False

    def __post_init__(self):
        if self.placement not in PLACEMENTS:
            raise ValueError(f"placement: {self.placement!r} is not one of "
                             f"{', '.join(PLACEMENTS)}")
        if set(self.pieces) != set(self.token_ids):
            raise ValueError(f"pieces: for the languages {sorted(self.pieces)}, but token ids "
                             f"for {sorted(self.token_ids)}")
        if self.optional and self.placement != "source":
            raise ValueError("optional: a language can be left out with the \"source\" "
                             "placement only")
        if self.source_language_token and self.placement != "target":
            raise ValueError("source_language_token: the source language's token goes first "
                             "in the source with the \"target\" placement only")

    def code(self, language: str) -> str:
        """The model's code `language` names: itself, or the one code of the model that it
        starts (an ISO 639-3 code before a script, `eng` for `eng_Latn`); a ValueError naming
        the codes it could mean when there are several (`zho`: `zho_Hans`, `zho_Hant`), and
        `language` itself when it names none (`token_id` refuses it)."""
        if language in self.token_ids:
            return language
        meant = sorted(code for code in self.token_ids if code.startswith(f"{language}_"))
        if len(meant) > 1:
            raise ValueError(f"language {language!r} is ambiguous: the model has "
                             f"{', '.join(meant)}")
        return meant[0] if meant else language

    def token_id(self, language: str) -> Optional[int]:
        """The id of the token asking for `language`; None for "" when the language is
        `optional` (the text as it is); a ValueError naming `language` and the model's target
        languages when the model has no token for it."""
        if language == "" and self.optional:
            return None
        if language not in self.token_ids:
            raise ValueError(f"target language {language!r}: the model translates into "
                             f"{', '.join(sorted(self.token_ids))} only")
        return self.token_ids[language]

    def source_token_id(self, language: str) -> int:
        """The id of the token a source in `language` starts with (`source_language_token`);
        a ValueError naming `language` and the model's languages when it has no token for it,
        or naming the model's want when it reads no source language."""
        if not self.source_language_token:
            raise ValueError(f"source language {language!r}: the model reads no source "
                             "language (only the target language is asked for)")
        if language not in self.token_ids:
            raise ValueError(f"source language {language!r}: the model translates from "
                             f"{', '.join(sorted(self.token_ids))} only")
        return self.token_ids[language]

    def with_source_tokens(self, piece_ids: tf.RaggedTensor,
                           language_ids: tf.Tensor) -> tf.RaggedTensor:
        """Source `piece_ids` `[batch, (length)]` as the model reads them with the "source"
        placement: a row whose token of `language_ids` `[batch]` is one (not -1, which asks for
        no language) starts with it, in place of a language token the text starts with (asked
        for fra, `>>deu<< Hello` reads as `>>fra<< Hello`: the language asked for wins); the
        other rows as they are."""
        piece_ids, language_ids = tf.cast(piece_ids, tf.int32), tf.cast(language_ids, tf.int32)
        asked = language_ids >= 0
        first = tf.reduce_max(piece_ids[:, :1], axis=1)  # the int32 minimum for an empty row
        own = tf.reduce_any(first[:, None] == tf.constant(
            sorted(self.token_ids.values()), tf.int32)[None], axis=1)
        # Each output row gathered from its input row at one offset (plain gathers: a ragged
        # concatenation traces several times slower): the token first where one is asked for,
        # the text's own token skipped where it is replaced.
        added, skipped = tf.cast(asked, tf.int64), tf.cast(asked & own, tf.int64)
        positions = tf.ragged.range(piece_ids.row_lengths() - skipped + added)
        rows, position = positions.value_rowids(), positions.flat_values
        read = tf.gather(piece_ids.row_starts() + skipped - added, rows) + position
        texts = tf.gather(tf.concat([[0], piece_ids.values], 0), read + 1)  # read >= -1
        return positions.with_flat_values(tf.where(
            (position == 0) & tf.gather(asked, rows), tf.gather(language_ids, rows), texts))

    def pair_prefixes(self, pair: LanguagePair) -> tuple[list[int], list[int]]:
        """The ids a sentence pair of `pair` starts with as the model reads it, (source,
        target): the target language's token first in the source ("source" placement) or in
        the target ("target"), and the source language's first in the source where the model
        reads it (`source_language_token`)."""
        target = [self.token_ids[pair.target]]
        if self.placement == "source":
            return target, []
        source = [self.source_token_id(pair.source)] if self.source_language_token else []
        return source, target

    def to_dict(self) -> dict[str, Any]:
        """The JSON record."""
        return {"placement": self.placement, "temperature": self.temperature,
                "tokens": {language: {"piece": self.pieces[language], "id": token_id}
                           for language, token_id in sorted(self.token_ids.items())},
                "pairs": self.pairs, "optional": self.optional,
                "source_language_token": self.source_language_token}

    @classmethod
    def from_dict(cls, record: dict[str, Any]) -> "RunLanguages":
        """The record `to_dict` wrote, or one written before imported models recorded their
        languages (without "optional")."""
        temperature = record.get("temperature")
        tokens = record["tokens"]
        return cls(record["placement"],
                   {language: int(token["id"]) for language, token in tokens.items()},
                   {language: token["piece"] for language, token in tokens.items()},
                   None if temperature is None else float(temperature),
                   list(record.get("pairs", [])), bool(record.get("optional", False)),
                   bool(record.get("source_language_token", False)))

    @classmethod
    def trained(cls, placement: str, token_ids: dict[str, int], temperature: float,
                pairs: list[dict[str, Any]]) -> "RunLanguages":
        """The languages of a run of several pairs kt-train trains: each token
        `language_token`'s piece."""
        return cls(placement, token_ids,
                   {language: language_token(language) for language in token_ids},
                   temperature, pairs)


class LanguageTable(tf.Module):
    """A model's languages in a signature's graph: the token ids of its `target_language` and
    `source_language` inputs, one per row, checked as `asked_languages` checks a request (an
    InvalidArgumentError naming the input, the languages refused and the model's)."""

    def __init__(self, languages: RunLanguages):
        super().__init__(name="language_table")
        self.languages = languages
        codes = sorted(languages.token_ids)
        self.table = tf.lookup.StaticHashTable(tf.lookup.KeyValueTensorInitializer(
            tf.constant(codes), tf.constant([languages.token_ids[code] for code in codes],
                                            tf.int32)), default_value=-1)

    def token_ids(self, target_language: tf.Tensor, source_language: Optional[tf.Tensor],
                  rows: tf.Tensor) -> tuple[tf.Tensor, Optional[tf.Tensor]]:
        """The `[batch]` ids of the tokens of `target_language` (-1 for "" where the language
        is optional: the text as it is) and of `source_language` (None for a model that reads
        no source language), one per row of `rows`."""
        target = self._checked(target_language, rows, "target_language", "into",
                               may_be_empty=self.languages.optional)
        if not self.languages.source_language_token:
            return target, None
        return target, self._checked(source_language, rows, "source_language", "from")

    def _checked(self, languages: tf.Tensor, rows: tf.Tensor, name: str, direction: str,
                 may_be_empty: bool = False) -> tf.Tensor:
        tokens = self.table.lookup(languages)
        known = ", ".join(sorted(self.languages.token_ids))
        refused = (tokens < 0) & (languages != "" if may_be_empty else True)
        checks = [tf.debugging.assert_equal(
                      tf.size(languages), tf.shape(rows)[0],
                      message=f"{name}: give one language per row of the batch"),
                  tf.debugging.Assert(~tf.reduce_any(refused), [
                      f"{name}: the model translates {direction} {known} only, not",
                      tf.boolean_mask(languages, refused)])]
        with tf.control_dependencies(checks):
            return tf.identity(tokens)


class LanguageError(ValueError):
    """A request's language the model cannot take; `side` is "target" or "source"."""

    def __init__(self, side: str, message: str):
        super().__init__(message)
        self.side = side


@dataclass(frozen=True)
class AskedLanguages:
    """The languages of a request, checked (`asked_languages`): the model's codes (`target`
    "" for none where the model's language is optional; None where the model takes none) and
    their tokens' ids (None: no token)."""

    target: Optional[str] = None
    source: Optional[str] = None
    target_id: Optional[int] = None
    source_id: Optional[int] = None


def asked_languages(languages: Optional[RunLanguages], target: Optional[str] = None,
                    source: Optional[str] = None) -> AskedLanguages:
    """The one check of the languages a request names, for every front end (the API's
    `IntoLanguage`, the command lines' options, the CTranslate2 and LiteRT functions): the
    `target` and `source` languages (the model's codes, or an ISO 639-3 code naming one,
    `RunLanguages.code`) of a model of `languages` (None: one target language, no tokens). A
    `LanguageError` names the language and the model's: one given to a model that takes
    none, one missing, one the model does not have. A target left out of a model whose
    language is optional is "" (the text as it is). The graph's own check of a signature's
    inputs is `LanguageTable`'s (the same languages, per row)."""
    if languages is None and target is not None:
        raise LanguageError("target", f"target language {target!r}: the model translates "
                            "into one language (it has no language tokens)")
    reads_source = languages is not None and languages.source_language_token
    if source is not None and not reads_source:
        raise LanguageError("source", f"source language {source!r}: the model reads no "
                            "source language (only models such as NLLB-200 and M2M-100 do)")
    if languages is None:
        return AskedLanguages()
    known = ", ".join(sorted(languages.token_ids))
    if target is None and not languages.optional:
        raise LanguageError("target", f"target language: needed, the model translates into "
                            f"{known}")
    if source is None and reads_source:
        raise LanguageError("source", f"source language: needed, the model translates from "
                            f"{known}")
    target = _model_code(languages, "target", target or "")
    target_id = _checked(languages.token_id, "target", target)
    if source is None:
        return AskedLanguages(target, None, target_id, None)
    source = _model_code(languages, "source", source)
    return AskedLanguages(target, source, target_id,
                          _checked(languages.source_token_id, "source", source))


def chosen_languages(languages: Optional[RunLanguages], target: Optional[str],
                     source: Optional[str], model: str) -> AskedLanguages:
    """`asked_languages` of a command line's `--target-language` and `--source-language` for
    `model` (its path, named in errors): a `LanguageError` names the option and the model."""
    try:
        return asked_languages(languages, target, source)
    except LanguageError as error:
        raise LanguageError(error.side, f"--{error.side}-language: {model}: {error}") from None


def _model_code(languages: RunLanguages, side: str, language: str) -> str:
    return language and _checked(languages.code, side, language)


def _checked(check, side: str, language: str):
    """`check(language)`, its ValueError a `LanguageError` of `side`."""
    try:
        return check(language)
    except ValueError as error:
        raise LanguageError(side, f"{side} language: {error}" if str(error).startswith(
            "language ") else str(error)) from None


class LanguageTokenizer(tf.Module):
    """`tokenizer` with a language pair's tokens put where the model reads them: the ids
    `prefixes` (`RunLanguages.pair_prefixes`) before each source's ids (`tokenize`) and before
    each target's (`tokenize_target`), as a model of several languages reads a sentence pair
    teacher-forced (what `visualization.attention_maps` takes: kt-train's attention plots of a
    pair's dev sentences). Its pieces are `tokenizer`'s."""

    def __init__(self, tokenizer: SubwordTokenizer, prefixes: tuple[list[int], list[int]],
                 name: str = "language_tokenizer"):
        super().__init__(name=name)
        self.tokenizer, self.prefixes = tokenizer, prefixes

    def tokenize(self, texts: tf.Tensor) -> tf.RaggedTensor:
        """Source texts' ids after the source prefix."""
        return self._with_prefix(self.tokenizer.tokenize(texts), self.prefixes[0])

    def tokenize_target(self, texts: tf.Tensor) -> tf.RaggedTensor:
        """Target texts' ids after the target prefix."""
        return self._with_prefix(self.tokenizer.tokenize_target(texts), self.prefixes[1])

    def source_pieces_of(self, ids: tf.Tensor) -> tf.Tensor:
        """The tokenizer's."""
        return self.tokenizer.source_pieces_of(ids)

    def id_to_piece(self, ids: Sequence[int] | tf.Tensor) -> list[str]:
        """The tokenizer's."""
        return self.tokenizer.id_to_piece(ids)

    @staticmethod
    def _with_prefix(ids: tf.RaggedTensor, prefix: list[int]) -> tf.RaggedTensor:
        columns = tf.tile(tf.constant([prefix], tf.int32), [ids.nrows(), 1])
        return tf.concat([columns, tf.cast(ids, tf.int32)], axis=1)
