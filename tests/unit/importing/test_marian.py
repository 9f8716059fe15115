"""Marian (OPUS-MT) models imported: judged by CTranslate2's own converter of the same folder
(an implementation we did not write), on random models of every architecture option."""
import json

import numpy as np
import pytest
import tensorflow as tf
import yaml

import keras_transformer as kt
from keras_transformer.importing.huggingface import read_huggingface_folder
from keras_transformer.importing.imported_model import ImportFormatError
from keras_transformer.importing.marian import read_marian_folder
from keras_transformer.importing.run_directory import (IMPORT_FILE, imported_transformer,
                                                       write_imported_run)
from marian_models import (MarianVariant, tokenize, training_sentences, write_huggingface_folder,
                           write_marian_model)

ctranslate2 = pytest.importorskip("ctranslate2")
from ctranslate2.converters import OpusMTConverter  # noqa: E402

VARIANTS = {
    "post_swish_tied_all": MarianVariant(),
    "pre_relu_top_norm": MarianVariant(norm="pre", activation="relu", enc_depth=3,
                                       dec_depth=2),
    "gelu_separate_vocabularies": MarianVariant(activation="gelu", tied_all=False),
    "embedding_norm_learned_positions": MarianVariant(embedding_norm=True,
                                                      learned_positions=True),
    "untied_output_2_1": MarianVariant(tied_all=False, tied_output=False, dec_depth=1),
    "multi_target_pre_embedding_norm": MarianVariant(norm="pre", embedding_norm=True,
                                                     languages=("fra", "deu")),
}


def ctranslate2_translator(folder, tmp_path):
    """CTranslate2's own conversion of the Marian folder, loaded."""
    converted = OpusMTConverter(str(folder)).convert(str(tmp_path / "ct2"), force=True)
    return ctranslate2.Translator(converted, device="cpu", intra_threads=1)


def ids_of(pieces, vocabulary):
    index = {piece: number for number, piece in enumerate(vocabulary)}
    return [index.get(piece, kt.UNK_ID) for piece in pieces]


def teacher_forced_log_probs(model, source_ids, target_ids):
    """Our model's log-probability of each target token and of the EOS after them."""
    source = tf.constant([source_ids + [kt.EOS_ID]], tf.int32)
    target_in = tf.constant([[kt.BOS_ID] + target_ids], tf.int32)
    log_probs = tf.nn.log_softmax(model((source, target_in), training=False)[0]).numpy()
    return log_probs[np.arange(len(target_ids) + 1), target_ids + [kt.EOS_ID]]


def sentence_pairs(folder, variant, count):
    sources, targets = training_sentences(count, seed=7)
    language = variant.languages[0] if variant.languages else None
    return [(tokenize(folder, source, "source", language), tokenize(folder, target, "target"))
            for source, target in zip(sources, targets)]


# Two variants in the quick tier, every one in the whole suite (3-4 s each).
@pytest.mark.parametrize("name", [
    pytest.param(name, marks=[] if name in ("post_swish_tied_all", "untied_output_2_1")
                 else [pytest.mark.slow]) for name in VARIANTS])
def test_imported_log_probs_equal_ctranslate2s(name, tmp_path):
    variant = VARIANTS[name]
    folder = write_marian_model(tmp_path / "marian", variant)
    imported = read_marian_folder(folder)
    model = imported_transformer(imported)
    translator = ctranslate2_translator(folder, tmp_path)
    pairs = sentence_pairs(folder, variant, 12)
    results = translator.score_batch([source for source, _ in pairs],
                                     [target for _, target in pairs])
    for (source, target), result in zip(pairs, results):
        ours = teacher_forced_log_probs(model, ids_of(source, imported.source_pieces),
                                        ids_of(target, imported.target_pieces))
        np.testing.assert_allclose(ours, result.log_probs, atol=1e-4)


def test_refusals_name_the_option_and_write_nothing(tmp_path):
    folder = write_marian_model(tmp_path / "marian", MarianVariant())
    npz = folder / "model.npz"
    arrays = dict(np.load(npz))
    options = yaml.safe_load(arrays["special:model.yml"].tobytes().rstrip(b"\0").decode())
    for option, value in (("transformer-decoder-autoreg", "rnn"), ("type", "s2s"),
                          ("transformer-tied-layers", [1, 1]),
                          ("transformer-ffn-activation", "tanh")):
        edited = yaml.safe_dump({**options, option: value})
        arrays["special:model.yml"] = np.frombuffer(edited.encode() + b"\0", np.int8)
        np.savez(npz, **arrays)
        with pytest.raises(ImportFormatError, match=option):
            write_imported_run(read_marian_folder(folder), tmp_path / "run", str(folder),
                               "marian")
        assert not (tmp_path / "run").exists()
    npz.write_bytes(npz.read_bytes()[:1000])
    with pytest.raises(ImportFormatError, match="model.npz.*truncated or corrupt"):
        read_marian_folder(folder)


def test_a_vocabulary_of_another_model_is_refused(tmp_path):
    folder = write_marian_model(tmp_path / "marian", MarianVariant())
    vocabulary = folder / "opus.vocab.yml"
    vocabulary.write_text(vocabulary.read_text().replace("▁", "_"))
    with pytest.raises(ImportFormatError, match="opus.vocab.yml.*not in its SentencePiece"):
        read_marian_folder(folder)


def test_the_run_directory_records_the_origin(tmp_path):
    folder = write_marian_model(tmp_path / "marian", MarianVariant())
    (folder / "LICENSE").write_text("CC-BY 4.0\n")
    run = write_imported_run(read_marian_folder(folder), tmp_path / "run", str(folder),
                             "marian")
    record = json.loads((run.root / IMPORT_FILE).read_text())
    assert record["format"] == "marian" and record["origin"] == str(folder)
    assert set(record["files"]) >= {"model.npz", "opus.vocab.yml", "source.spm", "target.spm"}
    assert record["notices"] == {"LICENSE": "CC-BY 4.0\n"}
    assert run.load_recipe().architecture.output_bias
    assert run.languages() is None  # one target language: no >>xx<< tokens
    with pytest.raises(ValueError, match="exists"):
        write_imported_run(read_marian_folder(folder), run.root, str(folder), "marian")


@pytest.mark.parametrize("name", ["post_swish_tied_all", "multi_target_pre_embedding_norm"])
def test_greedy_translations_equal_ctranslate2s(name, tmp_path):
    """50 sentences, as pieces: the same argmax at every step, to the same length limit."""
    variant, extra = VARIANTS[name], 8
    folder = write_marian_model(tmp_path / "marian", variant)
    imported = read_marian_folder(folder)
    model = imported_transformer(imported)
    sources = [source for source, _ in sentence_pairs(folder, variant, 50)]
    translator = ctranslate2_translator(folder, tmp_path)
    theirs = [translator.translate_batch([source], beam_size=1, min_decoding_length=0,
                                         max_decoding_length=len(source) + 1 + extra)[0]
              for source in sources]
    ids = [ids_of(source, imported.source_pieces) + [kt.EOS_ID] for source in sources]
    width = max(map(len, ids))
    batch = tf.constant([row + [kt.PAD_ID] * (width - len(row)) for row in ids], tf.int32)
    ours = kt.decoding.greedy_decode(model, batch, max_decode_extra=extra).ids.numpy()
    for row, result in zip(ours[:, 0], theirs):
        pieces = [imported.target_pieces[index] for index in row
                  if index not in (kt.PAD_ID, kt.BOS_ID, kt.EOS_ID)]
        assert pieces == result.hypotheses[0]


@pytest.mark.parametrize("name, layout", [
    ("post_swish_tied_all", "transformers4"), ("untied_output_2_1", "transformers4"),
    ("post_swish_tied_all", "transformers5"), ("untied_output_2_1", "transformers5")])
def test_the_hugging_face_layout_imports_the_same_model(name, layout, tmp_path):
    """The same weights in Hugging Face's layout (transposed, renamed, a padding row appended),
    as transformers 4 and 5 save it: the same config, weights and vocabularies as the native
    import, so the same log-probabilities; the beam size from config.json, or
    generation_config.json where transformers 5 keeps it."""
    native_folder = write_marian_model(tmp_path / "marian", VARIANTS[name])
    native = read_marian_folder(native_folder)
    folder = write_huggingface_folder(native_folder, tmp_path / "hf", layout)
    converted = read_huggingface_folder(folder)
    config = json.loads((folder / "config.json").read_text())
    generation = folder / "generation_config.json"
    assert converted.beam_size == (json.loads(generation.read_text())["num_beams"]
                                   if generation.is_file() else config["num_beams"])
    assert converted.config == native.config
    assert (converted.source_pieces, converted.target_pieces) == (native.source_pieces,
                                                                  native.target_pieces)
    assert set(converted.arrays) == set(native.arrays)
    for key, array in native.arrays.items():
        np.testing.assert_array_equal(converted.arrays[key], array, err_msg=key)


def test_a_hugging_face_folder_without_safetensors_is_refused_by_name(tmp_path):
    folder = write_huggingface_folder(write_marian_model(tmp_path / "marian"), tmp_path / "hf")
    (folder / "model.safetensors").rename(folder / "pytorch_model.bin")
    with pytest.raises(ImportFormatError, match="pytorch_model.bin: a PyTorch .bin needs torch"):
        read_huggingface_folder(folder)


def test_kt_import_writes_a_run_or_refuses_by_name(tmp_path, capsys, monkeypatch):
    """A folder given relative to the working directory is recorded as its absolute path (as
    an export records its run); a folder that does not exist is named so."""
    from trainers import import_model

    marian_folder = write_marian_model(tmp_path / "marian")
    hf_folder = write_huggingface_folder(marian_folder, tmp_path / "hf")
    monkeypatch.chdir(tmp_path)
    assert import_model.main(["hf", "--output-dir", str(tmp_path / "run")]) == 0
    record = json.loads((tmp_path / "run" / IMPORT_FILE).read_text())
    assert record["format"] == "huggingface" and record["origin"] == str(hf_folder)
    assert "2+2 layers" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        import_model.main(["nothere/", "--output-dir", str(tmp_path / "run3")])
    assert "folder: 'nothere/' does not exist" in capsys.readouterr().err
    (marian_folder / "source.spm").unlink()
    assert import_model.main([str(marian_folder), "--output-dir", str(tmp_path / "run2")]) == 2
    assert "source.spm: no such file" in capsys.readouterr().err
    assert not (tmp_path / "run2").exists()
