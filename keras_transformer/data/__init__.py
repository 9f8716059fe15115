"""Input side of keras-transformer: corpora, subword tokenizer and tf.data batching.

Corpora (all return ``(sources, targets)`` lists of stripped strings):
    write_demo_corpus(directory, seed=0) -> {split: (src_path, tgt_path)}
        Generated English->German counting corpus ("train", "dev", "test"); DEMO_LANGS.
    read_parallel(src_path, tgt_path, max_length_chars=None) -> (sources, targets)
        Plain or gzipped line-aligned files; mismatched line counts, bad UTF-8 (file:line)
        and missing files raise; empty and over-long pairs are dropped and counted in the log.
    read_lines(path) -> list[str]
        One file, every line kept (for evaluation sources and references).
    load_tfds(name, split, source_lang, target_lang, data_dir=None, download=True)
        A tensorflow-datasets translation builder such as "wmt14_translate/de-en".
    shared_data_dir() -> Path
        $KT_SHARED_DATA or ../shared/data beside the project.

Prepared training data (corpora of any size, streamed; docs/data.md):
    text_file_source(src_path, tgt_path) / tfds_source(name, split, source_lang, target_lang)
        A ParallelSource: the pairs as a stream and their count.
    sample_sentences(source, sentences, seed) -> Iterator[str]
        A seeded one-pass sample to learn the vocabulary from.
    prepare(source, directory, tokenizer, shard_pairs, seed) -> TokenStorage
        Tokenized pairs in shards on disk with a manifest (``TokenStorage.open(directory)``).
    BatchPlan(storage, batch_tokens, max_length, seed, word_dropout=0.0)
        The endless seeded stream of token-budget batches (word dropout optional);
        ``.elements(first, wanted)``, ``.dataset(first, wanted)``, ``.batches_per_epoch``.

Several language pairs in one model (docs/training.md, "Several languages in one model"):
    languages.LanguagePair.parse("en-de"), languages.language_token("de") -> "<2de>"
        A pair, and the vocabulary piece that asks for a target language;
        ``RunLanguages`` is a model's record of its tokens' pieces and ids, their placement
        and a trained run's pairs' shares (``languages.json``); ``LanguageTokenizer`` puts
        one first in the source or the target (attention plots).
    pair_sampling.PairSampling(plans, temperature, seed, prefixes)
        The endless seeded stream of batches over several pairs' ``BatchPlan``s, each batch's
        pair drawn with probability ``temperature_shares(batches per epoch, temperature)``.

Tokenizers (ids from keras_transformer.config: pad 0 unk 1 bos 2 eos 3):
    SubwordTokenizer.train(texts, vocab_size, directory) / SubwordTokenizer.load(directory)
        A shared vocabulary. Writes and reads ``<directory>/spm.model``; ``.tokenize(strings) -> RaggedTensor``,
        ``.detokenize(ids) -> strings``, ``.vocab_size``, ``.model_proto``, ``.id_to_piece``.
    SentencePiecePair(source_model, target_model, source_pieces, target_pieces)
        An imported model's two SentencePiece models over our ids (source text in, target
        text out; a leading ``>>xx<<`` token kept whole); ``.save``/``.load`` its
        ``source.spm``, ``target.spm``, ``vocabulary.json``.
    load_tokenizer(directory) -> SubwordTokenizer | SentencePiecePair
        Whichever kind ``directory`` holds.

Files written whole or not at all (run directories, storage and exports use it):
    atomic_files.write_atomic(path, data)

Batches ``((source, target_in), target_out)``, int32, 0-padded:
    make_training_dataset(sources, targets, tokenizer, batch_tokens, max_length, seed, ...)
        Shuffled, length-bucketed, at most ``batch_tokens`` positions per side and batch.
    make_eval_dataset(sources, targets, tokenizer, batch_size, max_length=None)
        Fixed-size batches in corpus order, nothing dropped.
    make_source_dataset(sources, tokenizer, batch_size, max_length=None)
        Source ids only, for decoding.
    padding_fraction(dataset, max_batches=None) -> float
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
