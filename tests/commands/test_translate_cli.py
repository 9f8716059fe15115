"""kt-translate: one output line per input line, in order, through an export or a run."""
import io
from collections.abc import Callable, Iterator
from pathlib import Path

import numpy as np
import pytest
import tensorflow as tf

import keras_transformer as kt
from helpers import random_run, text_lines
from keras_transformer.data.tokenizer import SubwordTokenizer
from keras_transformer.serving.export import export_translator
from keras_transformer.serving.loading import export_version, load_export
from keras_transformer.serving.text_translation import (LineTranslator, best_lines,
                                                        length_batches)
from keras_transformer.training.run_dir import RunDir
from trainers import translate

LINES = [b"I have forty-two apples", b"", b"\xff\xfe caf\xc3 broken", b"She sees three dogs",
         b" ".join([b"seventeen green pears"] * 40), b"one cat"]
# kt-translate's sampling flags, and the same settings as an export fixes them.
SAMPLING_FLAGS = ["--top-p", "0.95", "--temperature", "1.5", "--max-decode-extra", "4"]
SAMPLING = kt.SearchSettings(max_decode_extra=4, sampling=True, temperature=1.5, top_p=0.95,
                             sampling_seed=1)


@pytest.fixture(scope="module", autouse=True)
def load_export_once() -> Iterator[Callable[..., LineTranslator]]:
    """`load_export` that loads each export version once in this module (each load: a second
    or two) and gives that translator again, for kt-translate too: a loaded export translates as
    its files say, and no test changes them. Run directories still load at every start (their
    search is traced anew: the sampling seed must reproduce across starts)."""
    loaded: dict[tuple, LineTranslator] = {}

    def load(path: str | Path, target_language: str | None = None,
             **options: object) -> LineTranslator:
        key = (export_version(path), target_language, tuple(sorted(options.items())))
        if key not in loaded:
            loaded[key] = load_export(path, target_language, **options)
        return loaded[key]

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(translate, "load_export", load)
        yield load


@pytest.fixture(scope="module")
def run_dir(demo_vocab: Path, tmp_path_factory: pytest.TempPathFactory) -> RunDir:
    """A `random_run` on the demo vocabulary, which the tests translate with and only read."""
    return random_run(demo_vocab, tmp_path_factory.mktemp("run"))


@pytest.fixture(scope="module")
def export_dir(run_dir: RunDir, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Two versions of an export of the `run_dir` model: 1 samples as `SAMPLING` says (the
    sampling test's export of the run), 2 searches a beam of 3."""
    from trainers.common import load_run_model

    model, tokenizer = load_run_model(str(run_dir.root))
    base = tmp_path_factory.mktemp("exports")
    export_translator(model, tokenizer, "demo", base, SAMPLING)
    export_translator(model, tokenizer, "demo", base, kt.SearchSettings(beam_size=3,
                                                                        max_decode_extra=5))
    return base / "demo"


@pytest.fixture
def input_file(tmp_path):
    path = tmp_path / "input.en"
    path.write_bytes(b"\n".join(LINES) + b"\r\n")
    return path


def run(argv, capsys) -> tuple[int, list[str], str]:
    stdout = io.StringIO()
    code = translate.main(argv, stdout=stdout)
    return code, stdout.getvalue().split("\n")[:-1], capsys.readouterr().err


@pytest.mark.slow
def test_every_line_gets_its_own_translation_in_order(export_dir, input_file, capsys):
    code, outputs, err = run([str(export_dir), str(input_file), "--batch-size", "2"], capsys)
    assert code == 0 and len(outputs) == len(LINES)
    serving = tf.saved_model.load(str(export_dir / "2")).signatures["serving_default"]
    for line, output in zip(LINES, outputs):  # each as the export translates it alone
        alone = serving(text=tf.constant([line]))["translation"].numpy()[0].decode("utf-8")
        assert output == alone
    assert outputs[1] == ""
    assert f"{input_file}:3: not valid UTF-8" in err and "6/6 sentences" in err


@pytest.mark.slow
def test_nbest_lists_k_hypotheses_per_line_best_first(export_dir, input_file, capsys):
    _, best, _ = run([str(export_dir), str(input_file)], capsys)
    code, outputs, _ = run([str(export_dir), str(input_file), "--nbest", "3", "--quiet"], capsys)
    assert code == 0 and len(outputs) == 3 * len(LINES)
    rows = [line.split(" ||| ") for line in outputs]
    assert [int(index) for index, _, _ in rows] == [i for i in range(len(LINES)) for _ in "abc"]
    assert [text for _, text, _ in rows[::3]] == best
    scores = np.array([float(score) for _, _, score in rows]).reshape(len(LINES), 3)
    assert np.all(np.diff(scores, axis=1) <= 1e-4)
    code, _, err = run([str(export_dir), str(input_file), "--nbest", "4"], capsys)
    assert code == 2 and "--nbest: 4 exceeds the beam size 3" in err


@pytest.mark.slow
def test_exports_keep_their_search_settings_and_errors_name_paths(export_dir, input_file,
                                                                  tmp_path, capsys):
    code, _, err = run([str(export_dir), str(input_file), "--beam-size", "5"], capsys)
    assert code == 2 and "--beam-size: an export's weights and search settings are fixed" in err
    code, _, err = run([str(export_dir), str(input_file), "--ensemble", str(export_dir)],
                       capsys)
    assert code == 2 and "--ensemble: an export's weights and search settings are fixed" in err
    code, _, err = run([str(tmp_path / "nowhere"), str(input_file)], capsys)
    assert code == 2 and f"model: '{tmp_path / 'nowhere'}' does not exist" in err
    code, _, err = run([str(export_dir), str(tmp_path / "missing.en")], capsys)
    assert code == 2 and "missing.en" in err
    assert export_version(export_dir) == export_dir / "2"
    assert export_version(export_dir / "1") == export_dir / "1"


@pytest.mark.slow
def test_several_inputs_go_to_their_own_outputs(export_dir, input_file, tmp_path, capsys):
    other = tmp_path / "other.en"
    other.write_text("one cat\n\n")
    outputs = [tmp_path / "out" / "a.de", tmp_path / "out" / "b.de"]
    code, stdout, _ = run([str(export_dir / "1"), str(input_file), str(other), "--output",
                           *map(str, outputs), "--quiet"], capsys)
    assert code == 0 and stdout == []
    # Lines as the command writes them (a sampled translation may hold U+2028 and the like).
    assert [len(text_lines(path)) for path in outputs] == [6, 2]
    with pytest.raises(SystemExit):
        translate.parse_args([str(export_dir), str(input_file), "--output", "a", "b"])


@pytest.mark.slow
def test_prefix_files_start_each_line_s_translation(export_dir, input_file, tmp_path, capsys):
    prefixes = tmp_path / "prefixes.de"
    prefixes.write_bytes(b"ich habe\n\nzwei\n\nsieben\n\n")  # 6 lines, as the input
    code, outputs, _ = run([str(export_dir), str(input_file), "--prefix", str(prefixes),
                            "--batch-size", "2", "--quiet"], capsys)
    _, free, _ = run([str(export_dir), str(input_file), "--quiet"], capsys)
    assert code == 0 and len(outputs) == len(LINES)
    for line, prefix, output, unforced in zip(LINES, prefixes.read_bytes().split(b"\n"),
                                              outputs, free):
        if not line:
            assert output == ""
        elif prefix:
            assert output.startswith(prefix.decode()), (prefix, output)
        else:
            assert output == unforced
    prefixes.write_bytes(b"ich habe\n")
    code, _, err = run([str(export_dir), str(input_file), "--prefix", str(prefixes)], capsys)
    assert code == 2 and f"--prefix: {prefixes} has 1 lines but {input_file} has 6" in err
    with pytest.raises(SystemExit):
        translate.parse_args([str(export_dir), str(input_file), "--prefix", str(prefixes),
                              "--nbest", "2"])
    with pytest.raises(SystemExit):
        translate.parse_args([str(export_dir), str(input_file), "--prefix", "missing.de"])
    assert "--prefix: 'missing.de' does not exist" in capsys.readouterr().err


class LineBreakingTranslator:
    """Translates every line to text with the line breaks a byte-level vocabulary can emit."""
    beam_size, takes_prefixes = 2, True

    def best_function(self, terms=False, scores=False, prefixes=False, alignment=False):
        return lambda texts, *_: {"translation": tf.constant(
            [b"a\nb\r\nc " + text for text in texts.numpy().tolist()])}

    def nbest(self, texts, k):
        return [[(b"x\ny", -1.0), (b"z\r", -2.0)][:k] for _ in texts]

    def truncated(self, texts):
        return []


def test_line_breaks_inside_translations_never_shift_lines(input_file, tmp_path, capsys,
                                                          monkeypatch):
    monkeypatch.setattr(translate, "load_translator", lambda flags: LineBreakingTranslator())
    code, outputs, _ = run([str(tmp_path), str(input_file), "--quiet"], capsys)
    assert code == 0 and len(outputs) == len(LINES)
    assert outputs[0] == "a b  c I have forty-two apples"
    code, outputs, _ = run([str(tmp_path), str(input_file), "--nbest", "2", "--quiet"], capsys)
    assert code == 0 and len(outputs) == 2 * len(LINES)
    assert outputs[:2] == ["0 ||| x y ||| -1.0000", "0 ||| z  ||| -2.0000"]


# Lines of whitespace (space, tab, no-break space, em space) among a sentence and an empty line.
BLANK_LINES = [b"one cat", b" ", b"\t", "\u00a0".encode(), " \t\u2003 ".encode(), b"",
               b"two dogs"]


def inventing_translator(tokenizer: SubwordTokenizer) -> LineTranslator:
    """A backend that, as a model does, makes a sentence of any text it is given but an empty
    one (the `translate_text`, `translate_ids`, `translate_scored` and `translate_terms` calls
    of every backend), on `tokenizer`."""
    def invent(text: tf.Tensor, *_: tf.Tensor) -> dict:
        given = tf.strings.length(text) > 0
        return {"translation": tf.where(given, "erfunden", ""),
                "score": tf.zeros(tf.shape(text)), "confidence": tf.zeros(tf.shape(text)),
                "words": tf.fill([tf.shape(text)[0], 1], "erfunden"),
                "word_scores": tf.zeros([tf.shape(text)[0], 1]),
                "missing_terms": tf.fill(tf.shape(text), "")}

    def invent_ids(ids: tf.Tensor) -> dict:
        given = tf.reduce_any(ids != 0, axis=1)
        return {"nbest_ids": tf.where(given[:, None, None], 7, 0) * tf.ones([1, 2, 3], tf.int32),
                "nbest_scores": tf.zeros([tf.shape(ids)[0], 2])}

    return LineTranslator(invent, invent_ids, tokenizer, translate_prefixed=invent,
                          translate_terms=invent, translate_scored=invent)


def test_lines_of_whitespace_pass_through_as_they_are(demo_tokenizer):
    translator = inventing_translator(demo_tokenizer)
    texts = [line.decode() for line in BLANK_LINES]
    expected = [text if not text.strip() else "erfunden" for text in texts]
    records: dict[int, dict] = {}
    for options in ({}, {"prefixes": [b""] * len(texts)}, {"terms": ["Katze"] * len(texts)},
                    {"on_scores": records.__setitem__}):
        assert best_lines(translator, BLANK_LINES, batch_size=3, **options) == expected, options
    assert records[1] == records[5]  # a blank line's confidence record: an empty line's
    translations, _ = translator.best(BLANK_LINES)
    assert [text.decode() for text in translations] == expected
    for text, hypotheses in zip(texts, translator.nbest(BLANK_LINES, 2)):
        blank = not text.strip()
        assert all((found.decode() == text) == blank for found, _ in hypotheses), text


@pytest.mark.slow
def test_blank_lines_pass_through_an_export_and_a_run(export_dir, run_dir, tmp_path, capsys):
    path = tmp_path / "blank.en"
    path.write_bytes(b"\n".join(BLANK_LINES) + b"\n")
    blank = [index for index, line in enumerate(BLANK_LINES) if not line.decode().strip()]
    for model in (export_dir, run_dir.root):
        code, outputs, _ = run([str(model), str(path), "--quiet"], capsys)
        assert code == 0 and [outputs[index] for index in blank] == [
            BLANK_LINES[index].decode() for index in blank]
    code, outputs, _ = run([str(export_dir), str(path), "--nbest", "2", "--quiet"], capsys)
    assert code == 0 and [outputs[2 * index] for index in blank] == [
        f"{index} ||| {BLANK_LINES[index].decode()} ||| 0.0000" for index in blank]


@pytest.mark.parametrize("seed", range(5))
def test_length_batches_cover_every_text_once_within_budget(seed):
    lengths = np.random.default_rng(seed).integers(0, 60, size=50).tolist()
    batches = list(length_batches(lengths, batch_size=8, batch_tokens=100))
    assert sorted(i for batch in batches for i in batch) == list(range(50))
    for batch in batches:
        longest = max(max(lengths[i] for i in batch), 1)
        assert len(batch) <= 8 and (len(batch) == 1 or len(batch) * longest <= 100)


def test_run_directories_translate_in_process_with_search_flags(run_dir, demo_train,
                                                                input_file, tmp_path, capsys):
    from keras_transformer.training.checkpoints import save_weights_atomic

    flags = ["--beam-size", "2", "--nbest", "2", "--max-decode-extra", "3"]
    code, outputs, _ = run([str(run_dir.root), str(input_file), *flags], capsys)
    assert code == 0 and len(outputs) == 2 * len(LINES)
    code, ensembled, _ = run([str(run_dir.root), str(input_file), *flags, "--ensemble",
                              str(run_dir.root)], capsys)  # the run with itself: the run
    assert code == 0 and len(ensembled) == len(outputs)
    for alone, doubled in zip(outputs, ensembled):  # averaging two equal log-probabilities
        *text, score = alone.split(" ||| ")       # may round the printed score's last digit
        *doubled_text, doubled_score = doubled.split(" ||| ")
        assert doubled_text == text and abs(float(doubled_score) - float(score)) <= 2e-4

    other = RunDir(tmp_path / "other")  # a run with its own, smaller vocabulary
    other_recipe = kt.Recipe.preset("tiny", vocab_size=300, num_layers=1, max_length=24)
    other.write_json("config.json", other_recipe.to_dict())
    SubwordTokenizer.train(demo_train[0] + demo_train[1], 300, other.vocab)
    save_weights_atomic(kt.Transformer(other_recipe.architecture), other.final_weights)
    code, _, err = run([str(run_dir.root), str(input_file), "--ensemble", str(other.root)],
                       capsys)
    assert code == 2 and f"--ensemble: {str(other.root)!r} has another vocabulary" in err


@pytest.mark.slow
def test_sampling_flags_draw_reproducibly_and_exports_fix_them(run_dir, export_dir, input_file,
                                                               capsys, load_export_once):
    """A run samples with `--top-p/--temperature/--seed`: the same seed, the same lines; another
    seed, other lines; `--seed` alone is refused. An export fixes the sampling settings: its
    SavedModel (`export_dir`'s version 1) translates as the in-process `TranslationModule` with the
    same settings."""
    from keras_transformer.decoding.translator import TranslationModule
    from trainers.common import load_run_model

    sampling = [str(run_dir.root), str(input_file), *SAMPLING_FLAGS]
    code, first, _ = run([*sampling, "--seed", "1"], capsys)
    _, again, _ = run([*sampling, "--seed", "1"], capsys)
    _, other, _ = run([*sampling, "--seed", "2"], capsys)
    assert code == 0 and len(first) == len(LINES) and first == again and other != first
    code, _, err = run([str(run_dir.root), str(input_file), "--seed", "1"], capsys)
    assert code == 2 and "--seed: only for sampling" in err
    code, _, err = run([str(run_dir.root), str(input_file), "--top-p", "1.5"], capsys)
    assert code == 2 and "--top-p: must be in (0, 1]" in err

    model, tokenizer = load_run_model(str(run_dir.root))
    sampled = export_dir / "1"
    texts = [line for line in LINES if line]
    in_process = LineTranslator.from_translator(TranslationModule(model, tokenizer, SAMPLING))
    assert load_export_once(sampled).best(texts)[0] == in_process.best(texts)[0]
    code, from_export, _ = run([str(sampled), str(input_file)], capsys)
    assert code == 0 and from_export == first
    code, _, err = run([str(sampled), str(input_file), "--seed", "3"], capsys)
    assert code == 2 and "--seed" in err and "fixed when it is written" in err


@pytest.mark.slow
def test_lines_longer_than_the_model_takes_are_counted_and_named(export_dir, run_dir,
                                                                  input_file, tmp_path, capsys):
    """Line 5 (120 words) is cut to the export's and the run's 23 source subwords: a warning
    counts it and names it, for an export as for a run directory; lines within the limit
    give none."""
    cut = (f"{input_file}: 1 line longer than the model takes (max_length 24), translated "
           "from its first 23 subwords: line 5")
    for model in (export_dir, run_dir.root):
        code, outputs, err = run([str(model), str(input_file), "--quiet"], capsys)
        assert code == 0 and len(outputs) == len(LINES) and cut in err
    short = tmp_path / "short.en"
    short.write_bytes(b"\n".join(line for line in LINES if len(line) < 100) + b"\n")
    code, _, err = run([str(export_dir), str(short), "--quiet"], capsys)
    assert code == 0 and "longer than the model takes" not in err


def test_truncated_sources_are_those_the_translator_cuts(run_dir):
    """Of the growing prefixes of a long line, those a `TranslationModule` of a max_length 24 model
    searches from fewer pieces than the text has (its `source_pieces`) are the ones
    `truncated_sources` names."""
    from keras_transformer.decoding.translator import TranslationModule, truncated_sources
    from trainers.common import load_run_model

    model, tokenizer = load_run_model(str(run_dir.root))
    translator = TranslationModule(model, tokenizer, kt.SearchSettings(beam_size=1,
                                                                max_decode_extra=1))
    words = LINES[4].split()
    prefixes = [b" ".join(words[:count]) for count in range(1, 16)]
    searched = translator.translate_with_alignment(tf.constant(prefixes))["source_pieces"]
    whole = tokenizer.tokenize(tf.constant(prefixes)).to_list()
    cut = [index for index, (pieces, ids) in enumerate(zip(searched.numpy(), whole))
           if sum(piece != b"" for piece in pieces) - 1 < len(ids)]  # - 1: the EOS
    assert 0 < len(cut) < len(prefixes)
    assert truncated_sources(tokenizer, prefixes, 24, batch_size=4) == cut


def test_corpus_translation_and_evaluation_name_the_lines_they_cut(run_dir, tmp_path, capsys):
    """kt-translate-corpus (lines 5 and 7 cut, in two chunks) and kt-evaluate warn as
    kt-translate does."""
    from trainers import evaluate, translate_corpus

    lines = ["one cat"] * 7
    lines[4] = lines[6] = "seventeen green pears " * 20
    corpus = tmp_path / "train.en"
    corpus.write_text("".join(line + "\n" for line in lines), encoding="utf-8")
    cut = (f"{corpus}: 2 lines longer than the model takes (max_length 24), translated from "
           "their first 23 subwords: lines 5, 7")
    assert translate_corpus.main([str(run_dir.root), str(corpus), "--output",
                                  str(tmp_path / "out.de"), "--chunk-lines", "3",
                                  "--quiet"]) == 0
    assert cut in capsys.readouterr().err
    assert evaluate.main([str(run_dir.root), "--src", str(corpus), "--ref", str(corpus),
                          "--hypotheses", str(tmp_path / "hyp.de")]) == 0
    assert cut in capsys.readouterr().err
