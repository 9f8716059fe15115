"""Short kt-train runs: TensorBoard contents, outputs, mixed precision, steps per execution,
several corpora."""
import contextlib
import io
import json
import re
import shutil
import warnings
from pathlib import Path
from types import SimpleNamespace

import keras
import pytest
import tensorflow as tf
from tensorflow.core.framework import types_pb2
from tensorflow.core.protobuf import saved_model_pb2

from keras_transformer.serving.provenance import read_provenance
from keras_transformer.training.settings import recorded_options
from trainers import evaluate, train
from helpers import cut, demo_corpus, final_json

MICRO = ["--set", "vocab_size=400", "--set", "d_model=32", "--set", "d_ff=64",
         "--set", "num_layers=1", "--set", "batch_tokens=512", "--set", "max_length=48",
         "--eval-sentences", "8", "--attention-sentences", "0", "--no-export"]
SCALARS = {"loss", "token_accuracy", "perplexity", "learning_rate", "tokens_per_second",
           "dev_bleu"}


def local_data_args(directory: Path) -> list[str]:
    """The `--train-src/--train-tgt/--dev-src/--dev-tgt` of `demo_corpus(directory)` (its dev
    set cut to 16 lines)."""
    paths = demo_corpus(directory)
    return ["--train-src", paths["train"][0], "--train-tgt", paths["train"][1],
            "--dev-src", paths["dev"][0], "--dev-tgt", paths["dev"][1]]


def summaries(log_dir: Path) -> dict[str, list]:
    """Tag -> [(step, TensorProto)] of every event file under `log_dir`."""
    found: dict[str, list] = {}
    for path in log_dir.rglob("events.out.tfevents.*"):
        for event in tf.compat.v1.train.summary_iterator(str(path)):
            for value in event.summary.value:
                found.setdefault(value.tag, []).append((event.step, value))
    return found




@pytest.mark.slow
def test_short_run_logs_scalars_and_attention_images(tmp_path, capsys):
    run_dir = tmp_path / "run"
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        assert train.main(MICRO + ["--output-dir", str(run_dir), "--steps", "4",
                                   "--eval-every", "2", "--test-beam-size", "1",
                                   "--attention-sentences", "1",
                                   "--progress-seconds", "0", "--log-every-steps", "1"]) == 0
    assert not [warning for warning in caught if "shuffle" in str(warning.message)]
    captured = capsys.readouterr()
    result = final_json(captured.out)
    assert result["steps"] == 4 and "BLEU" in result["test"]
    # One checkpoint (at the end): nothing to average; the result is the final weights.
    assert result["weights"] == str(run_dir / "model.weights.h5") and result["averaged"] == []
    assert result["averaging"] == "one checkpoint: nothing to average"
    assert set(result["dev_bleu"]) == {"final"}
    # Progress: a line per step (--progress-seconds 0) with the budget and an ETA, a line per
    # evaluation, and none of Keras' "Epoch 1/2" lines.
    progress = [line for line in captured.err.splitlines() if "target tok/s" in line]
    assert [line.split(",")[0] for line in progress[:4]] == [
        f"kt-train: step {step}/4 ({25 * step}%)" for step in (1, 2, 3, 4)]
    assert all("ETA" in line and "elapsed" in line for line in progress)
    # Evaluations name their dev figure; after the last step, a line as each stage starts
    # and ends, and the final dev figure named by its kind.
    evaluations = [line for line in captured.err.splitlines()
                   if "dev greedy BLEU (8 sentences) " in line]
    assert [line.split(":")[1].strip() for line in evaluations] == ["step 2", "step 4"]
    assert "dev_bleu" not in captured.err and "{" not in captured.err
    after = captured.err.split("kt-train: step 4: ")[1].splitlines()[1:]
    assert [line.split(" ...")[0].split(": done")[0] for line in after] == [
        "kt-train: dev BLEU of the final weights", "kt-train: dev BLEU of the final weights",
        "kt-train: one checkpoint: nothing to average", after[3],
        "kt-train: test set: translating 500 sentences (beam 1)",
        "kt-train: test set: translating 500 sentences (beam 1)"]
    assert re.fullmatch(r"kt-train: dev greedy BLEU \(\d+ sentences\): final \d+\.\d\d; "
                        r"the run's result: .*model\.weights\.h5", after[3])
    assert "Epoch" not in captured.out + captured.err
    found = summaries(run_dir / "tensorboard")
    assert SCALARS <= set(found)
    assert [step for step, _ in found["loss"]] == [1, 2, 3, 4]  # --log-every-steps 1
    assert [step for step, _ in found["dev_bleu"]] == [2, 4]
    learning_rates = [tf.make_ndarray(value.tensor) for _, value in found["learning_rate"]]
    assert learning_rates[1] > learning_rates[0] > 0  # warmup: the rate rises
    images = {tag: values for tag, values in found.items() if tag.startswith("attention/")}
    kinds = {"encoder_self_layer0", "decoder_self_layer0", "encoder_decoder_layer0"}
    assert {tag.rsplit("/", 1)[1] for tag in images} == kinds
    for values in images.values():
        assert [step for step, _ in values] == [2, 4]
        _, value = values[0]
        assert value.metadata.plugin_data.plugin_name == "images"
        width, height, png = value.tensor.string_val
        assert png.startswith(b"\x89PNG") and int(width) > 0 and int(height) > 0
    curve = (run_dir / "bleu_curve.tsv").read_text().splitlines()
    assert curve[0] == "step\tseconds\tdev_bleu" and [line.split("\t")[0] for line in
                                                       curve[1:]] == ["2", "4"]
    assert (run_dir / "model.weights.h5").is_file()
    assert len((run_dir / "test.hyp").read_text().splitlines()) == 500


def graph_dtypes(saved_model: Path) -> set[int]:
    """Every dtype (`types_pb2` enum) named by a node attribute of the SavedModel's graphs."""
    proto = saved_model_pb2.SavedModel()
    proto.ParseFromString((saved_model / "saved_model.pb").read_bytes())
    found = set()
    for graph in proto.meta_graphs:
        nodes = [*graph.graph_def.node, *(node for function in graph.graph_def.library.function
                                          for node in function.node_def)]
        for node in nodes:
            for value in node.attr.values():
                found |= {value.type, *value.list.type}
    return found


@pytest.fixture(scope="module")
def resumed_run(tmp_path_factory) -> SimpleNamespace:
    """One run that several tests read (each of its starts traces its model: seconds): two
    training corpora (the demo corpus's, and its first 300 sources paired with the same lines
    in reverse order), mixed_bfloat16, `--steps-per-execution 2`, backups and evaluations every
    4 steps, a checkpoint every 2, a recipe averaging the last 7, its batches logged; 8 steps,
    then started again with `--steps 16`, a test set and an export. Its `options` (but
    `--output-dir`, `--steps` and the second start's test set and export), `data` (the demo
    corpus's options), `extra` (the second corpus's directory), `test` (the test set's source
    and target files: the demo test set's first 40 lines, then a line of more than max_length
    48 subwords), `saved_models` (the export's base directory), `run_dir`, `first` (a copy of
    the run directory as the first start left it), `outputs` (each start's stdout and stderr)
    and `policy` (the global dtype policy's name after the starts)."""
    root = tmp_path_factory.mktemp("resumed_run")
    data = local_data_args(root / "data")
    extra = root / "extra"
    extra.mkdir()
    lines = Path(data[1]).read_text(encoding="utf-8").splitlines()[:300]
    (extra / "train.en").write_text("\n".join(lines) + "\n", encoding="utf-8")
    (extra / "train.de").write_text("\n".join(reversed(lines)) + "\n", encoding="utf-8")
    test = [str(root / "data" / f"test.{language}") for language in ("en", "de")]
    for path in test:  # 40 lines (decoded twice), and a last of more than max_length 48 subwords
        cut(path, 40, " ".join(Path(path).read_text(encoding="utf-8").splitlines()[:8]))
    options = MICRO + data + [
        "--train-src", str(extra / "train.en"), "--train-tgt", str(extra / "train.de"),
        "--precision", "mixed_bfloat16", "--eval-every", "4", "--backup-every", "4",
        "--steps-per-execution", "2", "--checkpoint-every-steps", "2", "--set", "average_last=7",
        "--progress-seconds", "0", "--log-batches"]
    tested_and_exported = [arg for arg in options if arg != "--no-export"] + [
        "--test-src", test[0], "--test-tgt", test[1], "--base-dir", str(root / "saved_models")]
    run_dir, outputs = root / "run", []
    for steps, argv in (("8", options), ("16", tested_and_exported)):
        out, err = io.StringIO(), io.StringIO()
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            code = train.main(argv + ["--output-dir", str(run_dir), "--steps", steps])
        assert code == 0, err.getvalue()[-3000:]
        outputs.append((out.getvalue(), err.getvalue()))
        if steps == "8":
            shutil.copytree(run_dir, root / "first")
    return SimpleNamespace(options=options, data=data, extra=extra, test=test,
                           saved_models=root / "saved_models", run_dir=run_dir,
                           first=root / "first", outputs=outputs,
                           policy=keras.config.dtype_policy().name)


@pytest.mark.slow
def test_mixed_precision_run_exports_float32_and_decodes_its_test_set_as_kt_evaluate(
        resumed_run, tmp_path, capsys):
    """A mixed_bfloat16 run (`resumed_run`'s second start): its export is float32, and its
    final test pass decodes as `kt-evaluate` does (the float32 weights), so a run has one test
    figure; a test line longer than the model takes is warned of as kt-evaluate warns of it."""
    run_dir, test = resumed_run.run_dir, resumed_run.test
    out, err = resumed_run.outputs[1]
    assert evaluate.main([str(run_dir), "--src", test[0], "--ref", test[1],
                          "--hypotheses", str(tmp_path / "evaluated.hyp")]) == 0
    assert ((tmp_path / "evaluated.hyp").read_text(encoding="utf-8")
            == (run_dir / "test.hyp").read_text(encoding="utf-8"))
    warning = re.search(r"kt-evaluate: warning: (.* longer than the model takes .*)",
                        capsys.readouterr().err)
    assert warning and f"{test[0]}: 1 line" in warning[1]
    assert f"kt-train: warning: {warning[1]}" in err
    assert "16 steps, mixed_bfloat16" in err
    result = final_json(out)
    assert result["precision"] == "mixed_bfloat16"
    assert resumed_run.policy == "float32"  # the run's policy was scoped
    export = Path(result["export"])
    # A run's own export is staged beside, never into, the name a server would load.
    assert export == resumed_run.saved_models / "run-staging" / "1"
    version, provenance = read_provenance(export.parent)
    assert version == export and provenance["run_dir"] == str(run_dir)
    assert provenance["weights"] == result["weights"]
    assert provenance["weights_reason"].startswith("result.json")
    assert provenance["test"] == result["test"] and "BLEU" in provenance["test"]
    assert provenance["training_precision"] == "mixed_bfloat16"
    assert provenance["precision"] == "float32" and provenance["dev_bleu"] == result["dev_bleu"]
    checkpoint = tf.train.load_checkpoint(str(export / "variables" / "variables"))
    variables = checkpoint.get_variable_to_dtype_map()
    variables.pop("_CHECKPOINTABLE_OBJECT_GRAPH")
    assert set(variables.values()) == {tf.float32}
    assert not any("optimizer" in name for name in variables)  # the weights alone
    dtypes = graph_dtypes(export)
    assert types_pb2.DT_FLOAT in dtypes and types_pb2.DT_BFLOAT16 not in dtypes


@pytest.mark.slow
def test_word_dropout_changes_every_training_batch_and_nothing_else(resumed_run, tmp_path):
    """The first start of `resumed_run` (word dropout 0) again with word dropout 0.3."""
    from keras_transformer.training.batch_log import read_batch_log

    run_dir = tmp_path / "word_dropout_0.3"
    assert train.main(resumed_run.options + ["--output-dir", str(run_dir), "--steps", "8",
                                             "--set", "word_dropout=0.3"]) == 0
    digests = {"0": read_batch_log(resumed_run.first / "batches.tsv"),
               "0.3": read_batch_log(run_dir / "batches.tsv")}
    results = {"0": json.loads((resumed_run.first / "config.json").read_text()),
               "0.3": json.loads((run_dir / "config.json").read_text())}
    assert all(digests["0"][step] != digests["0.3"][step] for step in range(1, 9))
    assert results["0.3"] == {**results["0"], "word_dropout": 0.3}


@pytest.mark.slow
def test_a_recipe_averaging_more_than_5_checkpoints_keeps_that_many(resumed_run):
    """`resumed_run` averages its last 7 checkpoints, of the 8 written by step 16."""
    result = final_json(resumed_run.outputs[1][0])
    checkpoints = resumed_run.run_dir / "checkpoints"
    assert len(list(checkpoints.glob("ckpt-*.weights.h5"))) == 7
    assert result["averaged"] == [f"ckpt-{step:08d}.weights.h5" for step in range(4, 17, 2)]


@pytest.mark.slow
def test_several_steps_per_execution_keep_the_step_count(resumed_run, capsys):
    """`--steps-per-execution 2` (`resumed_run`): the host-side step clock still counts every
    step: backups and evaluations at their steps, the run ends at its budget and resumes from
    its backup; an interval that is not a multiple is refused."""
    (first_out, _), (out, err) = resumed_run.outputs
    assert final_json(first_out)["steps"] == 8
    first = resumed_run.first
    marks = sorted(path.name for path in (first / "backup").glob("step-*.json"))
    assert marks == ["step-00000004.json", "step-00000008.json"]
    assert json.loads((first / "backup" / marks[-1]).read_text())["iterations"] == 8
    curve = (first / "bleu_curve.tsv").read_text().splitlines()[1:]
    assert [int(line.split("\t")[0]) for line in curve] == [4, 8]
    assert "restored step 8 " in err and final_json(out)["steps"] == 16
    curve = (resumed_run.run_dir / "bleu_curve.tsv").read_text().splitlines()[1:]
    assert [int(line.split("\t")[0]) for line in curve] == [4, 8, 12, 16]
    with pytest.raises(SystemExit):
        train.parse_args(resumed_run.options + ["--output-dir", str(resumed_run.run_dir),
                                                "--steps", "9"])
    assert "--steps: 9 is not a multiple of --steps-per-execution 2" in capsys.readouterr().err


@pytest.mark.slow
def test_several_training_corpora_prepare_into_one_storage_and_resume(resumed_run, capsys):
    """Two `--train-src/--train-tgt` pairs (`resumed_run`: the demo corpus and a second
    corpus): one storage counting both, a run that trains on it and resumes from its backup
    with the same files; one pair of files is still recorded as before (a path, not a list),
    so older runs resume."""
    data, extra, first = resumed_run.data, resumed_run.extra, resumed_run.first
    sources = Path(data[1])
    manifest = json.loads((first / "prepared" / "manifest.json").read_text())
    counts = [corpus["pairs"]["read"] for corpus in manifest["corpora"]]
    assert counts == [len(sources.read_text(encoding="utf-8").splitlines()), 300]
    options = json.loads((first / "run.json").read_text())
    assert options["train_src"] == [str(sources), str(extra / "train.en")]
    out, err = resumed_run.outputs[1]
    assert "restored step 8 " in err and "reusing" in err
    assert final_json(out)["steps"] == 16
    with pytest.raises(SystemExit):
        train.parse_args(MICRO + data + ["--train-src", str(extra / "train.en")])
    assert "2 source file(s) for 1 target file(s)" in capsys.readouterr().err
    command = train.parse_args(MICRO + data)
    assert recorded_options(command.data, command.options)["train_src"] == str(sources)


@pytest.mark.slow
def test_the_final_test_pass_decodes_the_float32_weights_whatever_the_training_precision(
        demo_vocab, demo_train, tmp_path):
    """kt-train's test pass given its mixed_bfloat16 training model writes what a float32
    `TranslationModule` of the same weights (kt-evaluate's) writes, where the bfloat16 model's own
    translations differ."""
    import keras_transformer as kt
    from helpers import random_run
    from keras_transformer.decoding.translator import TranslationModule
    from keras_transformer.evaluation import translate_corpus
    from keras_transformer.precision import precision_scope
    from keras_transformer.training.dev_test import evaluate_test, test_translator
    from trainers.common import load_run_model

    run = random_run(demo_vocab, tmp_path / "run")
    float32_model, tokenizer = load_run_model(str(run.root))
    with precision_scope("mixed_bfloat16"):
        bfloat16_model = kt.Transformer(float32_model.config)
    bfloat16_model.set_weights(float32_model.get_weights())
    sources = demo_train[0][:100]
    settings = kt.SearchSettings(beam_size=2, max_decode_extra=5)
    evaluate_test(run, test_translator(settings, None, run, bfloat16_model, tokenizer),
                  (sources, demo_train[1][:100]))
    written = (run.root / "test.hyp").read_text(encoding="utf-8").split("\n")[:len(sources)]
    float32 = translate_corpus(TranslationModule(float32_model, tokenizer, settings), sources)
    bfloat16 = translate_corpus(TranslationModule(bfloat16_model, tokenizer, settings), sources)
    assert bfloat16 != float32  # the precisions disagree on this model: the check can fail
    assert written == float32
