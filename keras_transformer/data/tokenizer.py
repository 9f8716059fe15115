"""Shared source/target subword vocabulary: trained with sentencepiece, applied in-graph.

Training uses the ``sentencepiece`` package (byte-pair encoding, as in the paper); tokenizing
and detokenizing run as TensorFlow ops from ``tensorflow_text`` so that the same tokenizer can
live inside a ``tf.data`` pipeline and an exported SavedModel. Normalization is the identity
and whitespace is kept as is, so detokenize(tokenize(s)) == s for stripped text; characters
never seen in training fall back to UTF-8 byte pieces instead of <unk>.

Seed first: ``keras.utils.set_random_seed``/``tf.random.set_seed`` clear TensorFlow's kernel
cache, which frees the SentencePiece resource of every tokenizer built before the call; build
(or ``load``) tokenizers after seeding.
"""
from __future__ import annotations

import contextlib
import io
import os
import random
import re
import sys
import tempfile
from collections.abc import Iterable, Iterator, Sequence

import sentencepiece
import tensorflow as tf
import tensorflow_text as tf_text

from keras_transformer.config import BOS_ID, EOS_ID, PAD_ID, UNK_ID

MODEL_FILENAME = "spm.model"
# What sentencepiece's C++ code logs at INFO level straight to stderr, e.g.
# "normalizer.cc(51) LOG(INFO) precompiled_charsmap is empty. use identity normalization."
NATIVE_INFO_LINE = re.compile(r"^\S+\.cc\(\d+\) LOG\(INFO\) ")


class SubwordTokenizer(tf.Module):
    """A sentencepiece model with in-graph ``tokenize``/``detokenize``; pad 0 unk 1 bos 2 eos 3."""

    def __init__(self, model_proto: bytes, name: str = "subword_tokenizer") -> None:
        super().__init__(name=name)
        self._check_special_ids(model_proto)
        self._proto = model_proto
        with native_info_lines_hidden():
            self._sp = tf_text.SentencepieceTokenizer(model=model_proto, out_type=tf.int32)
        self._vocab_size = int(self._sp.vocab_size())

    @classmethod
    def train(
        cls,
        texts: Iterable[str],
        vocab_size: int,
        directory: str | os.PathLike | None,
        max_sentences: int | None = None,
        seed: int = 0,
        reserved: Sequence[str] = (),
    ) -> "SubwordTokenizer":
        """Learn a vocabulary of ``vocab_size`` pieces from ``texts``, save it in ``directory``
        (None: not saved; ``save`` writes it later).

        ``texts`` should hold both languages (shared vocabulary); they are streamed to
        sentencepiece (which keeps its own copy), so an iterator need not fit in Python's
        memory. With ``max_sentences`` a seeded sample of that many sentences is used (the
        texts are held to draw it). ``reserved``: pieces kept whole with ids of their own,
        right after the special ids in the order given (SentencePiece's user-defined symbols,
        e.g. target-language tokens ``<2de>``), within ``vocab_size``. The result depends
        only on the texts and the arguments.
        """
        sentences: Iterable[str] = (text for text in texts if text)
        if max_sentences is not None:
            sentences = list(sentences)
            if len(sentences) > max_sentences:
                sentences = random.Random(seed).sample(sentences, max_sentences)
        read = 0
        failures: list[Exception] = []

        def counted() -> Iterator[str]:
            # An error of the texts (a file's bad line) is raised inside SentencePiece's C++
            # loop, which wraps it or could take it for the end of the input: it is kept and
            # raised as it is after the trainer returns, so no vocabulary of part of the texts
            # is ever saved.
            nonlocal read
            try:
                for text in sentences:
                    read += 1
                    yield text
            except Exception as error:
                failures.append(error)

        proto = io.BytesIO()
        try:
            sentencepiece.SentencePieceTrainer.train(
                sentence_iterator=counted(),
                model_writer=proto,
                vocab_size=vocab_size,
                model_type="bpe",
                character_coverage=1.0,
                byte_fallback=True,
                normalization_rule_name="identity",
                remove_extra_whitespaces=False,
                split_digits=True,
                pad_id=PAD_ID,
                unk_id=UNK_ID,
                bos_id=BOS_ID,
                eos_id=EOS_ID,
                input_sentence_size=0,  # every sentence given, in order
                shuffle_input_sentence=False,
                max_sentence_length=1 << 16,
                num_threads=1,
                minloglevel=2,
                **({"user_defined_symbols": list(reserved)} if reserved else {}),
            )
        except RuntimeError as error:
            if failures:
                raise failures[0] from None
            if not read:
                raise ValueError("SubwordTokenizer.train: texts is empty") from None
            raise ValueError(
                f"SubwordTokenizer.train(vocab_size={vocab_size}) failed on {read} "
                f"sentences: {error}"
            ) from None
        if failures:
            raise failures[0]
        tokenizer = cls(proto.getvalue())
        if directory is not None:
            tokenizer.save(directory)
        return tokenizer

    @classmethod
    def load(cls, directory: str | os.PathLike) -> "SubwordTokenizer":
        """Load the vocabulary saved by ``train`` or ``save`` in ``directory``."""
        path = os.path.join(os.fspath(directory), MODEL_FILENAME)
        if not os.path.isfile(path):
            raise FileNotFoundError(f"no subword vocabulary at {path!r}")
        with open(path, "rb") as handle:
            return cls(handle.read())

    def save(self, directory: str | os.PathLike) -> str:
        """Write ``<directory>/spm.model`` (and a readable ``spm.vocab``); return the model path."""
        os.makedirs(directory, exist_ok=True)
        path = os.path.join(os.fspath(directory), MODEL_FILENAME)
        with open(path, "wb") as handle:
            handle.write(self._proto)
        processor = sentencepiece.SentencePieceProcessor(model_proto=self._proto)
        with open(os.path.join(os.fspath(directory), "spm.vocab"), "w", encoding="utf-8") as out:
            out.writelines(f"{processor.id_to_piece(i)}\t{processor.get_score(i)}\n"
                           for i in range(processor.get_piece_size()))
        return path

    @property
    def model_proto(self) -> bytes:
        """The serialized sentencepiece model, for ``tf_text.SentencepieceTokenizer(model=...)``."""
        return self._proto

    @property
    def serialized(self) -> bytes:
        """What identifies the vocabulary (token storage records its SHA-256): the model."""
        return self._proto

    def encode_batch(self, texts: list[str], side: str = "source", threads: int = 1,
                     alpha: float = 0.0) -> list[list[int]]:
        """The ids of `texts` in Python (data preparation; one vocabulary, so `side` changes
        nothing): as ``tokenize`` segments them or, with `alpha` > 0, BPE-dropout samples
        (each merge skipped with probability `alpha`; the caller seeds SentencePiece)."""
        processor = sentencepiece.SentencePieceProcessor(model_proto=self._proto)
        if not alpha:
            return processor.encode(texts, num_threads=threads)
        return processor.encode(texts, enable_sampling=True, alpha=alpha, nbest_size=-1,
                                num_threads=threads)

    @property
    def vocab_size(self) -> int:
        """Number of ids, special ids included."""
        return self._vocab_size

    @tf.function(input_signature=[tf.TensorSpec([None], tf.string)], autograph=False)
    def tokenize(self, texts: tf.Tensor) -> tf.RaggedTensor:
        """Map a batch of strings to ragged int32 ids, without BOS/EOS."""
        return self._sp.tokenize(texts)

    def tokenize_target(self, texts: tf.Tensor) -> tf.RaggedTensor:
        """Map a batch of target strings to ragged int32 ids: `tokenize` (one vocabulary for
        both sides; `SentencePiecePair` has one per side)."""
        return self.tokenize(texts)

    def detokenize(self, ids: tf.Tensor | tf.RaggedTensor) -> tf.Tensor:
        """Map int ids [batch, length] (dense or ragged) back to strings.

        Ids from the first EOS on are ignored, as are padding and BOS, so decoder output can
        be passed as is.
        """
        if not isinstance(ids, tf.RaggedTensor):
            ids = tf.RaggedTensor.from_tensor(tf.convert_to_tensor(ids))
        return self._detokenize(tf.cast(ids, tf.int32))

    @tf.function(input_signature=[tf.RaggedTensorSpec([None, None], tf.int32, ragged_rank=1)],
                 autograph=False)
    def _detokenize(self, ids: tf.RaggedTensor) -> tf.Tensor:
        return self._sp.detokenize(text_ids(ids))

    def pieces(self, ids: tf.Tensor) -> tf.Tensor:
        """The piece text (e.g. b'▁Hund') of each id of a dense tensor, in the graph."""
        return self._sp.id_to_string(tf.cast(ids, tf.int32))

    def source_pieces_of(self, ids: tf.Tensor) -> tf.Tensor:
        """The piece text of each source id: `pieces` (one vocabulary for both sides)."""
        return self.pieces(ids)

    def id_to_piece(self, ids: Sequence[int] | tf.Tensor) -> list[str]:
        """Return the piece text of each id (for attention plots), e.g. '▁Hund'."""
        pieces = self.pieces(tf.convert_to_tensor(ids, dtype=tf.int32))
        return [piece.decode("utf-8") for piece in pieces.numpy().tolist()]

    @staticmethod
    def _check_special_ids(model_proto: bytes) -> None:
        processor = sentencepiece.SentencePieceProcessor(model_proto=model_proto)
        found = (processor.pad_id(), processor.unk_id(), processor.bos_id(), processor.eos_id())
        if found != (PAD_ID, UNK_ID, BOS_ID, EOS_ID):
            raise ValueError(
                f"sentencepiece model has pad/unk/bos/eos ids {found}, expected "
                f"{(PAD_ID, UNK_ID, BOS_ID, EOS_ID)}"
            )


def text_ids(ids: tf.RaggedTensor) -> tf.RaggedTensor:
    """The ids of each row of `ids` that stand for text: those before its first EOS, PAD and
    BOS dropped."""
    before_eos = tf.cumsum(tf.cast(ids == EOS_ID, tf.int32), axis=1) == 0
    return tf.ragged.boolean_mask(ids, before_eos & (ids != PAD_ID) & (ids != BOS_ID))


# How a model reads text and ids it is given to translate, whatever runs it (the exported
# `TranslationModule`, kt-translate, a CTranslate2 model): `text_piece_ids`, then `model_input_ids`.

def text_piece_ids(tokenizer: SubwordTokenizer, text: tf.Tensor,
                target: bool = False) -> tf.RaggedTensor:
    """Subword ids of `text` `[batch]`, source text (`target`: target text), invalid UTF-8
    decoded with U+FFFD replacements."""
    valid = tf.strings.unicode_transcode(text, "UTF-8", "UTF-8", errors="replace")
    return (tokenizer.tokenize_target if target else tokenizer.tokenize)(valid)


def model_input_ids(ids: tf.RaggedTensor, vocab_size: int, max_length: int
                    ) -> tf.RaggedTensor:
    """The ids of each row of `ids` (a source, or the start forced on a translation) that a
    model of `vocab_size` ids and `max_length` positions reads: ids out of `[0, vocab_size)`
    as UNK, PAD, BOS and EOS dropped (`without_special_ids`), at most the first
    `max_length - 1` (the room left for the EOS that ends a source)."""
    ids = tf.ragged.map_flat_values(
        lambda flat: tf.where((flat < 0) | (flat >= vocab_size), UNK_ID, flat), ids)
    return without_special_ids(ids)[:, :max_length - 1]


def without_special_ids(ids: tf.RaggedTensor) -> tf.RaggedTensor:
    """`ids` without PAD, BOS and EOS (a source never carries them)."""
    return tf.ragged.boolean_mask(ids, (ids != PAD_ID) & (ids != BOS_ID) & (ids != EOS_ID))


@contextlib.contextmanager
def native_info_lines_hidden() -> Iterator[None]:
    """Drops the INFO lines C++ code writes to the process's stderr meanwhile (sentencepiece
    logs one when it parses a model) when TensorFlow's are off too (`TF_CPP_MIN_LOG_LEVEL` set
    and not 0, as the command lines set it unless `--verbose`); other output passes."""
    if os.environ.get("TF_CPP_MIN_LOG_LEVEL", "0") in ("", "0"):
        yield
        return
    sys.stderr.flush()
    saved = os.dup(2)
    with tempfile.TemporaryFile() as captured:
        os.dup2(captured.fileno(), 2)
        try:
            yield
        finally:
            os.dup2(saved, 2)
            os.close(saved)
            captured.seek(0)
            lines = captured.read().decode("utf-8", "replace").splitlines(keepends=True)
            sys.stderr.write("".join(line for line in lines if not NATIVE_INFO_LINE.match(line)))
