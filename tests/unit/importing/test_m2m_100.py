"""kt-import of NLLB-200 and M2M-100 folders in the Hugging Face layout (tiny random models,
tests/m2m_100_models.py), and the commands on the run it writes: the vocabulary numbered as the
model's own tokenizer numbers it, the languages of both sides, the licence, refusals before any
file is written, kt-translate with --source-language and --target-language (codes and ISO
aliases), and the SavedModel and CTranslate2 exports translating as the run does. Exactness
against transformers' `M2M100ForConditionalGeneration` and CTranslate2's own conversion of the
same folders is benchmarks/m2m_100_parity.py's (a separate environment; RESULTS.md)."""
import io
import json
import shutil

import numpy as np
import pytest
import tensorflow as tf
from tensorflow.core.protobuf import saved_model_pb2

from keras_transformer.config import BOS_ID, EOS_ID, PAD_ID, UNK_ID
from keras_transformer.data.sentencepiece_pair import load_tokenizer
from keras_transformer.decoding.translator import IntoLanguage, TranslationModule
from keras_transformer.importing.imported_model import (NEVER_EMITTED_BIAS, ImportFormatError,
                                                        RowBlocks)
from keras_transformer.importing.m2m_100 import read_m2m_100_folder
from keras_transformer.training.run_dir import IMPORT_FILE, RunDir
from helpers import final_weights
from m2m_100_models import (M2MVariant, random_tensors, training_sentences, vocabulary,
                            write_m2m_100_folder)
from trainers import export, import_model, translate
from trainers.common import load_run_model

EXTRA = 4
SEARCH = ["--beam-size", "1", "--max-decode-extra", str(EXTRA)]


@pytest.fixture(scope="module")
def nllb(tmp_path_factory) -> dict:
    """An NLLB-style folder, the run kt-import wrote from it, and an input file. One layer a
    side: what the commands on it prove does not depend on depth (the importer's tests read
    deeper models), and each traces half the graph."""
    root = tmp_path_factory.mktemp("nllb")
    folder = write_m2m_100_folder(root / "hf", M2MVariant(style="nllb", encoder_layers=1))
    assert import_model.main([str(folder), "--output-dir", str(root / "run")]) == 0
    sources, _ = training_sentences(12, seed=7)
    lines = [*sources[:3], "", *sources[3:]]
    (root / "input.en").write_text("".join(line + "\n" for line in lines), encoding="utf-8")
    return {"folder": folder, "run": root / "run", "input": root / "input.en", "lines": lines,
            "emitted": _emitting_a_code(root / "run", lines)}


EMITTED_CODE = "zho_Hant"  # a code no command of these tests asks for


def _emitting_a_code(run, lines: list) -> list:
    """Arrange the run to translate into text with `EMITTED_CODE` inside a translation, and
    return its greedy ids of `lines` from and into `LANGUAGES` (up to EOS). A random model
    emits the codes it reads (the source's, the forced target's) at nearly every step: their
    embedding rows, tied to the output, are scaled to a tenth (their logits small, their
    inputs distinct). Then `EMITTED_CODE`'s row becomes 1.1 times that of a piece a
    translation emits after another: the steps before it are unchanged (the code is in no
    input), and there the code's logit is 1.1 times the piece's, the largest. (Random models
    repeat a piece: the piece is the first that follows another one.)"""
    from keras_transformer.config import SearchSettings

    model, tokenizer = load_run_model(str(run))
    codes = RunDir(run).languages().token_ids
    greedy = SearchSettings(beam_size=1, max_decode_extra=EXTRA)
    translator = TranslationModule(model, tokenizer, greedy, languages=RunDir(run).languages())
    rows = tf.ragged.constant([tokenizer.encode(line) for line in lines]).to_tensor()

    def greedy_ids() -> list:  # reads the embedding variable as it is at each call
        ids = translator.translate_ids(rows, tf.fill([len(lines)], "zho_Hans"),
                                       tf.fill([len(lines)], "deu_Latn"))["ids"].numpy()
        return [[index for index in (row[:row.index(EOS_ID)] if EOS_ID in row else row)
                 if index != PAD_ID] for row in ids.tolist()]

    embedding = model.source_embedding.embeddings
    rows_now = embedding.numpy()
    rows_now[list(codes.values())] *= 0.1
    embedding.assign(rows_now)
    changed = next((row[step] for row in greedy_ids() for step in range(1, len(row))
                    if row[step] != row[step - 1]), None)
    assert changed is not None, "every translation repeats one piece: nothing follows another"
    rows_now[codes[EMITTED_CODE]] = 1.1 * rows_now[changed]
    embedding.assign(rows_now)
    model.save_weights(RunDir(run).final_weights)
    return greedy_ids()


def run_translate(argv: list) -> list:
    stdout = io.StringIO()
    assert translate.main([*argv, "--quiet"], stdout=stdout) == 0
    return stdout.getvalue().split("\n")[:-1]


# Neither the model's first source nor its first target language: both read from the request.
LANGUAGES = ["--source-language", "deu_Latn", "--target-language", "zho_Hans"]


@pytest.fixture(scope="module")
def translated(nllb) -> list:
    """kt-translate's greedy translations of the input lines by the NLLB run, from and into
    `LANGUAGES`: what its exports, kt-evaluate and kt-translate-corpus must give."""
    return run_translate([str(nllb["run"]), str(nllb["input"]), *SEARCH, *LANGUAGES])


@pytest.mark.parametrize("style, layout, mask_first", [
    ("nllb", "transformers4", False), ("m2m100", "transformers4", False),
    ("nllb", "transformers5", False), ("nllb", "transformers5", True),
    ("nllb", "transformers4", True), ("m2m100", "transformers5", False)])
def test_every_token_keeps_the_id_its_own_tokenizer_gives_it(style, layout, mask_first,
                                                             tmp_path):
    """Pieces and language codes at the model's own ids (NLLB: SentencePiece id + 1; M2M-100:
    vocab.json's, in an order of its own), in transformers 4's layout and 5's (codes as
    `extra_special_tokens`, ids in tokenizer.json; M2M-100's by `language_codes`), `<mask>`
    before the codes where the tokenizer puts it there; our special ids reading their rows (our
    BOS and EOS both their `</s>`), the output bias keeping padding and BOS from being
    emitted; the codes, `<mask>` and `<unk>` are no text."""
    variant = M2MVariant(style=style, seed=5, layout=layout, mask_first=mask_first)
    folder = write_m2m_100_folder(tmp_path / style, variant)
    imported = read_m2m_100_folder(folder)
    theirs = vocabulary(folder)
    assert [token for token, index in theirs.items() if index >= 4
            and imported.source_pieces[index] != token] == []
    codes = {(token[2:-2] if style == "m2m100" else token): theirs[token]
             for token in variant.language_tokens}
    assert imported.languages.token_ids == codes
    if style == "nllb":
        mask = imported.source_pieces.index("<mask>")
        assert (mask < min(codes.values())) == mask_first
        assert mask == (min if mask_first else max)(codes.values()) + (-1 if mask_first else 1)
    assert set(imported.control_pieces) >= {"<unk>", *variant.language_tokens}
    assert not set(imported.control_pieces) & set(theirs) - {"<unk>", *variant.language_tokens}
    assert imported.languages.placement == "target"
    assert imported.languages.source_language_token
    from safetensors.numpy import load_file

    embedding = load_file(str(folder / "model.safetensors"))["model.shared.weight"]
    blocks = imported.arrays["shared_embedding/embeddings"]
    assert isinstance(blocks, RowBlocks)  # read a block of rows at a time, never whole
    ours = np.asarray(blocks)
    # a block after the first is those rows of theirs; the first has our special rows
    np.testing.assert_array_equal(blocks.rows(5, 9), embedding[5:9])
    np.testing.assert_array_equal(blocks.rows(0, 6), ours[:6])
    for our_id, their_id in ((PAD_ID, 1), (UNK_ID, 3), (BOS_ID, 2), (EOS_ID, 2)):
        np.testing.assert_array_equal(ours[our_id], embedding[their_id])
    np.testing.assert_array_equal(ours[4:], embedding[4:])
    bias = imported.arrays["output_bias"]
    assert set(np.flatnonzero(bias)) == {PAD_ID, BOS_ID} and bias[BOS_ID] == NEVER_EMITTED_BIAS
    config = imported.config
    assert (config.norm, config.sinusoid_layout, config.position_offset,
            config.layer_norm_epsilon) == ("pre", "fairseq", 2, 1e-5)


def test_sharded_and_unscaled_models_import(tmp_path):
    """Shards named by the index give the arrays one file gives; scale_embedding false is
    kept, and the model then reads its embeddings unscaled."""
    variant = M2MVariant(scale_embedding=False, encoder_layers=3, decoder_layers=2, seed=4)
    whole = read_m2m_100_folder(write_m2m_100_folder(tmp_path / "whole", variant))
    sharded = read_m2m_100_folder(write_m2m_100_folder(tmp_path / "sharded", variant,
                                                       sharded=True))
    assert sorted(whole.arrays) == sorted(sharded.arrays)
    for name, array in whole.arrays.items():
        np.testing.assert_array_equal(array, sharded.arrays[name])
    assert not whole.config.scale_embedding
    from keras_transformer.importing.run_directory import imported_transformer

    model = imported_transformer(whole)
    blocked = imported_transformer(whole, rows_bytes=3 * 4 * whole.config.d_model)
    for ours, theirs in zip(blocked.weights, model.weights):  # assigned 3 rows at a time
        np.testing.assert_array_equal(ours.numpy(), theirs.numpy(), err_msg=ours.path)
    ids = tf.constant([[5, 6, 7]])
    np.testing.assert_allclose(model.source_embedding(ids).numpy(),
                               np.asarray(whole.arrays["shared_embedding/embeddings"])[[[5, 6, 7]]])


@pytest.mark.parametrize("change, message", [
    ({"model_type": "nllb-moe"}, "NLLB-MoE"),
    ({"num_experts": 4}, "NLLB-MoE"),
    ({"decoder_attention_heads": 2}, "decoder_attention_heads 2 differ"),
    ({"activation_function": "tanh"}, "activation_function 'tanh'"),
    ({"vocab_size": 100}, "beyond the model's vocab_size 100"),
])
def test_what_cannot_be_imported_is_refused_by_name_before_any_file(change, message, tmp_path):
    folder = write_m2m_100_folder(tmp_path / "hf", M2MVariant(seed=6))
    config = json.loads((folder / "config.json").read_text())
    (folder / "config.json").write_text(json.dumps({**config, **change}))
    with pytest.raises(ImportFormatError, match=message):
        read_m2m_100_folder(folder)
    assert import_model.main([str(folder), "--output-dir", str(tmp_path / "run")]) == 2
    assert not (tmp_path / "run").exists()


def _edit_json(path, change) -> None:
    record = json.loads(path.read_text())
    change(record)
    path.write_text(json.dumps(record))


def _added(record: dict, token: str) -> dict:
    return next(entry for entry in record["added_tokens"] if entry["content"] == token)


@pytest.mark.parametrize("style, edit, message", [
    ("nllb", lambda folder: _edit_json(
        folder / "tokenizer_config.json",
        lambda record: record.update(added_tokens_decoder={"300": {"content": "fra_Latn"}})),
     r"tokenizer_config.json: 'fra_Latn' is id 300, but tokenizer.json gives it id \d+"),
    ("nllb", lambda folder: _edit_json(folder / "tokenizer.json", lambda record: _added(
        record, "zho_Hant").update(id=400)),
     r"tokenizer.json: ids \[400\] of the tokenizer \(e.g. 'zho_Hant'\) are beyond the model's "
     "vocab_size"),
    ("nllb", lambda folder: _edit_json(folder / "tokenizer.json", lambda record: _added(
        record, "fra_Latn").update(id=record["model"]["vocab"]["▁a"])),
     r"tokenizer.json: 'fra_Latn' is id \d+, which tokenizer.json gives '▁a'"),
    ("nllb", lambda folder: _edit_json(folder / "tokenizer.json", lambda record: record["model"][
        "vocab"].update({"▁zebra": 9999})),
     "tokenizer.json: its pieces are not sentencepiece.bpe.model's .1 not in it, e.g. '▁zebra'"),
    ("nllb", lambda folder: (folder / "sentencepiece.bpe.model").unlink(),
     "sentencepiece.bpe.model: no such file .*transformers 5 saves tokenizer.json without it"),
    ("m2m100", lambda folder: _edit_json(folder / "tokenizer_config.json", lambda record: record.
                                         update(language_codes="wmt21",
                                                additional_special_tokens=["__en__", "__de__"])),
     "tokenizer_config.json: its language codes .2, __en__ first. are not those of "
     "language_codes 'wmt21'"),
    ("m2m100", lambda folder: _edit_json(folder / "tokenizer_config.json", lambda record: record.
                                         update(language_codes="m2m200")),
     "tokenizer_config.json: language_codes 'm2m200' .M2M-100's tokenizer knows m2m100, wmt21"),
])
def test_a_folder_whose_files_disagree_is_refused_by_name(style, edit, message, tmp_path):
    """A folder in transformers 5's layout with one file changed: two files giving a code two
    ids, an id past the embedding's rows or of a piece, tokenizer.json's pieces not the
    SentencePiece model's, the SentencePiece model missing (transformers 5 does not save it),
    M2M-100 codes listed that its `language_codes` do not number, or a `language_codes` it has
    not."""
    folder = write_m2m_100_folder(tmp_path / "hf", M2MVariant(style=style, seed=6,
                                                              layout="transformers5"))
    read_m2m_100_folder(folder)  # as written, it imports
    edit(folder)
    with pytest.raises(ImportFormatError, match=message):
        read_m2m_100_folder(folder)
    assert import_model.main([str(folder), "--output-dir", str(tmp_path / "run")]) == 2
    assert not (tmp_path / "run").exists()


def test_control_pieces_are_left_out_of_the_text_and_kept_by_save_and_load(nllb, tmp_path):
    """`detokenize` drops the control pieces (the codes, `<mask>`, `<unk>`) wherever they are,
    as SentencePiece joins the rest (sentencepiece's own decoding of the other pieces); a saved
    tokenizer keeps them."""
    import sentencepiece

    tokenizer = load_tokenizer(nllb["run"] / "vocab")
    tokenizer.save(tmp_path / "vocab")
    again = load_tokenizer(tmp_path / "vocab")
    control = json.loads((tmp_path / "vocab" / "vocabulary.json").read_text())["control"]
    assert {"deu_Latn", "<mask>", "<unk>"} <= set(control)
    pieces = json.loads((tmp_path / "vocab" / "vocabulary.json").read_text())["target"]
    ids = tokenizer.encode_batch(["a man rides a bike."], "target")[0]
    code = pieces.index("deu_Latn")
    rows = [[code, *ids, EOS_ID], ids[:2] + [code, pieces.index("<mask>"), UNK_ID] + ids[2:]]
    processor = sentencepiece.SentencePieceProcessor(
        model_file=str(tmp_path / "vocab" / "target.spm"))
    expected = processor.decode_pieces([pieces[index] for index in ids])
    for each in (tokenizer, again):
        texts = each.detokenize(tf.ragged.constant(rows)).numpy().tolist()
        assert [text.decode("utf-8") for text in texts] == [expected, expected]


def test_a_pytorch_checkpoint_alone_and_foreign_tensors_are_named(tmp_path):
    folder = write_m2m_100_folder(tmp_path / "hf", M2MVariant(seed=6))
    tensors = random_tensors(M2MVariant(seed=6), json.loads(
        (folder / "config.json").read_text())["vocab_size"])
    from safetensors.numpy import save_file

    save_file({**tensors, "model.encoder.layernorm_embedding.weight": np.ones(32, np.float32)},
              str(folder / "model.safetensors"))
    with pytest.raises(ImportFormatError, match="layernorm_embedding.*not of an M2M-100"):
        read_m2m_100_folder(folder)
    data = (folder / "model.safetensors").read_bytes()
    (folder / "model.safetensors").write_bytes(data[:len(data) // 2])
    with pytest.raises(ImportFormatError, match="model.safetensors: truncated"):
        read_m2m_100_folder(folder)
    (folder / "model.safetensors").rename(folder / "pytorch_model.bin")
    with pytest.raises(ImportFormatError, match="found pytorch_model.bin: a PyTorch .bin"):
        read_m2m_100_folder(folder)


def test_the_run_records_both_sides_languages_and_the_licence(nllb):
    run = RunDir(nllb["run"])
    languages = run.languages()
    assert languages.source_language_token and "eng_Latn" in languages.token_ids
    record = json.loads((nllb["run"] / IMPORT_FILE).read_text())
    assert record["format"] == "huggingface" and record["licence"] == "cc-by-nc-4.0"
    assert "sentencepiece.bpe.model" in record["files"]


def test_kt_translate_names_both_languages(nllb, capsys):
    """Codes or an unambiguous ISO 639-3 alias give the in-process translation (source token
    first, target code forced and left out); a missing, unknown or ambiguous language is
    refused by name."""
    run, lines = str(nllb["run"]), nllb["lines"]
    translated = run_translate([run, str(nllb["input"]), *SEARCH, "--source-language", "eng",
                                "--target-language", "fra_Latn"])
    model, tokenizer = load_run_model(run)
    from keras_transformer.config import SearchSettings

    greedy = SearchSettings(beam_size=1, max_decode_extra=EXTRA)
    translator = TranslationModule(model, tokenizer, greedy, languages=RunDir(run).languages())
    expected = IntoLanguage(translator, "fra_Latn", "eng_Latn").translate(tf.constant(lines))
    assert translated == [text.decode("utf-8") for text in
                          expected["translation"].numpy().tolist()]
    assert translated[3] == ""
    other = IntoLanguage(translator, "fra_Latn", "deu_Latn").translate(tf.constant(lines[:1]))
    assert other["score"].numpy()[0] != expected["score"].numpy()[0]  # the source token is read
    for argv, message in (([], "source language: needed, the model translates from"),
                          (["--source-language", "zho"], "ambiguous: the model has zho_Hans"),
                          (["--source-language", "xho_Latn"], "translates from deu_Latn")):
        capsys.readouterr()
        assert translate.main([run, str(nllb["input"]), "--target-language", "fra_Latn",
                               *argv]) == 2
        assert message in capsys.readouterr().err
    with pytest.raises(tf.errors.InvalidArgumentError, match="translates from .* not.*xho"):
        translator.translate(tf.constant(["a"]), tf.constant(["fra_Latn"]),
                             tf.constant(["xho_Latn"]))


def test_kt_score_reads_both_languages_as_nllb_lays_out_a_pair(nllb, tmp_path, capsys):
    """kt-score with --source-language and --target-language: each target token's
    log-probability is the model's with the pair laid out as NLLB's tokenizer lays it out
    (source `eng_Latn X </s>`, target `fra_Latn Y </s>`), the target code forced first and not
    scored; into another language the same pair scores otherwise; without one it is refused."""
    from keras_transformer.decoding.transformer_search import token_log_probs
    from trainers import score

    run = str(nllb["run"])
    sources, targets = training_sentences(4, seed=11)
    source, target = tmp_path / "src.en", tmp_path / "ref.fr"
    for path, lines in ((source, sources), (target, targets)):
        path.write_text("".join(line + "\n" for line in lines), encoding="utf-8")
    records = {}
    for language in ("fra_Latn", "deu_Latn"):
        output = tmp_path / f"{language}.jsonl"
        assert score.main([run, "--src", str(source), "--tgt", str(target), "--output",
                           str(output), "--source-language", "eng", "--target-language",
                           language]) == 0
        records[language] = [json.loads(line) for line in output.read_text().splitlines()]
    model, tokenizer = load_run_model(run)
    codes = RunDir(run).languages().token_ids
    for row, (text, translation) in enumerate(zip(sources, targets)):
        piece_ids = tokenizer.tokenize_target(tf.constant([translation])).to_list()[0]
        source_ids = [codes["eng_Latn"], *tokenizer.tokenize(tf.constant([text])).to_list()[0],
                      EOS_ID]
        log_probs = token_log_probs(model, tf.constant([source_ids]),
                                    tf.constant([[codes["fra_Latn"], *piece_ids, EOS_ID]]))
        record = records["fra_Latn"][row]
        assert [piece for piece, _ in record["tokens"]] == [
            *tokenizer.id_to_piece(piece_ids), "</s>"]
        np.testing.assert_allclose([value for _, value in record["tokens"]],
                                   log_probs.numpy()[0, 1:], atol=1e-4)
        assert record["tokens"] != records["deu_Latn"][row]["tokens"]
    assert score.main([run, "--src", str(source), "--tgt", str(target)]) == 2
    assert "--target-language: " in capsys.readouterr().err


@pytest.mark.slow
def test_the_exports_translate_as_the_run(nllb, translated, tmp_path):
    """The SavedModel (`source_language` a request input) and the CTranslate2 export give the
    run's greedy translations (random models repeat a piece up to the length limit)."""
    run, input_file = str(nllb["run"]), str(nllb["input"])
    languages, expected = LANGUAGES, translated
    base = tmp_path / "exports"
    assert export.main([run, "--name", "graph", "--base-dir", str(base), *SEARCH]) == 0
    assert run_translate([str(base / "graph"), input_file, *languages]) == expected
    from keras_transformer.serving.provenance import read_provenance

    assert read_provenance(base / "graph")[1]["imported_from"]["licence"] == "cc-by-nc-4.0"
    # The request inputs as TF Serving reads them: the signature's in saved_model.pb (loading
    # the SavedModel again would only restore what kt-translate has just run).
    proto = saved_model_pb2.SavedModel()
    proto.ParseFromString((base / "graph" / "1" / "saved_model.pb").read_bytes())
    assert set(proto.meta_graphs[0].signature_def["serving_default"].inputs) == {
        "text", "target_language", "source_language"}
    assert export.main([run, "--name", "ct2", "--base-dir", str(base), "--format",
                        "ctranslate2", "--quantization", "float32", *SEARCH]) == 0
    # One sentence a batch: CTranslate2's length limit is its batch's longest source's.
    assert run_translate([str(base / "ct2"), input_file, *languages, "--batch-size", "1"]) == (
        expected)
    shutil.rmtree(base)
    assert load_tokenizer(nllb["run"] / "vocab").vocab_size == RunDir(run).load_recipe(
        ).architecture.vocab_size


@pytest.mark.slow
def test_fine_tuning_on_new_pairs_reads_both_languages_tokens(nllb, tmp_path, capsys):
    """`kt-train --init-from` an NLLB run with `--pair` (LoRA, and every weight): each pair's
    training ids start as the model reads them (the source code first in the source, the
    target code first in the target), the run keeps the model's languages and scores each pair
    on its dev set; a pair naming a language the model lacks, and plain --train-src, are
    refused."""
    sources, targets = training_sentences(60, seed=9)
    files = {}
    for name, lines in (("train.en", sources[:50]), ("train.fr", targets[:50]),
                        ("dev.en", sources[50:]), ("dev.fr", targets[50:])):
        files[name] = tmp_path / name
        files[name].write_text("".join(line + "\n" for line in lines), encoding="utf-8")
    from trainers import train

    common = ["--init-from", str(nllb["run"]), "--precision", "float32", "--eval-every", "2",
              "--eval-sentences", "4", "--attention-sentences", "1", "--progress-seconds", "0",
              "--no-export", "--set", "batch_tokens=512"]
    pair = ["--pair", "eng_Latn-fra_Latn", str(files["train.en"]), str(files["train.fr"]),
            "--dev-pair", "eng_Latn-fra_Latn", str(files["dev.en"]), str(files["dev.fr"])]
    assert train.main([*common, *pair, "--pair", "fra_Latn-eng_Latn", str(files["train.fr"]),
                       str(files["train.en"]), "--dev-pair", "fra_Latn-eng_Latn",
                       str(files["dev.fr"]), str(files["dev.en"]), "--lora-rank", "2",
                       "--steps", "2", "--output-dir", str(tmp_path / "tuned")]) == 0
    assert "source-language token first in the source" in capsys.readouterr().err
    run = RunDir(tmp_path / "tuned")
    languages = run.languages()
    assert languages.source_language_token and languages.token_ids == RunDir(
        nllb["run"]).languages().token_ids
    assert [entry["name"] for entry in languages.pairs] == ["eng_Latn-fra_Latn",
                                                            "fra_Latn-eng_Latn"]
    from keras_transformer.data.token_storage import TokenStorage

    tokenizer = load_tokenizer(run.vocab)
    for name, source, target in (("eng_Latn-fra_Latn", "eng_Latn", "fra_Latn"),
                                 ("fra_Latn-eng_Latn", "fra_Latn", "eng_Latn")):
        storage = TokenStorage.open(run.root / "prepared" / name)
        source_ids, target_ids = storage.load_shard(0).pair(0)
        assert source_ids[0] == languages.token_ids[source]
        assert target_ids[0] == languages.token_ids[target]
        assert list(target_ids[1:]) in [tokenizer.encode_batch([line], "target")[0]
                                        for line in (targets if target == "fra_Latn"
                                                     else sources)[:50]]
    result = json.loads((run.root / "result.json").read_text())
    assert set(result["dev_bleu_pairs"]) == {"eng_Latn-fra_Latn", "fra_Latn-eng_Latn"}
    # every weight fine-tuned (no adapters), one pair: the languages kept, the weights moved
    # (the pair's attention plots were drawn above)
    assert train.main([*common, *pair, "--steps", "1", "--attention-sentences", "0",
                       "--output-dir", str(tmp_path / "full")]) == 0
    assert RunDir(tmp_path / "full").languages().token_ids == languages.token_ids
    assert any(not np.array_equal(tuned, imported) for tuned, imported in zip(
        final_weights(tmp_path / "full"), final_weights(nllb["run"])))
    for argv, message in (
            ([*common, "--pair", "xho-fra_Latn", str(files["train.en"]), str(files["train.fr"]),
              "--dev-pair", "xho-fra_Latn", str(files["dev.en"]), str(files["dev.fr"])],
             "'xho' is not a language of the model (deu_Latn, eng_Latn"),
            ([*common, "--train-src", str(files["train.en"]), "--train-tgt",
              str(files["train.fr"])], "give the new pairs with --pair SRC-TGT")):
        with pytest.raises(SystemExit):
            train.main([*argv, "--steps", "1", "--output-dir", str(tmp_path / "refused")])
        assert message in capsys.readouterr().err
        assert not (tmp_path / "refused").exists()


def test_a_pair_named_by_aliases_is_the_pair_of_the_model_s_codes(nllb, tmp_path, capsys):
    """docs/importing.md's `--pair eng-fra_Latn`: an unambiguous ISO 639-3 alias names the
    model's code, as kt-translate's --source-language takes it; an ambiguous one is named."""
    from keras_transformer.data.languages import LanguagePair
    from trainers import train_arguments

    text = tmp_path / "a.txt"
    text.write_text("hello\n", encoding="utf-8")
    files = [str(text), str(text)]
    argv = ["--init-from", str(nllb["run"]), "--output-dir", str(tmp_path / "run")]
    args = train_arguments.parse_args([*argv, "--pair", "eng-fra_Latn", *files,
                                       "--dev-pair", "eng_Latn-fra", *files])
    assert args.data.language_pairs == (LanguagePair("eng_Latn", "fra_Latn"),)
    assert list(args.data.pair_files) == ["eng_Latn-fra_Latn"]
    with pytest.raises(SystemExit):
        train_arguments.parse_args([*argv, "--pair", "eng-zho", *files,
                                    "--dev-pair", "eng-zho", *files])
    assert "language 'zho' is ambiguous: the model has zho_Hans, zho_Hant" in (
        capsys.readouterr().err)
    assert not (tmp_path / "run").exists()


def test_evaluate_and_the_teacher_corpus_translate_as_kt_translate(nllb, translated, tmp_path):
    """kt-evaluate (its hypotheses) and kt-translate-corpus (a distillation teacher's output)
    take both languages as kt-translate does, and give its lines (`translated`)."""
    from trainers import evaluate, translate_corpus

    run, input_file = str(nllb["run"]), str(nllb["input"])
    languages, expected = LANGUAGES, translated
    hypotheses = tmp_path / "test.hyp"
    assert evaluate.main([run, "--src", input_file, "--ref", input_file, *SEARCH, *languages,
                          "--hypotheses", str(hypotheses)]) == 0
    assert hypotheses.read_text(encoding="utf-8").split("\n")[:-1] == expected
    output = tmp_path / "teacher.de"
    assert translate_corpus.main([run, input_file, "--output", str(output), "--quiet",
                                  *SEARCH, *languages]) == 0
    assert output.read_text(encoding="utf-8").split("\n")[:-1] == expected


def test_a_code_the_model_emits_is_left_out_of_the_text(nllb, translated):
    """The fixture's run emits a language code inside a translation (`_emitting_a_code`):
    kt-translate prints the text of the other pieces (sentencepiece's own decoding of them), as
    transformers' decoding skips special tokens; kt-evaluate, kt-translate-corpus, the
    SavedModel and the CTranslate2 export print kt-translate's lines (the tests above)."""
    import sentencepiece

    run = nllb["run"]
    pieces = json.loads((run / "vocab" / "vocabulary.json").read_text())["target"]
    codes = set(RunDir(run).languages().token_ids.values())
    code = pieces.index(EMITTED_CODE)
    text = [[index for index in row if index not in codes] for row in nllb["emitted"]]
    assert any(code in row and kept for row, kept in zip(nllb["emitted"], text))
    processor = sentencepiece.SentencePieceProcessor(model_file=str(run / "vocab" / "target.spm"))
    assert translated == [processor.decode_pieces([pieces[index] for index in row])
                          for row in text]
