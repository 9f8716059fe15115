"""The sentence translators documents are translated with: any `LineTranslator` (a run, a
SavedModel, a CTranslate2 or LiteRT export), its subword alignment made a word alignment where
it gives one."""
from __future__ import annotations

from typing import Callable, Optional, Sequence

from keras_transformer.documents.document import DocumentTranslator, SentenceTranslator
from keras_transformer.documents.inline import Aligned
from keras_transformer.documents.segmentation import segmenter
from keras_transformer.decoding.alignment import word_alignment
from keras_transformer.decoding.translator import IntoLanguage, TranslationModule
from keras_transformer.serving.text_translation import LineTranslator, best_lines


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


def document_translator(translator: LineTranslator | TranslationModule | IntoLanguage,
                        language: str = "en", batch_size: int = 64, batch_tokens: int = 6000,
                        on_batch: Optional[Callable[[int], None]] = None) -> DocumentTranslator:
    """A `DocumentTranslator` over any translator the package loads: a `LineTranslator` (an
    export, `serving.loading.load_export`) or an in-process `TranslationModule` (`load_run(...)
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
