"""Two SentencePiece models (source, target) over our ids, applied in-graph: imported models.

A model imported from elsewhere (e.g. an OPUS-MT Marian model) comes with its own
SentencePiece models, `source.spm` for source text and `target.spm` for target text, whose own
ids mean nothing to us: the pieces (strings) are mapped to our ids through two vocabulary
lists (index = our id; the same list twice for a joint vocabulary), which start with our
special pieces "<pad>", "<unk>", "<s>", "</s>" (ids 0-3, `keras_transformer.config`).

`SentencePiecePair` has the interface of `SubwordTokenizer` where the package uses one:
`tokenize` reads source text and `tokenize_target` target text (a forced prefix, a training
target), `detokenize`, `pieces` and `id_to_piece` give target text and pieces,
`source_pieces_of` source pieces, `vocab_size` is the source side's (the model's
`vocab_size`). A source text may start with a target-language token such as `>>fra<<`
(multi-target models): it maps to its own id and is not passed to SentencePiece.
`load_tokenizer` reads either kind from a directory; `vocabulary_pieces` gives either kind's
pieces per side.

As for `SubwordTokenizer`, build (or `load`) it after seeding: seeding clears TensorFlow's
kernel cache, which frees the SentencePiece resources of the tokenizers built before.
"""
from __future__ import annotations

import hashlib
import json
import os
import re
from collections.abc import Sequence
from typing import Union

import sentencepiece
import tensorflow as tf
import tensorflow_text as tf_text

from keras_transformer.data.tokenizer import (MODEL_FILENAME, SubwordTokenizer,
                                              native_info_lines_hidden, text_ids)
from keras_transformer.config import BOS_ID, EOS_ID, PAD_ID, UNK_ID

SOURCE_FILENAME = "source.spm"
TARGET_FILENAME = "target.spm"
VOCABULARY_FILENAME = "vocabulary.json"
PAIR_FILENAMES = (SOURCE_FILENAME, TARGET_FILENAME, VOCABULARY_FILENAME)
SPECIAL_PIECES = ("<pad>", "<unk>", "<s>", "</s>")
"""Our special pieces, by id: `PAD_ID`, `UNK_ID`, `BOS_ID`, `EOS_ID` are 0-3."""

_SPACE = "\t\n\f\r "  # what RE2's and Python's patterns both take for whitespace here
LANGUAGE_TOKEN = f"^(>>[^<>{_SPACE}]+<<)[{_SPACE}]*"
"""A leading target-language token (group 1) and the whitespace after it, in RE2 and Python
syntax alike."""
_LANGUAGE_TOKEN = re.compile(LANGUAGE_TOKEN)


class SentencePiecePair(tf.Module):
    """`source_model` and `target_model` (serialized SentencePiece models) over our ids, with
    in-graph `tokenize` (source side), `tokenize_target` and `detokenize` (target side).

    `source_pieces` and `target_pieces`: the piece of each of our ids (index = id), starting
    with "<pad>", "<unk>", "<s>", "</s>", without duplicates (ValueError naming the list
    otherwise). A piece not in its side's list becomes UNK; an id out of its side's range
    reads as "<unk>".

    `control_pieces`: target pieces that are not text (an imported NLLB-200's language codes,
    as its tokenizer's decoding skips special tokens): `detokenize` leaves them out.
    """

    def __init__(self, source_model: bytes, target_model: bytes, source_pieces: Sequence[str],
                 target_pieces: Sequence[str], control_pieces: Sequence[str] = (),
                 name: str = "sentencepiece_pair") -> None:
        super().__init__(name=name)
        self._processors = {"source": _processor(source_model, "source_model"),
                            "target": _processor(target_model, "target_model")}
        self._source_pieces = _checked_pieces(source_pieces, "source_pieces")
        self._target_pieces = _checked_pieces(target_pieces, "target_pieces")
        self._control_pieces = tuple(control_pieces)
        unknown = sorted(set(self._control_pieces) - set(self._target_pieces))
        if unknown:
            raise ValueError(f"control_pieces: {unknown[0]!r} is no target piece")
        control = set(self._control_pieces)
        # Whether each target id stands for text (None: every id does).
        self._is_text = tf.constant([piece not in control for piece in self._target_pieces],
                                    tf.bool) if control else None
        self._source_model, self._target_model = source_model, target_model
        self._indexes = {side: {piece: index for index, piece in enumerate(pieces)}
                         for side, pieces in (("source", self._source_pieces),
                                              ("target", self._target_pieces))}
        # A SavedModel restores each SentencePiece resource under the name it was created
        # with, and two of one name are one resource (the first model loaded): named by the
        # model's hash, source and target keep their own models.
        with native_info_lines_hidden():
            self._source_sp = tf_text.SentencepieceTokenizer(
                model=source_model, out_type=tf.string, name=_resource_name(source_model))
            self._target_sp = tf_text.SentencepieceTokenizer(
                model=target_model, out_type=tf.string, name=_resource_name(target_model))
        self._source_ids, self._target_ids = (_id_table(pieces) for pieces in (
            self._source_pieces, self._target_pieces))
        self._source_piece_table, self._target_piece_table = (_piece_table(pieces) for pieces in (
            self._source_pieces, self._target_pieces))

    @classmethod
    def load(cls, directory: str | os.PathLike) -> "SentencePiecePair":
        """The pair `save` wrote into `directory` (FileNotFoundError naming a missing file,
        ValueError naming a malformed `vocabulary.json`)."""
        paths = [os.path.join(os.fspath(directory), name) for name in PAIR_FILENAMES]
        for path in paths:
            if not os.path.isfile(path):
                raise FileNotFoundError(f"no SentencePiece pair file at {path!r}")
        source_path, target_path, vocabulary_path = paths
        try:
            with open(vocabulary_path, encoding="utf-8") as handle:
                vocabulary = json.load(handle)
        except (UnicodeDecodeError, json.JSONDecodeError) as error:
            raise ValueError(f"{vocabulary_path}: not JSON: {error}") from None
        if not (isinstance(vocabulary, dict) and all(
                isinstance(vocabulary.get(side), list) for side in ("source", "target"))):
            raise ValueError(f'{vocabulary_path}: expected {{"source": [pieces], '
                             '"target": [pieces]}')
        with open(source_path, "rb") as source, open(target_path, "rb") as target:
            models = source.read(), target.read()
        try:
            return cls(*models, vocabulary["source"], vocabulary["target"],
                       vocabulary.get("control", ()))
        except ValueError as error:
            raise ValueError(f"{os.fspath(directory)}: {error}") from None

    def save(self, directory: str | os.PathLike) -> str:
        """Write `source.spm`, `target.spm` and `vocabulary.json` ({"source": [pieces],
        "target": [pieces]}, and "control": [pieces] when there are control pieces) into
        `directory` (created); return the `vocabulary.json` path."""
        os.makedirs(directory, exist_ok=True)
        source_path, target_path, vocabulary_path = (os.path.join(os.fspath(directory), name)
                                                     for name in PAIR_FILENAMES)
        for path, model in ((source_path, self._source_model),
                            (target_path, self._target_model)):
            with open(path, "wb") as handle:
                handle.write(model)
        with open(vocabulary_path, "w", encoding="utf-8") as handle:
            json.dump({"source": list(self._source_pieces), "target": list(self._target_pieces),
                       **({"control": list(self._control_pieces)} if self._control_pieces
                          else {})}, handle, ensure_ascii=False, indent=0)
        return vocabulary_path

    @property
    def vocab_size(self) -> int:
        """Number of source ids, special ids included: the model's `vocab_size`."""
        return len(self._source_pieces)

    @property
    def target_vocab_size(self) -> int:
        """Number of target ids, special ids included."""
        return len(self._target_pieces)

    @tf.function(input_signature=[tf.TensorSpec([None], tf.string)], autograph=False)
    def tokenize(self, texts: tf.Tensor) -> tf.RaggedTensor:
        """Map a batch of source strings to ragged int32 ids, without BOS/EOS: a leading
        `>>xx<<` token's id (UNK if it is no source piece), then the ids of the rest's
        SentencePiece pieces."""
        tagged = tf.strings.regex_full_match(texts, f"(?s){LANGUAGE_TOKEN}.*")
        tags = tf.strings.regex_replace(texts, f"(?s){LANGUAGE_TOKEN}.*", r"\1")
        rest = tf.strings.regex_replace(texts, LANGUAGE_TOKEN, "", replace_global=False)
        pieces = tf.concat([tf.ragged.boolean_mask(tags[:, None], tagged[:, None]),
                            self._source_sp.tokenize(rest)], axis=1)
        return tf.ragged.map_flat_values(self._source_ids.lookup, pieces)

    @tf.function(input_signature=[tf.TensorSpec([None], tf.string)], autograph=False)
    def tokenize_target(self, texts: tf.Tensor) -> tf.RaggedTensor:
        """Map a batch of target strings to ragged int32 ids, without BOS/EOS: the ids of
        their `target.spm` pieces."""
        return tf.ragged.map_flat_values(self._target_ids.lookup,
                                         self._target_sp.tokenize(texts))

    def encode(self, text: str) -> list[int]:
        """The ids `tokenize` gives `text`, in Python (for data preparation)."""
        return self.encode_batch([text])[0]

    def encode_batch(self, texts: list[str], side: str = "source", threads: int = 1,
                     alpha: float = 0.0) -> list[list[int]]:
        """The ids of `texts` in Python (data preparation), as `tokenize` (source side: a
        leading `>>xx<<` token kept whole) or `tokenize_target` segment them; with `alpha` >
        0, sampled segmentations (SentencePiece's subword regularization; the caller seeds
        SentencePiece)."""
        index = self._indexes[side]
        tags = [_LANGUAGE_TOKEN.match(text) if side == "source" else None for text in texts]
        rests = [text[tag.end():] if tag else text for text, tag in zip(texts, tags)]
        sampling = dict(enable_sampling=True, alpha=alpha, nbest_size=-1) if alpha else {}
        pieces = self._processors[side].encode(rests, out_type=str, num_threads=threads,
                                               **sampling)
        return [([index.get(tag.group(1), UNK_ID)] if tag else [])
                + [index.get(piece, UNK_ID) for piece in row] for tag, row in zip(tags, pieces)]

    @property
    def serialized(self) -> bytes:
        """What identifies the vocabulary (token storage records its SHA-256): both models and
        both piece lists."""
        pieces = json.dumps([self._source_pieces, self._target_pieces]).encode("utf-8")
        return b"".join((self._source_model, self._target_model, pieces))

    def detokenize(self, ids: tf.Tensor | tf.RaggedTensor) -> tf.Tensor:
        """Map target ids [batch, length] (dense or ragged) back to strings.

        Ids from the first EOS on are ignored, as are padding, BOS and the control pieces, so
        decoder output can be passed as is; the other ids' target pieces are joined by
        `target.spm` (a piece it does not know is kept as it is written).
        """
        if not isinstance(ids, tf.RaggedTensor):
            ids = tf.RaggedTensor.from_tensor(tf.convert_to_tensor(ids))
        return self._detokenize(tf.cast(ids, tf.int32))

    @tf.function(input_signature=[tf.RaggedTensorSpec([None, None], tf.int32, ragged_rank=1)],
                 autograph=False)
    def _detokenize(self, ids: tf.RaggedTensor) -> tf.Tensor:
        ids = text_ids(ids)
        if self._is_text is not None:
            size = tf.shape(self._is_text)[0]
            ids = tf.ragged.boolean_mask(ids, tf.ragged.map_flat_values(
                lambda flat: (flat >= size) | tf.gather(self._is_text,
                                                        tf.minimum(flat, size - 1)), ids))
        return self._target_sp.detokenize(tf.ragged.map_flat_values(self.pieces, ids))

    def pieces(self, ids: tf.Tensor) -> tf.Tensor:
        """The target piece text (e.g. b'▁chien') of each id of a dense tensor, in the graph."""
        return self._target_piece_table.lookup(tf.cast(ids, tf.int64))

    def source_pieces_of(self, ids: tf.Tensor) -> tf.Tensor:
        """The source piece text (e.g. b'>>fra<<') of each id of a dense tensor, in the
        graph."""
        return self._source_piece_table.lookup(tf.cast(ids, tf.int64))

    def target_sentencepiece_ids(self) -> list[int]:
        """The `target.spm` id of each of our target ids' pieces (index = our id; -1 for
        padding, BOS and EOS, which no text holds): what a runtime without our piece tables
        detokenizes with (the translation page, whose SentencePiece decodes ids only)."""
        processor = self._processors["target"]
        return [-1 if index in (PAD_ID, BOS_ID, EOS_ID) else processor.piece_to_id(piece)
                for index, piece in enumerate(self._target_pieces)]

    def id_to_piece(self, ids: Sequence[int] | tf.Tensor) -> list[str]:
        """Return the target piece text of each id (for attention plots), e.g. '▁chien'."""
        pieces = self.pieces(tf.convert_to_tensor(ids, dtype=tf.int32))
        return [piece.decode("utf-8") for piece in pieces.numpy().tolist()]


Tokenizer = Union[SubwordTokenizer, SentencePiecePair]
"""Either kind of tokenizer a run or an export holds."""


def load_tokenizer(directory: str | os.PathLike) -> Tokenizer:
    """The tokenizer saved in `directory`: a `SubwordTokenizer` (`spm.model`) or a
    `SentencePiecePair` (`vocabulary.json`, `source.spm`, `target.spm`); FileNotFoundError
    naming `directory` when it holds neither kind, ValueError when it holds both."""
    return saved_tokenizer_kind(directory).load(directory)


def has_tokenizer(directory: str | os.PathLike) -> bool:
    """Whether `directory` holds a saved tokenizer of either kind."""
    return any(os.path.isfile(os.path.join(os.fspath(directory), name))
               for name in (MODEL_FILENAME, VOCABULARY_FILENAME))


def vocabulary_pieces(tokenizer: SubwordTokenizer | SentencePiecePair
                      ) -> tuple[list[str], list[str]]:
    """Every source id's piece and every target id's piece, by id (a shared vocabulary's
    pieces twice)."""
    if isinstance(tokenizer, SentencePiecePair):
        return list(tokenizer._source_pieces), list(tokenizer._target_pieces)
    pieces = tokenizer.id_to_piece(range(tokenizer.vocab_size))
    return pieces, pieces


def tokenizer_files(directory: str | os.PathLike) -> list[str]:
    """The paths of the files `load_tokenizer(directory)` reads."""
    names = ((MODEL_FILENAME,) if saved_tokenizer_kind(directory) is SubwordTokenizer
             else PAIR_FILENAMES)
    return [os.path.join(os.fspath(directory), name) for name in names]


def saved_tokenizer_kind(directory: str | os.PathLike) -> type:
    """`SubwordTokenizer` or `SentencePiecePair`: the kind saved in `directory`, told by its
    `spm.model` or its `vocabulary.json` (FileNotFoundError naming `directory` when it holds
    neither, ValueError when both)."""
    subword, pair = (os.path.isfile(os.path.join(os.fspath(directory), name))
                     for name in (MODEL_FILENAME, VOCABULARY_FILENAME))
    if subword and pair:
        raise ValueError(f"{os.fspath(directory)}: holds both a subword vocabulary "
                         f"({MODEL_FILENAME}) and a SentencePiece pair ({VOCABULARY_FILENAME}): "
                         "which one is meant is not clear")
    if not (subword or pair):
        raise FileNotFoundError(f"no tokenizer in {os.fspath(directory)!r} (neither "
                                f"{MODEL_FILENAME} nor {VOCABULARY_FILENAME})")
    return SubwordTokenizer if subword else SentencePiecePair


def _processor(model: bytes, argument: str) -> sentencepiece.SentencePieceProcessor:
    """`model` (a serialized SentencePiece model) loaded; ValueError naming `argument` if it
    is none."""
    try:
        return sentencepiece.SentencePieceProcessor(model_proto=model)
    except (RuntimeError, TypeError) as error:
        raise ValueError(f"{argument}: not a serialized SentencePiece model ({error})") from None


def _id_table(pieces: tuple[str, ...]) -> tf.lookup.StaticHashTable:
    """A table of each piece of `pieces` -> its index (int32; UNK for any other piece)."""
    return tf.lookup.StaticHashTable(tf.lookup.KeyValueTensorInitializer(
        tf.constant(pieces, tf.string), tf.range(len(pieces), dtype=tf.int32)),
        default_value=UNK_ID)


def _piece_table(pieces: tuple[str, ...]) -> tf.lookup.StaticHashTable:
    """A table of each int64 index -> its piece of `pieces` (`pieces[UNK_ID]` out of range)."""
    return tf.lookup.StaticHashTable(tf.lookup.KeyValueTensorInitializer(
        tf.range(len(pieces), dtype=tf.int64), tf.constant(pieces, tf.string)),
        default_value=pieces[UNK_ID])


def _resource_name(model: bytes) -> str:
    """The name of the SentencePiece resource of `model`: the same for the same model only."""
    return f"sentencepiece_{hashlib.sha256(model).hexdigest()[:16]}"


def _checked_pieces(pieces: Sequence[str], argument: str) -> tuple[str, ...]:
    """`pieces` as a tuple, after checking that they are strings starting with
    `SPECIAL_PIECES`, without duplicates (ValueError naming `argument` otherwise)."""
    pieces = tuple(pieces)
    for index, piece in enumerate(pieces):
        if not isinstance(piece, str):
            raise ValueError(f"{argument}[{index}]: {piece!r} is not a string")
    if pieces[:len(SPECIAL_PIECES)] != SPECIAL_PIECES:
        raise ValueError(f"{argument}: must start with {list(SPECIAL_PIECES)} (our ids "
                         f"{PAD_ID}-{EOS_ID}), starts with {list(pieces[:len(SPECIAL_PIECES)])}")
    first: dict[str, int] = {}
    for index, piece in enumerate(pieces):
        if piece in first:
            raise ValueError(f"{argument}: {piece!r} is at ids {first[piece]} and {index}")
        first[piece] = index
    return pieces
