"""Every command on a run directory kt-import wrote from a tiny random Marian (OPUS-MT) model
with separate source and target vocabularies, pre-norm, embedding layer norms, an output bias
and `>>xx<<` language tokens: kt-translate (best, n-best, prefixes, sampling), kt-evaluate,
kt-translate-corpus as a distillation teacher, ensembles, kt-export (graph, XLA with a
shortlist, CTranslate2; provenance naming the origin) and kt-plot-attention. Where it can, a
test compares with CTranslate2's own conversion of the original folder (an implementation we
did not write)."""
import collections
import io
import json
import shutil
from pathlib import Path

import numpy as np
import pytest
import sentencepiece
import tensorflow as tf

import keras_transformer as kt
from keras_transformer.data.pipeline import make_training_dataset
from keras_transformer.data.sentencepiece_pair import load_tokenizer, vocabulary_pieces
from keras_transformer.decoding.translator import TranslationModule
from keras_transformer.serving.provenance import read_provenance
from keras_transformer.training.run_dir import IMPORT_FILE
from keras_transformer.visualization import attention_maps
from marian_models import MarianVariant, tokenize, training_sentences, write_marian_model
from trainers import (evaluate, export, import_model, plot_attention, translate,
                      translate_corpus)
from trainers.common import load_run_model

ctranslate2 = pytest.importorskip("ctranslate2")
from ctranslate2.converters import OpusMTConverter  # noqa: E402

# One layer a side: the commands read a model of any depth alike (test_marian.py's deeper
# variants are judged by CTranslate2), and each command traces half the graph.
VARIANT = MarianVariant(tied_all=False, norm="pre", embedding_norm=True, activation="gelu",
                        languages=("fra", "deu"), seed=3, enc_depth=1, dec_depth=1)
EXTRA = 4  # --max-decode-extra everywhere: random models repeat a piece up to the limit
SEARCH = ["--beam-size", "1", "--max-decode-extra", str(EXTRA)]


@pytest.fixture(scope="module")
def imported(tmp_path_factory) -> dict:
    """The Marian folder, the run kt-import wrote from it, and an input file of five source
    lines (three with a language token, one empty)."""
    root = tmp_path_factory.mktemp("imported")
    folder = write_marian_model(root / "marian", VARIANT)
    assert import_model.main([str(folder), "--output-dir", str(root / "run")]) == 0
    sources, _ = training_sentences(4, seed=7)
    lines = [f">>fra<< {sources[0]}", sources[1], "", f">>deu<< {sources[2]}",
             f">>fra<< {sources[3]}"]
    (root / "input.en").write_text("".join(line + "\n" for line in lines), encoding="utf-8")
    return {"folder": folder, "run": root / "run", "lines": lines, "input": root / "input.en"}


@pytest.fixture(scope="module")
def greedy(imported) -> list:
    """kt-translate's greedy translations of the input lines by the imported run."""
    return run_translate([str(imported["run"]), str(imported["input"]), *SEARCH])


# Each line's prefix (target text), or none: a word, a word cut short, several words.
PREFIXES = ["je", "", "", "nous aime le", "ils"]


@pytest.fixture(scope="module")
def prefixed(imported, tmp_path_factory) -> tuple:
    """A file of `PREFIXES` and kt-translate's greedy translations of the input lines by the
    imported run that start with them."""
    prefix_file = tmp_path_factory.mktemp("prefixes") / "prefix.fr"
    prefix_file.write_text("".join(line + "\n" for line in PREFIXES), encoding="utf-8")
    return prefix_file, run_translate([str(imported["run"]), str(imported["input"]), *SEARCH,
                                       "--prefix", str(prefix_file)])


# Beam 4 with no length penalty: the one normalization CTranslate2 shares with us.
BEAM = ["--beam-size", "4", "--length-penalty", "0", "--max-decode-extra", str(EXTRA)]


@pytest.fixture(scope="module")
def beam(imported) -> list:
    """kt-translate's `BEAM` translations of the input lines by the imported run."""
    return run_translate([str(imported["run"]), str(imported["input"]), *BEAM])


def run_translate(argv: list) -> list:
    """kt-translate's output lines for `argv` (exit status 0 required)."""
    stdout = io.StringIO()
    assert translate.main([*argv, "--quiet"], stdout=stdout) == 0
    return stdout.getvalue().split("\n")[:-1]


def marian_pieces(folder: Path, line: str) -> list:
    """`line` as the source tokens Marian reads: a leading `>>xx<<` token, then source.spm's
    pieces."""
    language = line[2:5] if line.startswith(">>") else None
    return tokenize(folder, line[8:] if language else line, "source", language)


def ctranslate2_conversion(folder: Path, directory: Path):
    """CTranslate2's own conversion of the Marian folder, loaded."""
    converted = OpusMTConverter(str(folder)).convert(str(directory), force=True)
    return ctranslate2.Translator(converted, device="cpu", intra_threads=1)


def ctranslate2_texts(translator, folder: Path, lines: list, prefixes=None, **options) -> list:
    """CTranslate2's translation of each line alone (its length limit is per batch: the
    source's pieces + EOS + `EXTRA`, as ours per sentence), as text through target.spm."""
    target = sentencepiece.SentencePieceProcessor(model_file=str(folder / "target.spm"))
    texts = []
    for index, line in enumerate(lines):
        if not line:
            texts.append("")
            continue
        source = marian_pieces(folder, line)
        prefix = prefixes and prefixes[index] and target.encode(prefixes[index], out_type=str)
        result = translator.translate_batch(
            [source], target_prefix=[prefix] if prefix else None, min_decoding_length=0,
            max_decoding_length=len(source) + 1 + EXTRA, **options)[0]
        texts.append(target.decode_pieces(result.hypotheses[0]))
    return texts


def test_the_pair_tokenizes_targets_with_the_target_model(imported):
    """`tokenize_target` maps target.spm's pieces to the target ids, `source_pieces_of` reads
    source ids; the training pipeline's targets are `tokenize_target`'s."""
    pair = load_tokenizer(imported["run"] / "vocab")
    folder = imported["folder"]
    _, targets = training_sentences(3, seed=7)
    ids = pair.tokenize_target(tf.constant(targets)).to_list()
    assert [pair.id_to_piece(row) for row in ids] == [tokenize(folder, text, "target")
                                                      for text in targets]
    assert ids != pair.tokenize(tf.constant(targets)).to_list()
    source_ids = pair.tokenize(tf.constant([imported["lines"][0]]))[0].numpy()
    assert [piece.decode() for piece in pair.source_pieces_of(source_ids).numpy()] == (
        marian_pieces(folder, imported["lines"][0]))
    sources, _ = training_sentences(3, seed=7)
    batches = make_training_dataset(sources, targets, pair, batch_tokens=400, max_length=64,
                                     seed=0)
    target_out = [row[row != kt.PAD_ID].tolist() for _, target_out in batches
                  for row in target_out.numpy()]
    assert sorted(target_out) == sorted(row + [kt.EOS_ID] for row in ids)


@pytest.mark.slow
def test_kt_translate_greedy_and_beam_equal_ctranslate2s_conversion(imported, greedy, beam,
                                                                     tmp_path):
    """Greedy, and beam 4 with no length penalty (the one normalization both share), as text."""
    folder, lines = imported["folder"], imported["lines"]
    theirs = ctranslate2_conversion(folder, tmp_path / "ct2")
    assert greedy == ctranslate2_texts(theirs, folder, lines, beam_size=1)
    assert beam == ctranslate2_texts(theirs, folder, lines, beam_size=4, length_penalty=0)


@pytest.mark.slow
def test_prefixes_are_target_text(imported, prefixed, tmp_path):
    """A prefix is split by target.spm: each translation starts with its prefix and continues
    as CTranslate2's conversion continues it."""
    folder, lines = imported["folder"], imported["lines"]
    _, outputs = prefixed
    assert len(outputs) == len(PREFIXES)
    for output, prefix in zip(outputs, PREFIXES):
        assert output.startswith(prefix), (output, prefix)
    theirs = ctranslate2_conversion(folder, tmp_path / "ct2")
    assert outputs == ctranslate2_texts(theirs, folder, lines, PREFIXES, beam_size=1)


@pytest.mark.slow
def test_nbest_and_sampling(imported, greedy, beam):
    """`--nbest 3` lists 3 hypotheses a line, best first, the first the best translation of
    the same beam (`beam`); a seeded sample is drawn again alike, and differs from greedy
    search."""
    run, input_file = str(imported["run"]), str(imported["input"])
    best = beam
    nbest = [line.split(" ||| ") for line in run_translate([run, input_file, *BEAM,
                                                            "--nbest", "3"])]
    assert len(nbest) == 3 * len(best) and [text for _, text, _ in nbest[::3]] == best
    scores = np.array([float(score) for _, _, score in nbest]).reshape(len(best), 3)
    assert np.all(np.diff(scores, axis=1) <= 1e-4)
    sampling = [run, input_file, "--top-k", "5", "--max-decode-extra", str(EXTRA), "--seed",
                "1"]
    sampled = run_translate(sampling)
    assert sampled == run_translate(sampling) and len(sampled) == len(greedy)
    assert sampled != greedy


@pytest.mark.slow
def test_evaluate_and_translate_corpus_as_a_teacher(imported, greedy, tmp_path):
    run, input_file = str(imported["run"]), str(imported["input"])
    hypotheses, distilled = tmp_path / "hyp.fr", tmp_path / "distilled.fr"
    assert evaluate.main([run, "--src", input_file, "--ref", input_file, *SEARCH,
                          "--hypotheses", str(hypotheses)]) == 0
    assert hypotheses.read_text(encoding="utf-8").splitlines() == greedy
    assert translate_corpus.main([run, input_file, "--output", str(distilled), *SEARCH,
                                  "--chunk-lines", "2", "--quiet"]) == 0
    assert distilled.read_text(encoding="utf-8").splitlines() == greedy


@pytest.mark.slow
def test_ensembles_need_the_same_source_and_target_pieces(imported, greedy, tmp_path, capsys):
    """The run with itself translates as the run; a run whose source pieces, or whose target
    pieces beyond the source vocabulary's size, differ is refused by name."""
    run, input_file = imported["run"], str(imported["input"])
    assert run_translate([str(run), input_file, *SEARCH, "--ensemble", str(run)]) == greedy
    vocabulary = json.loads((run / "vocab" / "vocabulary.json").read_text(encoding="utf-8"))
    assert len(vocabulary["target"]) > len(vocabulary["source"]) + 1
    for side, index in (("source", 10), ("target", len(vocabulary["source"]))):
        other = tmp_path / f"other_{side}"
        shutil.copytree(run, other)
        pieces = list(vocabulary[side])
        pieces[index], pieces[index + 1] = pieces[index + 1], pieces[index]
        (other / "vocab" / "vocabulary.json").write_text(
            json.dumps({**vocabulary, side: pieces}), encoding="utf-8")
        assert translate.main([str(run), input_file, *SEARCH, "--ensemble", str(other)],
                              stdout=io.StringIO()) == 2
        assert f"--ensemble: {str(other)!r} has another vocabulary" in capsys.readouterr().err


@pytest.mark.slow
def test_the_export_translates_as_kt_translate_and_names_the_origin(imported, greedy, prefixed,
                                                                    tmp_path, capsys):
    """The SavedModel export (graph; the run's own vocab/ without naming it), and kt-export
    --describe, which names the Marian folder, its format and the files' digests import.json
    records."""
    run, input_file = str(imported["run"]), str(imported["input"])
    prefix_file, prefixed = prefixed
    base = tmp_path / "exports"
    assert export.main([run, "--name", "graph", "--base-dir", str(base), *SEARCH]) == 0
    assert run_translate([str(base / "graph"), input_file]) == greedy
    assert run_translate([str(base / "graph"), input_file, "--prefix", str(prefix_file)]) == (
        prefixed)
    _, record = read_provenance(base / "graph")
    recorded = json.loads((imported["run"] / IMPORT_FILE).read_text(encoding="utf-8"))
    assert record["imported_from"] == {"format": "marian", "origin": str(imported["folder"]),
                                       "files": recorded["files"]}
    capsys.readouterr()
    assert export.main(["--describe", str(base / "graph")]) == 0
    assert "imported from" in capsys.readouterr().out


@pytest.mark.slow
def test_the_xla_export_with_a_shortlist_translates_as_kt_translate(imported, greedy, tmp_path):
    """The XLA export with a shortlist learned from target text (the run's vocab/ named)."""
    run, input_file = str(imported["run"]), str(imported["input"])
    base = tmp_path / "exports"
    sources, targets = training_sentences(200, seed=11)
    # With the greedy translations among the target text, the shortlist (of every piece that
    # text holds) holds each piece they use: the search over it must find them exactly. (A
    # random model may choose a piece that no text splits into, e.g. a single letter.)
    pairs = [pair for pair in zip(imported["lines"], greedy) if pair[0]]
    sources, targets = sources + [line for line, _ in pairs], targets + [text for _, text in pairs]
    data = [tmp_path / "shortlist.en", tmp_path / "shortlist.fr"]
    for path, side in zip(data, (sources, targets)):
        path.write_text("".join(line + "\n" for line in side), encoding="utf-8")
    assert export.main([run, f"{run}/vocab", "--name", "xla", "--base-dir", str(base), *SEARCH,
                        "--xla", "--shortlist", "1000,1000", "--shortlist-data",
                        *map(str, data)]) == 0
    assert run_translate([str(base / "xla"), input_file]) == greedy


def test_a_shortlist_learns_target_pieces_from_target_text(imported, tmp_path):
    """The frequent ids of a shortlist learned from French text are target.spm's most common
    pieces of it (ties by id), and the shortlist spans both vocabularies."""
    _, tokenizer = load_run_model(str(imported["run"]))
    sources, targets = training_sentences(100, seed=11)
    data = [tmp_path / "shortlist.en", tmp_path / "shortlist.fr"]
    for path, side in zip(data, (sources, targets)):
        path.write_text("".join(line + "\n" for line in side), encoding="utf-8")
    shortlist = export.learn_shortlist("8,2", [str(path) for path in data],
                                       str(imported["run"]), tokenizer)
    counts = collections.Counter(piece for text in targets
                                 for piece in tokenize(imported["folder"], text, "target"))
    ids = {piece: index for index, piece in enumerate(vocabulary_pieces(tokenizer)[1])}
    most_common = sorted(counts, key=lambda piece: (-counts[piece], ids[piece]))[:8]
    assert tokenizer.id_to_piece(shortlist.frequent_ids.numpy()) == most_common
    assert shortlist.target_vocab_size == tokenizer.target_vocab_size
    assert shortlist.vocab_size == tokenizer.vocab_size


@pytest.mark.parametrize("variant", ["fixture", "post_norm_swish_learned_tied"])
def test_ctranslate2_export_equals_ctranslate2s_own_conversion(variant, imported, tmp_path):
    """kt-export --format ctranslate2 of an imported run and CTranslate2's conversion of the
    original folder give the same pieces, greedy and beam 4; kt-translate reads the export."""
    if variant == "fixture":
        folder, run = imported["folder"], imported["run"]
    else:
        folder = write_marian_model(tmp_path / "marian", MarianVariant(learned_positions=True,
                                                                        seed=5))
        run = tmp_path / "run"
        assert import_model.main([str(folder), "--output-dir", str(run)]) == 0
    base = tmp_path / "exports"
    assert export.main([str(run), str(run / "vocab"), "--name", "ct2", "--base-dir", str(base),
                        "--format", "ctranslate2", "--quantization", "float32", *SEARCH]) == 0
    ours = ctranslate2.Translator(str(base / "ct2" / "1"), device="cpu", intra_threads=1)
    theirs = ctranslate2_conversion(folder, tmp_path / "converted")
    sources = [marian_pieces(folder, line) for line in imported["lines"] if line]
    sources += [tokenize(folder, text) for text in training_sentences(20, seed=13)[0]]
    for beam_size in (1, 4):
        options = dict(beam_size=beam_size, min_decoding_length=0, max_decoding_length=24,
                       return_scores=True)
        exported = ours.translate_batch(sources, suppress_sequences=[["<pad>"], ["<s>"]],
                                        **options)
        converted = theirs.translate_batch(sources, **options)
        for one, other in zip(exported, converted):
            assert one.hypotheses == other.hypotheses
            np.testing.assert_allclose(one.scores, other.scores, atol=1e-3)
    if variant == "fixture":  # One line a batch: CTranslate2's length limit is per batch.
        lines, prefixes = imported["lines"], ["je", "", "", "nous aime le", ""]
        prefix_file = tmp_path / "prefix.fr"
        prefix_file.write_text("".join(line + "\n" for line in prefixes), encoding="utf-8")
        command = [str(base / "ct2"), str(imported["input"]), "--batch-size", "1"]
        assert run_translate(command) == ctranslate2_texts(theirs, folder, lines, beam_size=1)
        assert run_translate([*command, "--prefix", str(prefix_file)]) == ctranslate2_texts(
            theirs, folder, lines, prefixes, beam_size=1)


@pytest.mark.slow
def test_alignment_and_attention_plots_show_each_sides_pieces(imported, tmp_path):
    """translate_with_alignment's source pieces are source.spm's (and the language token);
    kt-plot-attention labels the source with them and the target with target.spm's."""
    folder, line = imported["folder"], imported["lines"][0]
    model, tokenizer = load_run_model(str(imported["run"]))
    translator = TranslationModule(model, tokenizer, kt.SearchSettings(beam_size=1,
                                                                max_decode_extra=EXTRA))
    found = translator.translate_with_alignment(tf.constant([line]))
    assert [piece.decode() for piece in found["source_pieces"].numpy()[0]] == (
        marian_pieces(folder, line) + ["</s>"])
    target = training_sentences(1, seed=7)[1][0]
    maps = {attention.name: attention for attention in attention_maps(model, tokenizer, line,
                                                                       target)}
    cross = maps["encoder_decoder_layer0"]
    assert cross.key_tokens == marian_pieces(folder, line) + ["</s>"]
    assert cross.query_tokens == ["<s>"] + tokenize(folder, target, "target")
    out = tmp_path / "plots"
    assert plot_attention.main([str(imported["run"]), line, "--target", target, "--out",
                                str(out)]) == 0
    assert {path.name for path in out.iterdir()} == {f"{name}.png" for name in maps}
