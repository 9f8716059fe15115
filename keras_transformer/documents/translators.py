"""The sentence translators documents are translated with: any `LineTranslator` (a run, a
SavedModel, a CTranslate2 or LiteRT export), its subword alignment made a word alignment where
it gives one."""
from __future__ import annotations

from collections import Counter
from typing import Callable, Optional, Sequence

from keras_transformer.documents.document import DocumentTranslator, SentenceTranslator
from keras_transformer.documents.inline import Aligned
from keras_transformer.documents.segmentation import segmenter
from keras_transformer.decoding.confidence import WORD_START
from keras_transformer.decoding.translator import IntoLanguage, Translator
from keras_transformer.serving.text_translation import LineTranslator, best_lines


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
    """Each piece's word index: a piece starting with the word mark starts a word; pieces
    before the first such piece, and an end-of-sentence piece, belong to none (-1)."""
    words: list[int] = []
    word = -1
    for piece in pieces:
        if piece == "</s>":
            words.append(-1)
            continue
        if piece.startswith(WORD_START) and piece != WORD_START or (
                piece == WORD_START and word < 0):
            word += 1
        words.append(word)
    return words


def sentence_translator(translator: LineTranslator, batch_size: int = 64,
                        batch_tokens: int = 6000,
                        on_batch: Optional[Callable[[int], None]] = None) -> SentenceTranslator:
    """Sentences translated by `translator` in batches sorted by length (`best_lines`), with
    word alignments when asked (the translator must give them: `takes_alignment`)."""
    def translate(texts: Sequence[str], aligned: bool) -> list[Aligned]:
        lines = [text.encode("utf-8") for text in texts]
        records: dict[int, dict] = {}
        outputs = best_lines(translator, lines, batch_size, batch_tokens, on_batch=on_batch,
                             on_alignment=records.__setitem__ if aligned else None)
        found = []
        for index, (text, output) in enumerate(zip(texts, outputs)):
            record = records.get(index)
            found.append(Aligned(output, None if record is None else word_alignment(
                record["target_pieces"], record["source_pieces"], record["alignment"],
                len(output.split()), len(text.split()))))
        return found
    return translate


def document_translator(translator: LineTranslator | Translator | IntoLanguage,
                        language: str = "en", batch_size: int = 64, batch_tokens: int = 6000,
                        on_batch: Optional[Callable[[int], None]] = None) -> DocumentTranslator:
    """A `DocumentTranslator` over any translator the package loads: a `LineTranslator` (an
    export, `serving.loading.load_export`) or an in-process `Translator` (`load_run(...)
    .translator()`), its source sentences found by `language`'s segmenter. Markup is placed
    by the translator's word alignment (a run, a SavedModel or a CTranslate2 export);
    sentences longer than its model takes (`LineTranslator.truncated`) are split and
    translated in parts."""
    if not isinstance(translator, LineTranslator):
        translator = LineTranslator.from_translator(translator)
    return DocumentTranslator(sentence_translator(translator, batch_size, batch_tokens, on_batch),
                              segmenter(language), length_check(translator),
                              aligned=translator.takes_alignment)


def length_check(translator: LineTranslator) -> Callable[[list[str]], list[bool]]:
    """Sentences -> whether each is longer than `translator`'s model takes
    (`LineTranslator.truncated`)."""
    def too_long(texts: list[str]) -> list[bool]:
        cut = set(translator.truncated([text.encode("utf-8") for text in texts]))
        return [index in cut for index in range(len(texts))]
    return too_long
