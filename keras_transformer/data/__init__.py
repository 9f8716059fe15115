"""Input side of keras-transformer: corpora, subword tokenizer and tf.data batching. What each name
does: docs/data.md, "In Python".
"""
from keras_transformer.data.batch_plan import BatchPlan
from keras_transformer.data.batching import bucket_boundaries, padding_fraction
from keras_transformer.data.demo_corpus import DEMO_LANGS, write_demo_corpus
from keras_transformer.data.pipeline import (
    make_eval_dataset,
    make_source_dataset,
    make_training_dataset,
)
from keras_transformer.data.text_files import shared_data_dir
from keras_transformer.data.text_files import read_lines, read_parallel
from keras_transformer.data.prepare import (ParallelSource, prepare, sample_sentences,
                                            text_file_source, tfds_source)
from keras_transformer.data.tfds_source import load_tfds
from keras_transformer.data.token_storage import TokenStorage
from keras_transformer.data.sentencepiece_pair import SentencePiecePair, load_tokenizer
from keras_transformer.data.tokenizer import SubwordTokenizer

__all__ = [
    "BatchPlan",
    "DEMO_LANGS",
    "ParallelSource",
    "SentencePiecePair",
    "SubwordTokenizer",
    "TokenStorage",
    "bucket_boundaries",
    "load_tfds",
    "load_tokenizer",
    "make_eval_dataset",
    "make_source_dataset",
    "make_training_dataset",
    "padding_fraction",
    "prepare",
    "read_lines",
    "read_parallel",
    "sample_sentences",
    "shared_data_dir",
    "text_file_source",
    "tfds_source",
    "write_demo_corpus",
]
