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

A run records its languages, their tokens' ids and the placement (`RunLanguages`,
`languages.json` in the run directory); `LanguageTokenizer` puts the token of one target
language where the placement says, in the graph, around the run's tokenizer.
"""
from __future__ import annotations

import re
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import sentencepiece
import tensorflow as tf

from keras_transformer.data.prepare import ParallelSource, drawn
from keras_transformer.data.tokenizer import SubwordTokenizer

PLACEMENTS = ("source", "target")
"""Where the target-language token goes: first in the source, or first in the target."""
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
    """The texts a vocabulary shared by several languages is learned from, each language's
    share the same: `sentences // L` of each of the L languages, a seeded uniform sample of
    all its lines (a language with fewer lines is taken whole), empty lines left out; one
    language after the other, in sorted order.

    Args:
        sides: (language, source, side) for every side of every corpus: `side` 0 for the
            pairs' source texts, 1 for their targets.
        sentences: how many texts in all, at most.
        seed: draws each language's sample.
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
    """What a run of several pairs records (`languages.json`): the placement of the token,
    the temperature the pairs were sampled at, each target language's token id, and per pair
    its languages, its batches per epoch and its share of the training batches."""

    placement: str
    temperature: float
    token_ids: dict[str, int]
    pairs: list[dict[str, Any]]

    def token_id(self, language: str) -> int:
        """The id of the token asking for `language`; ValueError naming it and the run's
        target languages when the model was not trained into it."""
        if language not in self.token_ids:
            raise ValueError(f"target language {language!r}: the model translates into "
                             f"{', '.join(sorted(self.token_ids))} only")
        return self.token_ids[language]

    def to_dict(self) -> dict[str, Any]:
        """The JSON record."""
        return {"placement": self.placement, "temperature": self.temperature,
                "tokens": {language: {"piece": language_token(language), "id": token_id}
                           for language, token_id in sorted(self.token_ids.items())},
                "pairs": self.pairs}

    @classmethod
    def from_dict(cls, record: dict[str, Any]) -> "RunLanguages":
        """The record `to_dict` wrote."""
        return cls(record["placement"], float(record["temperature"]),
                   {language: int(token["id"]) for language, token in record["tokens"].items()},
                   list(record["pairs"]))


class LanguageTokenizer(tf.Module):
    """`tokenizer` with the token `token_id` of one target language put where `placement`
    says: before each source's ids (`tokenize`) or before each target's (`tokenize_target`:
    a `Translator`'s forced prefix, so an empty prefix starts every translation with the
    token); `detokenize` leaves the token out. The rest is `tokenizer`'s."""

    def __init__(self, tokenizer: SubwordTokenizer, token_id: int, placement: str,
                 name: str = "language_tokenizer"):
        super().__init__(name=name)
        if placement not in PLACEMENTS:
            raise ValueError(f"placement: {placement!r} is not one of {', '.join(PLACEMENTS)}")
        self.tokenizer, self.token_id, self.placement = tokenizer, token_id, placement

    @property
    def vocab_size(self) -> int:
        """The tokenizer's."""
        return self.tokenizer.vocab_size

    def tokenize(self, texts: tf.Tensor) -> tf.RaggedTensor:
        """Source texts' ids, the token first with the "source" placement."""
        ids = self.tokenizer.tokenize(texts)
        return self._with_token(ids) if self.placement == "source" else ids

    def tokenize_target(self, texts: tf.Tensor) -> tf.RaggedTensor:
        """Target texts' ids, the token first with the "target" placement."""
        ids = self.tokenizer.tokenize_target(texts)
        return self._with_token(ids) if self.placement == "target" else ids

    def detokenize(self, ids: tf.Tensor | tf.RaggedTensor) -> tf.Tensor:
        """The tokenizer's `detokenize` of `ids` without the token."""
        if not isinstance(ids, tf.RaggedTensor):
            ids = tf.RaggedTensor.from_tensor(tf.convert_to_tensor(ids))
        ids = tf.cast(ids, tf.int32)
        return self.tokenizer.detokenize(tf.ragged.boolean_mask(ids, ids != self.token_id))

    def pieces(self, ids: tf.Tensor) -> tf.Tensor:
        """The tokenizer's."""
        return self.tokenizer.pieces(ids)

    def source_pieces_of(self, ids: tf.Tensor) -> tf.Tensor:
        """The tokenizer's."""
        return self.tokenizer.source_pieces_of(ids)

    def id_to_piece(self, ids: Sequence[int] | tf.Tensor) -> list[str]:
        """The tokenizer's."""
        return self.tokenizer.id_to_piece(ids)

    def _with_token(self, ids: tf.RaggedTensor) -> tf.RaggedTensor:
        column = tf.fill([ids.nrows(), 1], tf.constant(self.token_id, tf.int32))
        return tf.concat([column, tf.cast(ids, tf.int32)], axis=1)
