"""Documents, not only lines: plain text, HTML and Markdown translated sentence by sentence
with their layout and inline markup (`DocumentTranslator`, over any translator the package
loads: `document_translator`)."""
from keras_transformer.documents.document import (FORMATS, DocumentTranslator, Split,
                                                  Translated)
from keras_transformer.documents.segmentation import Segmenter

__all__ = ["FORMATS", "DocumentTranslator", "Segmenter", "Split", "Translated",
           "document_translator", "segmenter"]


def segmenter(language: str) -> Segmenter:
    """The sentence segmenter of `language` (an ISO 639 code; others get the default rules):
    `sentencex`, chosen by measurement (benchmarks/RESULTS.md, "Sentence splitting")."""
    import sentencex

    def segment(text: str):
        return sentencex.segment(language, text)
    return segment


def document_translator(*args, **kwargs) -> DocumentTranslator:
    """`translators.document_translator` (imported on use: it loads TensorFlow)."""
    from keras_transformer.documents.translators import document_translator as make
    return make(*args, **kwargs)
