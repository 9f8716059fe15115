"""SentencePiecePair: an imported model's source and target SentencePiece models over our ids,
in-graph and in Python, saved and loaded, inside a SavedModel, and `load_tokenizer`."""
import json
from pathlib import Path

import numpy as np
import pytest
import sentencepiece as spm
import tensorflow as tf
import yaml

import keras_transformer as kt
from keras_transformer.config import BOS_ID, EOS_ID, PAD_ID, SearchSettings, UNK_ID
from keras_transformer.data import SentencePiecePair, SubwordTokenizer, load_tokenizer
from keras_transformer.data.sentencepiece_pair import SPECIAL_PIECES
from keras_transformer.decoding.translator import TranslationModule
from keras_transformer.serving.export import export_translator
from keras_transformer.serving.text_translation import LineTranslator
from marian_models import training_sentences, write_marian_model
from trainers import prepare as prepare_cli

PLAIN = ["I one two.", "my friend sees the red car!", "", "  two  spaces  ",
         "they buys 字 and Ω?"]  # unknown characters too


def marian_pieces(path: Path) -> list:
    """Our pieces of the Marian vocabulary yml `path`: ours special four, then the yml's other
    tokens in id order."""
    ids = yaml.load(path.read_text(encoding="utf-8"), Loader=yaml.BaseLoader)
    tokens = sorted(ids, key=lambda token: int(ids[token]))
    return list(SPECIAL_PIECES) + [token for token in tokens if token not in ("</s>", "<unk>")]


@pytest.fixture(scope="module")
def joint(tmp_path_factory) -> Path:
    """A multi-target model folder with one vocabulary for both sides."""
    return write_marian_model(tmp_path_factory.mktemp("joint"), languages=("fra", "deu"))


@pytest.fixture(scope="module")
def separate(tmp_path_factory) -> Path:
    """A model folder with a source and a target vocabulary of their own."""
    return write_marian_model(tmp_path_factory.mktemp("separate"), tied_all=False)


def joint_pair(folder: Path) -> SentencePiecePair:
    pieces = marian_pieces(folder / "opus.vocab.yml")
    return SentencePiecePair((folder / "source.spm").read_bytes(),
                             (folder / "target.spm").read_bytes(), pieces, pieces)


def separate_pair(folder: Path) -> SentencePiecePair:
    return SentencePiecePair((folder / "source.spm").read_bytes(),
                             (folder / "target.spm").read_bytes(),
                             marian_pieces(folder / "opus.src.vocab.yml"),
                             marian_pieces(folder / "opus.trg.vocab.yml"))


def through_vocabulary(folder: Path, side: str, pieces: list, texts: list) -> list:
    """`texts` as the `side` SentencePiece model of `folder` splits them, mapped to our ids
    through `pieces` (unknown: UNK): the reference for the in-graph tokenizer."""
    processor = spm.SentencePieceProcessor(model_file=str(folder / f"{side}.spm"))
    index = {piece: i for i, piece in enumerate(pieces)}
    return [[index.get(piece, UNK_ID) for piece in processor.encode(text, out_type=str)]
            for text in texts]


def _decode(strings: tf.Tensor) -> list:
    return [text.decode("utf-8") for text in strings.numpy().tolist()]


def test_tokenize_maps_source_pieces_through_the_vocabulary(separate):
    pair = separate_pair(separate)
    sources = training_sentences()[0][:40] + PLAIN
    expected = through_vocabulary(separate, "source",
                                  marian_pieces(separate / "opus.src.vocab.yml"), sources)
    ids = pair.tokenize(tf.constant(sources))
    assert ids.dtype == tf.int32
    assert ids.to_list() == expected
    assert [pair.encode(text) for text in sources] == expected
    assert UNK_ID in ids.flat_values.numpy()  # 字 and Ω are no source pieces
    assert pair.vocab_size == len(marian_pieces(separate / "opus.src.vocab.yml"))
    assert pair.target_vocab_size == len(marian_pieces(separate / "opus.trg.vocab.yml"))
    assert pair.vocab_size != pair.target_vocab_size


def test_a_piece_missing_from_the_vocabulary_is_unk(joint):
    pieces = marian_pieces(joint / "opus.vocab.yml")
    pair = SentencePiecePair((joint / "source.spm").read_bytes(),
                             (joint / "target.spm").read_bytes(),
                             [piece for piece in pieces if piece != "▁one"], pieces)
    processor = spm.SentencePieceProcessor(model_file=str(joint / "source.spm"))
    assert "▁one" in processor.encode("I one two.", out_type=str)
    ids = pair.tokenize(tf.constant(["I one two."]))[0].numpy().tolist()
    assert ids.count(UNK_ID) == 1 and pair.encode("I one two.") == ids


@pytest.mark.parametrize("text, tag, rest", [
    (">>fra<< I one two.", ">>fra<<", "I one two."),
    (">>deu<<I one", ">>deu<<", "I one"),
    (">>deu<<\t \nthe dog", ">>deu<<", "the dog"),
    (">>fra<<", ">>fra<<", ""),
    (">>xyz<< the dog", None, "the dog"),  # no source piece: UNK
    ("the dog >>fra<<", "", "the dog >>fra<<"),  # not leading: SentencePiece's
    (">>f ra<< the", "", ">>f ra<< the"),  # no token
])
def test_a_leading_language_token_maps_to_its_own_id(joint, text, tag, rest):
    pair = joint_pair(joint)
    pieces = marian_pieces(joint / "opus.vocab.yml")
    expected = ([] if tag == "" else [pieces.index(tag) if tag else UNK_ID])
    expected += through_vocabulary(joint, "source", pieces, [rest])[0]
    assert pair.tokenize(tf.constant([text]))[0].numpy().tolist() == expected
    assert pair.encode(text) == expected


def test_detokenize_round_trips_target_text(joint, separate):
    targets = training_sentences()[1]
    # A pair whose source side is the target model: text in, the same text out.
    pieces = marian_pieces(joint / "opus.vocab.yml")
    target_model = (joint / "target.spm").read_bytes()
    same = SentencePiecePair(target_model, target_model, pieces, pieces)
    assert _decode(same.detokenize(same.tokenize(tf.constant(targets)))) == targets
    # Decoder output: BOS first, EOS then padding or anything after it.
    pair = separate_pair(separate)
    rows = through_vocabulary(separate, "target", marian_pieces(separate / "opus.trg.vocab.yml"),
                              targets)
    width = max(map(len, rows)) + 3
    dense = np.array([[BOS_ID] + row + [EOS_ID, 7] + [PAD_ID] * (width - len(row) - 3)
                      for row in rows], np.int32)
    assert _decode(pair.detokenize(dense)) == targets
    assert _decode(pair.detokenize(tf.ragged.constant(rows, tf.int32))) == targets


def test_pieces_are_the_target_sides(separate):
    pair = separate_pair(separate)
    target_pieces = marian_pieces(separate / "opus.trg.vocab.yml")
    ids = list(range(pair.target_vocab_size))
    assert pair.id_to_piece(ids) == target_pieces
    assert pair.id_to_piece([pair.target_vocab_size, -1]) == ["<unk>", "<unk>"]
    assert _decode(pair.pieces(tf.constant([[4, 5]]))[0]) == target_pieces[4:6]
    assert target_pieces != marian_pieces(separate / "opus.src.vocab.yml")[:len(ids)]


@pytest.mark.parametrize("change, argument, message", [
    (lambda p: p[1:], "source_pieces", "must start with"),
    (lambda p: [p[0], p[2], p[1]] + p[3:], "source_pieces", "must start with"),
    (lambda p: p + [p[7]], "source_pieces", "is at ids 7 and"),
    (lambda p: p + [None], "source_pieces", r"source_pieces\[\d+\]: None is not a string"),
])
def test_bad_pieces_are_refused(joint, change, argument, message):
    pieces = marian_pieces(joint / "opus.vocab.yml")
    model = (joint / "source.spm").read_bytes()
    with pytest.raises(ValueError, match=message):
        SentencePiecePair(model, model, change(pieces), pieces)
    with pytest.raises(ValueError, match="target_pieces"):
        SentencePiecePair(model, model, pieces, change(pieces))


def test_a_bad_model_is_refused(joint):
    pieces = marian_pieces(joint / "opus.vocab.yml")
    model = (joint / "source.spm").read_bytes()
    with pytest.raises(ValueError, match="target_model: not a serialized SentencePiece"):
        SentencePiecePair(model, b"not a model", pieces, pieces)


def test_save_and_load_round_trip(separate, tmp_path):
    pair = separate_pair(separate)
    pair.save(tmp_path / "vocab")
    assert sorted(path.name for path in (tmp_path / "vocab").iterdir()) == [
        "source.spm", "target.spm", "vocabulary.json"]
    loaded = SentencePiecePair.load(tmp_path / "vocab")
    texts = tf.constant(PLAIN + [">>fra<< the dog"])
    assert loaded.tokenize(texts).to_list() == pair.tokenize(texts).to_list()
    ids = tf.constant([[4, 5, 6, EOS_ID], [9, 10, PAD_ID, PAD_ID]])
    assert _decode(loaded.detokenize(ids)) == _decode(pair.detokenize(ids))
    assert loaded.id_to_piece(range(loaded.target_vocab_size)) == pair.id_to_piece(
        range(pair.target_vocab_size))
    assert (loaded.vocab_size, loaded.target_vocab_size) == (pair.vocab_size,
                                                             pair.target_vocab_size)


def test_load_names_what_is_wrong(joint, tmp_path):
    joint_pair(joint).save(tmp_path)
    vocabulary = tmp_path / "vocabulary.json"
    vocabulary.write_text(json.dumps({"source": ["<pad>"], "target": []}))
    with pytest.raises(ValueError, match=f"{tmp_path}: source_pieces: must start with"):
        SentencePiecePair.load(tmp_path)
    vocabulary.write_text('{"source": [')
    with pytest.raises(ValueError, match=f"{vocabulary}: not JSON"):
        SentencePiecePair.load(tmp_path)
    vocabulary.write_text('["<pad>"]')
    with pytest.raises(ValueError, match=f"{vocabulary}: expected"):
        SentencePiecePair.load(tmp_path)
    (tmp_path / "target.spm").unlink()
    with pytest.raises(FileNotFoundError, match="target.spm"):
        SentencePiecePair.load(tmp_path)


def test_load_tokenizer_picks_the_kind_saved(joint, tmp_path):
    sources, targets = training_sentences()
    SubwordTokenizer.train(sources + targets, 320, tmp_path / "subword")
    joint_pair(joint).save(tmp_path / "pair")
    assert type(load_tokenizer(tmp_path / "subword")) is SubwordTokenizer
    assert type(load_tokenizer(tmp_path / "pair")) is SentencePiecePair
    (tmp_path / "empty").mkdir()
    with pytest.raises(FileNotFoundError, match=f"no tokenizer in '{tmp_path / 'empty'}'"):
        load_tokenizer(tmp_path / "empty")
    (tmp_path / "subword" / "vocabulary.json").write_text("{}")
    with pytest.raises(ValueError, match="holds both"):
        load_tokenizer(tmp_path / "subword")


def test_kt_prepare_segments_each_side_with_its_own_model(joint, tmp_path):
    """Token storage of a pair: the sources' ids as `tokenize` gives them (language token
    included), the targets' as `tokenize_target` does, in Python."""
    from keras_transformer.data.token_storage import TokenStorage

    pair = joint_pair(joint)
    pair.save(tmp_path / "pair")
    sources, targets = training_sentences(20)
    sources = [f">>fra<< {source}" for source in sources]
    (tmp_path / "train.src").write_text("\n".join(sources) + "\n", encoding="utf-8")
    (tmp_path / "train.tgt").write_text("\n".join(targets) + "\n", encoding="utf-8")
    status = prepare_cli.main(["--train-src", str(tmp_path / "train.src"), "--train-tgt",
                               str(tmp_path / "train.tgt"), "--vocab", str(tmp_path / "pair"),
                               "--output-dir", str(tmp_path / "prepared")])
    assert status == 0
    storage = TokenStorage.open(tmp_path / "prepared")
    stored = {}
    for index, info in enumerate(storage.shards):
        shard = storage.load_shard(index)
        for number in range(info.pairs):
            source, target = shard.pair(number)
            stored[tuple(source.tolist())] = tuple(target.tolist())
    expected_sources = pair.tokenize(tf.constant(sources)).to_list()
    expected_targets = pair.tokenize_target(tf.constant(targets)).to_list()
    assert stored == {tuple(source): tuple(target)
                      for source, target in zip(expected_sources, expected_targets)}
    assert pair.encode_batch(sources) == expected_sources


class _Holder(tf.Module):
    """A module holding a tokenizer, with a signature that uses both sides."""

    def __init__(self, tokenizer: SentencePiecePair):
        super().__init__()
        self.tokenizer = tokenizer

    @tf.function(input_signature=[tf.TensorSpec([None], tf.string),
                                  tf.TensorSpec([None, None], tf.int32)])
    def run(self, texts, target_ids):
        return self.tokenizer.tokenize(texts).to_tensor(), self.tokenizer.detokenize(target_ids)


def test_a_saved_model_keeps_each_side_its_own_model(separate, tmp_path):
    """Restored, the source and the target SentencePiece models stay apart (one name would
    make them one resource, the source model)."""
    pair = separate_pair(separate)
    targets = training_sentences()[1][:20]
    rows = through_vocabulary(separate, "target", marian_pieces(separate / "opus.trg.vocab.yml"),
                              targets)
    target_ids = tf.ragged.constant(rows, tf.int32).to_tensor()
    texts = tf.constant(PLAIN + [">>fra<< the dog"])
    tf.saved_model.save(_Holder(pair), str(tmp_path / "saved"))
    loaded = tf.saved_model.load(str(tmp_path / "saved"))
    ids, words = loaded.run(texts, target_ids)
    assert ids.numpy().tolist() == pair.tokenize(texts).to_tensor().numpy().tolist()
    assert _decode(words) == targets


@pytest.mark.slow
def test_an_export_ships_and_uses_the_pair(joint, tmp_path):
    pair = joint_pair(joint)
    model = kt.Transformer(kt.TransformerConfig.preset(
        "tiny", vocab_size=pair.vocab_size, num_layers=1, max_length=24))
    settings = SearchSettings(beam_size=2, max_decode_extra=4)
    version = export_translator(model, pair, "imported", tmp_path, settings)
    assert {"source.spm", "target.spm", "vocabulary.json"} <= {
        path.name for path in (Path(version) / "assets").iterdir()}
    exported = LineTranslator.from_saved_model(version)
    assert type(exported.tokenizer) is SentencePiecePair
    texts = [">>fra<< I one two.", "my friend sees the dog", ""]
    local = TranslationModule(model, pair, settings).translate(tf.constant(texts))
    assert exported.best([text.encode() for text in texts])[0] == (
        local["translation"].numpy().tolist())
    assert len(exported.nbest([text.encode() for text in texts], 2)) == 3
