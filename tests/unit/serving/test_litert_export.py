"""The LiteRT export (`kt-export --format litert`): a `.tflite` model of builtin ops only whose
beam and greedy searches, run by the LiteRT interpreter (XNNPACK), give the ids of the
SavedModel and of the Python search; its quantized variants; kt-translate on it; and what it
refuses, by name, before writing."""
import json
from difflib import SequenceMatcher

import numpy as np
import pytest
import tensorflow as tf

import keras_transformer as kt
from helpers import final_json, random_run, random_two_language_run, text_lines
from keras_transformer.data import read_parallel, write_demo_corpus
from keras_transformer.decoding.alignment import ALIGNMENT_FILE, AlignmentHeads
from keras_transformer.decoding.transformer_search import greedy_decode
from keras_transformer.decoding.translator import IntoLanguage, TranslationModule
from keras_transformer.evaluation import corpus_scores
from keras_transformer.serving.litert_export import LITERT_FILE, MANIFEST_FILE
from keras_transformer.serving.loading import load_export
from keras_transformer.serving.text_translation import LineTranslator, best_lines
from keras_transformer.training.loaded_run import load_run
from trainers import evaluate, export, translate, translate_corpus

litert = pytest.importorskip("ai_edge_litert.interpreter")

SEARCH = ["--beam-size", "3", "--max-decode-extra", "6"]
ALIGNMENT = AlignmentHeads(0, (1, 3))


@pytest.fixture(scope="module")
def exported(demo_vocab, tmp_path_factory):
    """A random run, its float32 SavedModel and LiteRT exports, and demo sources."""
    root = tmp_path_factory.mktemp("litert")
    run = random_run(demo_vocab, root / "run")
    run.write_json(ALIGNMENT_FILE, ALIGNMENT.to_json())  # a choice not the default
    base = root / "exports"
    for name, extra in (("saved", []), ("lite", ["--format", "litert"])):
        assert export.main([str(run.root), "--name", name, "--base-dir", str(base), *SEARCH,
                            *extra]) == 0
    sources = read_parallel(*write_demo_corpus(root / "demo")["test"])[0][:60]
    return {"run": run.root, "saved": base / "saved" / "1", "lite": base / "lite" / "1",
            "sources": sources, "base": base}


def source_rows(tokenizer, sources: list[str]) -> list[np.ndarray]:
    """Each source as the `[1, length]` ids a LiteRT signature takes: its pieces, then EOS."""
    return [np.array([ids + [kt.EOS_ID]], np.int32)
            for ids in tokenizer.tokenize(tf.constant(sources)).to_list()]


@pytest.mark.slow
def test_litert_searches_equal_the_savedmodel_and_the_python_search(exported):
    """Beam (3) ids of a batch of sentences of different lengths equal the SavedModel's n-best
    ids of the batch, greedy ids `greedy_decode`'s, scores to float32 rounding; each row
    translates in the batch exactly as alone; the model loads with builtin kernels alone (no
    Flex delegate, no custom op) and runs there too."""
    loaded = load_run(exported["run"])
    piece_ids = loaded.tokenizer.tokenize(tf.constant(exported["sources"]))
    batch = tf.concat([piece_ids, tf.fill([piece_ids.nrows(), 1], kt.EOS_ID)], axis=1).to_tensor()
    served = tf.saved_model.load(str(exported["saved"])).signatures["translate_ids"](
        source_ids=batch)
    greedy_ids = greedy_decode(loaded.model, batch, max_decode_extra=6).ids.numpy()
    xnnpack = litert.Interpreter(model_path=str(exported["lite"] / LITERT_FILE), num_threads=2)
    builtin = litert.Interpreter(
        model_path=str(exported["lite"] / LITERT_FILE),
        experimental_op_resolver_type=litert.OpResolverType.BUILTIN_WITHOUT_DEFAULT_DELEGATES)
    assert sorted(xnnpack.get_signature_list()) == sorted(builtin.get_signature_list()) == [
        "alignment", "beam", "greedy"]
    assert len(set(piece_ids.row_lengths().numpy().tolist())) > 5  # rows of many lengths
    beam = xnnpack.get_signature_runner("beam")(source_ids=batch.numpy())
    greedy = xnnpack.get_signature_runner("greedy")(source_ids=batch.numpy())

    def padded(ids: np.ndarray, length: int) -> np.ndarray:
        return np.pad(ids, [(0, 0)] * (ids.ndim - 1) + [(0, length - ids.shape[-1])])

    width = max(beam["ids"].shape[-1], served["nbest_ids"].shape[-1], greedy_ids.shape[-1])
    np.testing.assert_array_equal(padded(beam["ids"], width),
                                  padded(served["nbest_ids"].numpy(), width))
    # float32 sums in XNNPACK's order and TensorFlow's: 1e-5 of a score of about 16
    np.testing.assert_allclose(beam["scores"], served["nbest_scores"].numpy(), rtol=5e-5,
                               atol=1e-4)
    np.testing.assert_array_equal(padded(greedy["ids"], width), padded(greedy_ids, width))
    for index, row in enumerate(source_rows(loaded.tokenizer, exported["sources"])):
        alone = xnnpack.get_signature_runner("beam")(source_ids=row)
        np.testing.assert_array_equal(padded(alone["ids"][0], width), beam["ids"][index])
        np.testing.assert_array_equal(alone["scores"][0], beam["scores"][index])
    builtin.get_signature_runner("beam")(source_ids=row)
    assert len({tuple(ids) for ids in beam["ids"][:, 0].tolist()}) > len(
        exported["sources"]) // 2  # translations differ: it can fail


@pytest.mark.slow
def test_quantized_variants_are_smaller_and_kt_translate_reads_every_kind(exported, tmp_path):
    """float16 and int8 exports: smaller files that translate as the float32 export does (most
    sentences: a random model's near ties may turn); kt-translate of the float32 LiteRT export
    equals kt-translate of the SavedModel (an empty line included)."""
    sizes = {"float32": (exported["lite"] / LITERT_FILE).stat().st_size}
    sources = [source.encode() for source in exported["sources"][:20]]
    full, _ = load_export(exported["lite"]).best(sources)
    for quantization in ("float16", "int8"):
        assert export.main([str(exported["run"]), "--name", quantization, "--base-dir",
                            str(exported["base"]), *SEARCH, "--format", "litert",
                            "--quantization", quantization]) == 0
        folder = exported["base"] / quantization / "1"
        sizes[quantization] = (folder / LITERT_FILE).stat().st_size
        manifest = json.loads((folder / MANIFEST_FILE).read_text(encoding="utf-8"))
        assert manifest["quantization"] == quantization and manifest["search"]["beam_size"] == 3
        translations, _ = load_export(folder).best(sources)
        # each nearer the float32 export's translation of its own source than of the others
        nearness = np.array([[SequenceMatcher(None, ours, theirs).ratio() for theirs in full]
                             for ours in translations])
        others = (nearness.sum() - np.trace(nearness)) / (len(full) * (len(full) - 1))
        assert np.mean(np.diag(nearness)) > others + 0.2
    # (a tiny model: its smallest tensors stay float32, and the graph is much of the file)
    assert sizes["int8"] < 0.6 * sizes["float32"] and sizes["float16"] < 0.75 * sizes["float32"]
    source = tmp_path / "in.en"
    source.write_text("\n".join(exported["sources"][:20]) + "\n\n", encoding="utf-8")
    outputs = {}
    for kind in ("saved", "lite"):
        outputs[kind] = tmp_path / f"{kind}.de"
        assert translate.main([str(exported[kind]), str(source), "--output",
                               str(outputs[kind]), "--quiet", "--threads", "1"]) == 0
    assert outputs["lite"].read_text() == outputs["saved"].read_text()


def alignment_records(translator, texts: list[bytes]) -> list[dict]:
    """Each text's `best_lines` alignment record (its pieces and their alignment)."""
    records: dict[int, dict] = {}
    best_lines(translator, texts, batch_size=8, on_alignment=records.__setitem__)
    return [records[index] for index in range(len(texts))]


def marked_up(sources: list[str], html: bool) -> str:
    """The sources as a document of paragraphs with inline markup: in each, words 2-3 in an
    outer element and word 3 in an inner one (nested), the last word in another."""
    blocks = []
    for source in sources:
        words = source.split()
        if len(words) < 5:
            continue
        if html:
            words[1:3] = [f'<b>{words[1]} <i class="x">{words[2]}</i></b>']
            words[-1] = f'<a href="https://example.org/?a=1&amp;b=2">{words[-1]}</a>'
            blocks.append(f"<p>{' '.join(words)}</p>")
        else:
            words[1:3] = [f"**{words[1]} _{words[2]}_**"]
            words[-1] = f"[{words[-1]}](https://example.org/x)"
            blocks.append(" ".join(words))
    return "\n\n".join(blocks) + "\n"


@pytest.mark.slow
def test_markup_translates_through_the_litert_export_as_through_the_savedmodel(exported,
                                                                              tmp_path, capsys):
    """The `alignment` signature (the run's recorded layer and heads, in the manifest) gives the
    SavedModel's `translate_with_alignment` pieces and alignment; kt-translate of an HTML and
    a Markdown document with nested inline markup gives the SavedModel export's output."""
    manifest = json.loads((exported["lite"] / MANIFEST_FILE).read_text(encoding="utf-8"))
    assert manifest["alignment"] == ALIGNMENT.to_json() and "alignment" in manifest["signatures"]
    texts = [source.encode() for source in exported["sources"][:24]]
    saved, lite = load_export(exported["saved"]), load_export(exported["lite"])
    assert lite.takes_alignment
    ours, theirs = alignment_records(lite, texts), alignment_records(saved, texts)
    assert ours == theirs
    # not every piece on the same source position: the alignment is the model's, not a rule
    assert len({tuple(record["alignment"]) for record in ours}) > len(texts) // 2
    for extension, html in ((".html", True), (".md", False)):
        document = tmp_path / f"page{extension}"
        document.write_text(marked_up(exported["sources"][:12], html), encoding="utf-8")
        outputs = {}
        for kind in ("saved", "lite"):
            outputs[kind] = tmp_path / f"{kind}{extension}"
            assert translate.main([str(exported[kind]), str(document), "--output",
                                   str(outputs[kind]), "--quiet"]) == 0, capsys.readouterr().err
        translated = outputs["lite"].read_text(encoding="utf-8")
        assert translated == outputs["saved"].read_text(encoding="utf-8")
        for mark in (("<b>", "<i class=\"x\">", "&amp;b=2") if html else ("**", "_", "](")):
            assert translated.count(mark) >= 5, mark


@pytest.mark.slow
def test_an_export_of_fixed_shapes_translates_as_the_export_of_any_length(exported, capsys):
    """`--source-length` (every shape fixed, for LiteRT.js): each source PAD-padded to it, the
    n-best translations and scores of the export of any length (the search masks the padding);
    a longer source is cut to it and named; a length the model cannot read is refused."""
    run = str(exported["run"])
    assert export.main([run, "--name", "fixed", "--base-dir", str(exported["base"]), *SEARCH,
                        "--format", "litert", "--source-length", "16"]) == 0
    folder = exported["base"] / "fixed" / "1"
    interpreter = litert.Interpreter(model_path=str(folder / LITERT_FILE))
    details = interpreter.get_signature_runner("beam").get_output_details()
    assert [list(details[name]["shape_signature"]) for name in ("ids", "scores")] == [
        [1, 3, 16 + 6], [1, 3]]
    texts = [source.encode() for source in exported["sources"][:30]]
    fixed, varied = load_export(folder), load_export(exported["lite"])
    short = [text for text in texts if not fixed.truncated([text])]
    assert len(short) > 12
    for ours, theirs in zip(fixed.nbest(short, 3), varied.nbest(short, 3)):
        assert [text for text, _ in ours] == [text for text, _ in theirs]
        np.testing.assert_allclose([score for _, score in ours],
                                   [score for _, score in theirs], atol=1e-4)
    assert alignment_records(fixed, short) == alignment_records(varied, short)
    assert fixed.truncated([b" ".join(texts[:5])]) == [0]
    for length in ("1", "25"):
        assert export.main([run, "--name", "bad", "--base-dir", str(exported["base"]),
                            "--format", "litert", "--source-length", length]) == 2
        assert "--source-length: must be 2 to the model's max_length 24" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        export.parse_args([run, "--name", "x", "--source-length", "16"])
    assert "--source-length: --format litert only" in capsys.readouterr().err


@pytest.mark.slow
def test_kt_evaluate_scores_an_export_as_kt_translate_translates_it(exported, tmp_path, capsys):
    """kt-evaluate and kt-translate-corpus on the LiteRT export: their translations are
    kt-translate's output (in batches of other sizes), kt-evaluate's figures sacreBLEU's of
    them; an export needs --hypotheses, and takes no search flag."""
    test = write_demo_corpus(tmp_path / "demo")["test"]
    sources, references = (tmp_path / "test.en", tmp_path / "test.de")
    for path, lines in zip((sources, references), read_parallel(*test)):
        path.write_text("".join(line + "\n" for line in lines[:40]), encoding="utf-8")
    hypotheses, translated = tmp_path / "lite.hyp", tmp_path / "lite.de"
    lite = str(exported["lite"])
    assert evaluate.main([lite, "--src", str(sources), "--ref", str(references), "--hypotheses",
                          str(hypotheses), "--threads", "1"]) == 0
    figures = final_json(capsys.readouterr().out)
    assert translate.main([lite, str(sources), "--output", str(translated), "--quiet"]) == 0
    assert text_lines(hypotheses) == text_lines(translated)
    corpus = tmp_path / "corpus.de"  # a teacher's job: batches of 8, as kt-translate's
    assert translate_corpus.main([lite, str(sources), "--output", str(corpus), "--quiet",
                                  "--batch-size", "8", "--threads", "1"]) == 0
    assert text_lines(corpus) == text_lines(translated)
    bleu, chrf = corpus_scores(text_lines(hypotheses), text_lines(references))
    assert figures[bleu.name] == round(bleu.value, 2) and figures[chrf.name] == round(chrf.value, 2)
    assert evaluate.main([lite, "--src", str(sources), "--ref", str(references)]) == 2
    assert "--hypotheses: required with an export" in capsys.readouterr().err
    assert evaluate.main([lite, "--src", str(sources), "--ref", str(references), "--hypotheses",
                          str(hypotheses), "--beam-size", "2"]) == 2
    assert "--beam-size: an export's weights and search settings are fixed" in (
        capsys.readouterr().err)


def test_what_a_litert_export_cannot_hold_is_refused_by_name(exported, tmp_path, capsys):
    """--xla, --precision and a CTranslate2-only quantization are refused before anything is
    written; a corrupt .tflite is named; what the export cannot do that a SavedModel does is
    recorded with it."""
    from keras_transformer.serving import litert_export
    from keras_transformer.serving.provenance import read_provenance

    assert read_provenance(exported["lite"])[1]["unsupported"] == litert_export.UNSUPPORTED
    run = str(exported["run"])
    for extra, message in [(["--xla"], "--xla: SavedModel exports only"),
                           (["--precision", "bfloat16"], "--shortlist and --precision"),
                           (["--quantization", "int16"], "--quantization: int16 is not one of "
                                                         "--format litert's")]:
        with pytest.raises(SystemExit):
            export.parse_args([run, "--name", "x", "--format", "litert", *extra])
        assert message in capsys.readouterr().err
    corrupt = tmp_path / "corrupt"
    corrupt.mkdir()
    for path in exported["lite"].iterdir():
        if path.is_file():
            (corrupt / path.name).write_bytes(path.read_bytes())
    (corrupt / LITERT_FILE).write_bytes(b"not a flatbuffer")
    with pytest.raises(ValueError, match=f"{corrupt / LITERT_FILE}: not a LiteRT model"):
        load_export(corrupt)
    source, prefix = tmp_path / "in.en", tmp_path / "prefix.de"
    source.write_text("one cat\n \t\n\n", encoding="utf-8")
    prefix.write_text("ein\n\n\n", encoding="utf-8")
    assert translate.main([str(exported["lite"]), str(source), "--prefix", str(prefix)]) == 2
    assert "is a LiteRT export: LiteRT exports force no prefixes" in capsys.readouterr().err
    output = tmp_path / "out.de"
    assert translate.main([str(exported["lite"]), str(source), "--output", str(output),
                           "--quiet"]) == 0
    assert output.read_text(encoding="utf-8").split("\n")[1:] == [" \t", "", ""]


@pytest.mark.slow
def test_a_model_of_several_languages_translates_into_the_one_asked(tmp_path):
    """The source placement: the language's token first in the source, as the SavedModel and
    the Python `TranslationModule` read it; each language's translations are the
    `TranslationModule`'s, an empty line's empty, and so are the alignments (the token one of the
    source pieces)."""
    run, texts = random_two_language_run(tmp_path)
    assert export.main([str(run.root), "--name", "lite", "--base-dir", str(tmp_path / "out"),
                        "--format", "litert"]) == 0
    translator = load_run(run.root).translator()
    sources = texts[0][:8] + [""]  # an empty line: empty, in either language
    translated = {}
    for language in ("de", "fr"):
        lite = load_export(tmp_path / "out" / "lite", target_language=language)
        [translated[language], _] = lite.best([text.encode() for text in sources])
        into = IntoLanguage(translator, language)
        assert translated[language] == into.translate(
            tf.constant(sources))["translation"].numpy().tolist(), language
        texts_in = [text.encode() for text in sources[:-1]]
        assert alignment_records(lite, texts_in) == alignment_records(
            LineTranslator.from_translator(into), texts_in)
    assert translated["de"] != translated["fr"]  # the token is read: the check can fail
    assert translated["de"][-1] == translated["fr"][-1] == b""


@pytest.mark.slow
@pytest.mark.parametrize("style, pairs", [
    ("nllb", (("deu_Latn", "zho_Hans"), ("eng_Latn", "fra_Latn"))),
    ("m2m100", (("de", "zh"), ("en", "fr")))])
def test_an_imported_nllb_or_m2m_100_model_translates_as_its_savedmodel(style, pairs, tmp_path):
    """The "target" placement (NLLB-200, M2M-100): the target language's token forced first in
    each translation, the source language's first in each source. On random sentences,
    translated in batches of sources of many lengths: the beam's n-best translations and scores
    of the LiteRT export (float32) are those of the run's `TranslationModule` of the export's
    search (the graph its SavedModel serves: `test_export`), and so are the `alignment`
    signature's records (the forced token aligned, then left out); the greedy signature's ids are
    the greedy search's, into each of two languages (the token is read: the translations
    differ)."""
    from m2m_100_models import M2MVariant, training_sentences, write_m2m_100_folder
    from trainers import import_model

    folder = write_m2m_100_folder(tmp_path / "hf", M2MVariant(style=style, encoder_layers=1))
    run = tmp_path / "run"
    assert import_model.main([str(folder), "--output-dir", str(run)]) == 0
    assert export.main([str(run), "--name", "lite", "--base-dir", str(tmp_path / "out"),
                        *SEARCH, "--format", "litert"]) == 0
    sources = training_sentences(40, seed=11)[0]
    texts = [text.encode() for text in sources]
    loaded = load_run(run)
    searched, greedy = (TranslationModule(loaded.model, loaded.tokenizer, kt.SearchSettings.of(
        loaded.recipe.search, beam_size=beam_size, max_decode_extra=6),
        languages=loaded.languages) for beam_size in (3, 1))
    interpreter = litert.Interpreter(model_path=str(tmp_path / "out" / "lite" / "1" / LITERT_FILE))
    best = {}
    for source, target in pairs:
        ours = load_export(tmp_path / "out" / "lite", target, source_language=source)
        theirs = LineTranslator.from_translator(IntoLanguage(searched, target, source))
        lite, saved = ours.nbest(texts, 3), theirs.nbest(texts, 3)
        assert [[text for text, _ in row] for row in lite] == [
            [text for text, _ in row] for row in saved]
        np.testing.assert_allclose([[score for _, score in row] for row in lite],
                                   [[score for _, score in row] for row in saved], atol=1e-4)
        best[target] = [row[0][0] for row in lite]
        assert alignment_records(ours, texts) == alignment_records(theirs, texts)
        piece_ids = loaded.tokenizer.tokenize(tf.constant(sources))
        languages = loaded.languages.token_ids
        rows = tf.concat([tf.fill([len(sources), 1], languages[source]), piece_ids,
                          tf.fill([len(sources), 1], kt.EOS_ID)], axis=1).to_tensor()
        found = interpreter.get_signature_runner("greedy")(
            source_ids=rows.numpy(),
            target_tokens=np.full([len(sources)], languages[target], np.int32))["ids"][:, 0]
        expected = IntoLanguage(greedy, target, source).translate_ids(
            piece_ids.to_tensor())["ids"].numpy()
        width = max(found.shape[1], expected.shape[1])
        np.testing.assert_array_equal(np.pad(found, [(0, 0), (0, width - found.shape[1])]),
                                      np.pad(expected, [(0, 0), (0, width - expected.shape[1])]))
    assert len(set(piece_ids.row_lengths().numpy().tolist())) > 3  # rows of many lengths
    first, second = (best[target] for _, target in pairs)
    assert sum(a != b for a, b in zip(first, second)) > len(texts) // 2
