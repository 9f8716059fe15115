"""Documents, not only lines: plain text, HTML and Markdown translated sentence by sentence
with their layout and inline markup (`DocumentTranslator`; over any translator the package
loads: `translators.document_translator`)."""
from keras_transformer.documents.document import (FORMATS, DocumentTranslator, Split,
                                                  Translated)
from keras_transformer.documents.segmentation import Segmenter, segmenter
from keras_transformer.documents.translators import document_translator

__all__ = ["FORMATS", "DocumentTranslator", "Segmenter", "Split", "Translated",
           "document_translator", "segmenter"]
