"""Subword tokenizer: lossless round trip, determinism, reload, in-graph use."""
import sys
from pathlib import Path

import pytest
import tensorflow as tf

from keras_transformer.data import SubwordTokenizer, read_parallel
from keras_transformer.config import BOS_ID, EOS_ID, PAD_ID, UNK_ID


def _decode(strings: tf.Tensor) -> list[str]:
    return [s.decode("utf-8") for s in strings.numpy().tolist()]


def test_round_trip_is_lossless_on_multi30k_val(
    multi30k: Path, multi30k_tokenizer: SubwordTokenizer
) -> None:
    english, german = read_parallel(multi30k / "val.en.gz", multi30k / "val.de.gz")
    for texts in (english, german):
        ids = multi30k_tokenizer.tokenize(tf.constant(texts))
        assert ids.dtype == tf.int32
        assert _decode(multi30k_tokenizer.detokenize(ids)) == texts


def test_unseen_characters_survive_through_bytes(demo_tokenizer: SubwordTokenizer) -> None:
    texts = ["Straße naïve 日本 ☃  two  spaces", "I have forty-two apples"]
    ids = demo_tokenizer.tokenize(tf.constant(texts))
    assert UNK_ID not in ids.flat_values.numpy()
    assert _decode(demo_tokenizer.detokenize(ids)) == texts


@pytest.mark.parametrize("level, shown, vocab_size", [("0", True, 290), ("3", False, 291)])
def test_sentencepiece_info_line_follows_tensorflow_log_level(
        capfd, monkeypatch, tmp_path: Path, level: str, shown: bool, vocab_size: int) -> None:
    """Parsing a new model logs "normalizer.cc(51) LOG(INFO) precompiled_charsmap is empty ..."
    to stderr (once per model and process: each case trains its own): hidden where
    TensorFlow's INFO lines are (the command lines' quiet start), other output kept."""
    monkeypatch.setenv("TF_CPP_MIN_LOG_LEVEL", level)
    texts = [f"sentence number {i} about {i * 7 % 13} things" for i in range(300)]
    capfd.readouterr()
    print("kept", file=sys.stderr)
    SubwordTokenizer.train(texts, vocab_size, tmp_path)
    err = capfd.readouterr().err
    assert "kept" in err and ("LOG(INFO)" in err) == shown


def test_reload_gives_identical_ids(tmp_path: Path, demo_tokenizer: SubwordTokenizer) -> None:
    demo_tokenizer.save(tmp_path / "vocab")
    reloaded = SubwordTokenizer.load(tmp_path / "vocab")
    texts = tf.constant(["she buys forty-two books", "sie kauft zweiundvierzig Bücher"])
    assert reloaded.model_proto == demo_tokenizer.model_proto
    assert reloaded.vocab_size == demo_tokenizer.vocab_size == 500
    assert reloaded.tokenize(texts).to_list() == demo_tokenizer.tokenize(texts).to_list()


def test_training_is_deterministic(tmp_path: Path) -> None:
    texts = [f"sentence number {i} about {i * 7 % 13} things" for i in range(300)]
    first = SubwordTokenizer.train(texts, 300, tmp_path / "a")
    second = SubwordTokenizer.train(list(texts), 300, tmp_path / "b")
    assert first.model_proto == second.model_proto
    assert (tmp_path / "a" / "spm.model").read_bytes() == first.model_proto


def test_special_ids_and_pieces(demo_tokenizer: SubwordTokenizer) -> None:
    assert demo_tokenizer.id_to_piece([PAD_ID, UNK_ID, BOS_ID, EOS_ID]) == [
        "<pad>", "<unk>", "<s>", "</s>"
    ]
    ids = demo_tokenizer.tokenize(tf.constant(["we see forty-two dogs"]))[0].numpy()
    assert "".join(demo_tokenizer.id_to_piece(ids)).replace("▁", " ").strip() == (
        "we see forty-two dogs"
    )


def test_detokenize_stops_at_eos_and_skips_padding(demo_tokenizer: SubwordTokenizer) -> None:
    ids = demo_tokenizer.tokenize(tf.constant(["ich habe zwölf Äpfel"]))[0].numpy().tolist()
    garbage = demo_tokenizer.tokenize(tf.constant(["null"]))[0].numpy().tolist()
    batch = tf.constant([[BOS_ID] + ids + [EOS_ID] + garbage + [PAD_ID] * 3])
    assert _decode(demo_tokenizer.detokenize(batch)) == ["ich habe zwölf Äpfel"]


def test_load_missing_vocabulary_is_a_clear_error(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError, match="spm.model"):
        SubwordTokenizer.load(tmp_path)


def test_too_large_vocabulary_is_a_clear_error(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="vocab_size=100000"):
        SubwordTokenizer.train(["a b c", "d e f"], 100000, tmp_path)


def test_survives_saved_model_export(tmp_path: Path, demo_tokenizer: SubwordTokenizer) -> None:
    module = tf.Module()
    module.tokenizer = demo_tokenizer
    module.round_trip = tf.function(
        lambda texts: demo_tokenizer.detokenize(demo_tokenizer.tokenize(texts)),
        input_signature=[tf.TensorSpec([None], tf.string)],
    )
    tf.saved_model.save(module, str(tmp_path / "export"))
    restored = tf.saved_model.load(str(tmp_path / "export"))
    texts = ["wir sehen dreihundertsieben Hunde"]
    assert _decode(restored.round_trip(tf.constant(texts))) == texts
