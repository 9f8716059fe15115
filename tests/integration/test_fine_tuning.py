"""`kt-train --init-from`: a run (here an imported Marian model, with its own SentencePiece
pair) fine-tuned on new pairs keeps its architecture and tokenizer, starts from its weights with
the fine-tuning schedule, refuses what would change the model, and resumes as any run does;
with `--lora-rank`, only LoRA adapters are trained and the files other commands read hold the
merged (plain) weights."""
import contextlib
import io
import json
import sys

import numpy as np
import pytest

import keras_transformer as kt
from helpers import final_weights
from keras_transformer.config import FINE_TUNING_PEAK_RATE, FINE_TUNING_WARMUP_STEPS
from keras_transformer.data.languages import RunLanguages
from keras_transformer.importing.marian import read_marian_folder
from keras_transformer.importing.run_directory import imported_transformer, write_imported_run
from keras_transformer.optimization import TransformerSchedule
from keras_transformer.serving.loading import load_export
from keras_transformer.serving.text_translation import LineTranslator
from keras_transformer.training.checkpoints import checkpoint_path, list_checkpoints
from keras_transformer.training.run_dir import RunDir
from marian_models import training_sentences, write_marian_model
from trainers import export, train

OPTIONS = ["--precision", "float32", "--kernels", "fast", "--eval-every", "2",
           "--backup-every", "2", "--eval-sentences", "4", "--attention-sentences", "0",
           "--progress-seconds", "0", "--no-export", "--set", "batch_tokens=1024"]


@pytest.fixture(scope="module")
def imported(tmp_path_factory):
    """An imported random Marian model and a small corpus of new pairs. One layer a side: what
    these tests prove does not depend on depth, and each kt-train run traces half the graph."""
    root = tmp_path_factory.mktemp("fine_tuning")
    folder = write_marian_model(root / "marian", enc_depth=1, dec_depth=1)
    run = write_imported_run(read_marian_folder(folder), root / "imported", str(folder),
                             "marian")
    sources, targets = training_sentences(120, seed=3)
    files = {}
    for name, lines in (("train.src", sources[20:]), ("train.tgt", targets[20:]),
                        ("dev.src", sources[:20]), ("dev.tgt", targets[:20])):
        files[name] = root / name
        files[name].write_text("\n".join(lines) + "\n", encoding="utf-8")
    return run, ["--train-src", str(files["train.src"]), "--train-tgt", str(files["train.tgt"]),
                 "--dev-src", str(files["dev.src"]), "--dev-tgt", str(files["dev.tgt"])]


def weights_of(run: RunDir, path) -> list:
    model = kt.Transformer(run.load_recipe().architecture)
    model.load_weights(path)
    return [variable.numpy() for variable in model.trainable_weights]


# A checkpoint a step (the first shows where a run started from), none averaged (no test here
# reads an average of a plain run).
EVERY_STEP = ["--checkpoint-every-steps", "1", "--set", "average_last=1"]


@pytest.fixture(scope="module")
def tuned(imported, tmp_path_factory):
    """A fine-tuning run of 4 steps from the imported model (`EVERY_STEP`), with the
    fine-tuning schedule: the run the first test reads and the uninterrupted run a continued
    one must equal."""
    source, data = imported
    root = tmp_path_factory.mktemp("tuned") / "run"
    assert train.main([*data, *OPTIONS, *EVERY_STEP, "--init-from", str(source.root),
                       "--steps", "4", "--output-dir", str(root)]) == 0
    return RunDir(root)


LORA = ["--lora-rank", "2", "--lora-alpha", "4"]
# A learning rate large enough that the adapters of two checkpoints differ visibly.
LORA_RATE = ["--set", "warmup_steps=1", "--set", "learning_rate_scale=0.05"]


@pytest.fixture(scope="module")
def lora(imported, tmp_path_factory):
    """A LoRA run of 3 steps from the imported model (`LORA`, `LORA_RATE`), a checkpoint a step
    and the last two averaged, and what it wrote on stderr: the run the LoRA test reads and
    the uninterrupted run a restarted one must equal."""
    source, data = imported
    root = tmp_path_factory.mktemp("lora") / "run"
    stderr = io.StringIO()
    with contextlib.redirect_stderr(stderr):
        status = train.main([*data, *OPTIONS, "--init-from", str(source.root), *LORA,
                             *LORA_RATE, "--checkpoint-every-steps", "1",
                             "--set", "average_last=2", "--steps", "3",
                             "--output-dir", str(root)])
    sys.stderr.write(stderr.getvalue())  # still in the captured output of a failing test
    assert status == 0
    return RunDir(root), stderr.getvalue()


def lora_checkpoint(run: RunDir, path) -> kt.Transformer:
    """The LoRA model (rank 2, alpha 4) of `run` holding the checkpoint `path`."""
    model = kt.Transformer(run.load_recipe().architecture, lora_rank=2, lora_alpha=4.0)
    model.load_weights(path)
    return model


def frozen_weights(model: kt.Transformer) -> list:
    """A LoRA model's weights but its adapters: a plain model's."""
    adapters = {id(adapter) for adapter in model.lora_adapters()}
    return [weight.numpy() for weight in model.weights if id(weight) not in adapters]


def files_of(root) -> dict:
    """Every file under `root` with its size and modification time."""
    return {path: (path.stat().st_size, path.stat().st_mtime_ns)
            for path in sorted(root.rglob("*")) if path.is_file()}


@pytest.mark.slow
def test_fine_tuning_keeps_the_model_and_tokenizer_and_starts_from_its_weights(imported, tuned):
    source, _ = imported
    assert tuned.load_recipe().architecture == source.load_recipe().architecture
    assert sorted(path.name for path in tuned.vocab.iterdir()) == sorted(
        path.name for path in source.vocab.iterdir())
    assert (tuned.vocab / "vocabulary.json").read_bytes() == (
        source.vocab / "vocabulary.json").read_bytes()
    # The fine-tuning schedule: warmup to FINE_TUNING_PEAK_RATE.
    training = tuned.load_recipe().training
    d_model = source.load_recipe().architecture.d_model
    schedule = TransformerSchedule(d_model, training.warmup_steps, training.learning_rate_scale)
    assert training.warmup_steps == FINE_TUNING_WARMUP_STEPS
    peak = max(float(schedule(step)) for step in range(2 * FINE_TUNING_WARMUP_STEPS))
    assert peak == pytest.approx(FINE_TUNING_PEAK_RATE, rel=1e-3)
    # Started from the source's weights: Adam moves each weight by at most the step's learning
    # rate, and the warmup's first is too small to move one by 1e-6, so the first step's
    # checkpoint holds the source's weights to that (a model started elsewhere differs by far
    # more); the later steps moved them.
    assert float(schedule(0)) < 1e-6
    source_weights = weights_of(source, source.final_weights)
    for weights, original in zip(weights_of(tuned, checkpoint_path(tuned.checkpoints, 1)),
                                 source_weights, strict=True):
        np.testing.assert_allclose(weights, original, atol=1e-6)
    changed = [not np.allclose(weights, original) for weights, original in zip(
        final_weights(tuned.root), source_weights)]
    assert any(changed)
    # The prepared pairs are the pair tokenizer's ids (source and target models each).
    manifest = json.loads((tuned.root / "prepared" / "manifest.json").read_text())
    assert manifest["vocabulary"]["size"] == source.load_recipe().architecture.vocab_size


@pytest.mark.parametrize("extra, named", [
    (["--set", "d_model=64"], "d_model"), (["--preset", "small"], "--preset"),
    (["--set", "num_layers=3"], "num_layers")])
def test_what_would_change_the_model_is_refused_and_nothing_written(imported, tmp_path, capsys,
                                                                    extra, named):
    source, data = imported
    with pytest.raises(SystemExit):
        train.main([*data, *OPTIONS, "--init-from", str(source.root), "--steps", "2", *extra,
                    "--output-dir", str(tmp_path / "run")])
    assert named in capsys.readouterr().err
    assert not (tmp_path / "run").exists()


@pytest.mark.slow
def test_a_fine_tuning_run_continued_equals_an_uninterrupted_one(imported, tuned, tmp_path):
    """Continued to more steps, a fine-tuning run resumes from its own backup (not from the
    source's weights again): the weights of 2 + 2 steps equal 4 steps' (`tuned`)."""
    source, data = imported
    common = [*data, *OPTIONS, *EVERY_STEP, "--init-from", str(source.root)]
    assert train.main([*common, "--steps", "2", "--output-dir", str(tmp_path / "parts")]) == 0
    assert train.main([*common, "--steps", "4", "--output-dir", str(tmp_path / "parts")]) == 0
    for parts, whole in zip(final_weights(tmp_path / "parts"), final_weights(tuned.root),
                            strict=True):
        np.testing.assert_array_equal(parts, whole)


def test_an_imported_runs_model_equals_its_import(imported):
    """The run directory's weights are the imported model's."""
    source, _ = imported
    model = kt.Transformer(source.load_recipe().architecture)
    model.load_weights(source.final_weights)
    original = imported_transformer(read_marian_folder(
        source.root.parent / "marian"))
    for ours, theirs in zip(model.get_weights(), original.get_weights()):
        np.testing.assert_array_equal(ours, theirs)


@pytest.mark.slow
def test_a_lora_run_trains_the_adapters_and_writes_merged_weights(imported, lora, tmp_path):
    """The run says at start that it trains adapters, of what rank; the checkpoints keep the
    adapters (trained) and the source's weights (frozen); the final weights are the last
    checkpoint's merged model, the averaged ones the mean of the merged checkpoints; both, the
    run's choice and kt-export's SavedModel are a plain model's. The run records only the
    options that applied (no tfds languages)."""
    source, _ = imported
    run, stderr = lora
    assert "kt-train: training LoRA adapters only: rank 2, alpha 4, " in stderr
    assert {key: run.recorded_options()[key] for key in ("lora_rank", "lora_alpha")} == {
        "lora_rank": 2, "lora_alpha": 4.0}
    assert not {"source_lang", "target_lang", "tfds_splits"} & set(run.recorded_options())
    source_weights = weights_of(source, source.chosen_weights()[0])
    merged = []
    for path in list_checkpoints(run.checkpoints)[-2:]:
        model = lora_checkpoint(run, path)
        for frozen, original in zip(frozen_weights(model), source_weights, strict=True):
            np.testing.assert_array_equal(frozen, original)
        assert all(np.abs(dense.lora_kernel_b.numpy()).max() > 0
                   for dense in model.projections())
        merged.append(model.merge_lora().get_weights())
    for final, last in zip(weights_of(run, run.final_weights), merged[-1], strict=True):
        np.testing.assert_allclose(final, last, rtol=0, atol=1e-6)
    for averaged, *checkpoints in zip(weights_of(run, run.averaged_weights), *merged,
                                      strict=True):
        np.testing.assert_allclose(averaged, np.mean(checkpoints, axis=0), rtol=1e-6, atol=1e-6)
    # The two checkpoints' effective kernels differ, from each other and from the source's.
    assert not all(np.array_equal(*pair) for pair in zip(*merged))
    assert not all(np.array_equal(*pair) for pair in zip(merged[0], source_weights))
    loaded = kt.load_run(run.root)
    assert loaded.weights.name in (run.final_weights.name, run.averaged_weights.name)
    base = tmp_path / "exports"
    search = ["--beam-size", "1", "--max-decode-extra", "4"]
    assert export.main([str(run.root), str(run.vocab), "--name", "lora", "--base-dir",
                        str(base), *search]) == 0
    sentences = [line.encode() for line in training_sentences(120, seed=3)[0][:3]]
    settings = kt.SearchSettings.of(loaded.recipe.search, beam_size=1, max_decode_extra=4)
    assert load_export(base / "lora").best(sentences) == LineTranslator.from_translator(
        loaded.translator(settings)).best(sentences)


@pytest.mark.slow
def test_a_lora_run_restarted_resumes_its_adapters_exactly(imported, lora, tmp_path, capsys):
    """2 + 1 steps equal 3 steps (`lora`; the adapters and their optimizer state restored from
    the run's backup, not built afresh); a restart with another rank is refused by name and
    writes nothing."""
    source, data = imported
    # Trained as `lora` is, but for its checkpoint a step and their average, which the weights
    # trained do not depend on.
    common = [*data, *OPTIONS, "--init-from", str(source.root), *LORA_RATE,
              "--set", "average_last=1"]
    assert train.main([*common, *LORA, "--steps", "2", "--output-dir",
                       str(tmp_path / "parts")]) == 0
    before = files_of(tmp_path / "parts")
    capsys.readouterr()
    assert train.main([*common, "--lora-rank", "3", "--lora-alpha", "4", "--steps", "3",
                       "--output-dir", str(tmp_path / "parts")]) == 2
    assert "lora_rank: 2 -> 3" in capsys.readouterr().err
    assert files_of(tmp_path / "parts") == before
    assert train.main([*common, *LORA, "--steps", "3", "--output-dir",
                       str(tmp_path / "parts")]) == 0
    for parts, whole in zip(final_weights(tmp_path / "parts"), final_weights(lora[0].root),
                            strict=True):
        np.testing.assert_array_equal(parts, whole)
    runs = [RunDir(tmp_path / "parts"), lora[0]]
    parts, whole = (lora_checkpoint(run, list_checkpoints(run.checkpoints)[-1]) for run in runs)
    for got, want in zip(parts.lora_adapters(), whole.lora_adapters(), strict=True):
        np.testing.assert_array_equal(got.numpy(), want.numpy())


@pytest.mark.parametrize("extra, message", [
    (["--lora-rank", "2"], "--lora-rank: only with --init-from"),
    (["--lora-alpha", "4"], "--lora-alpha: only with --lora-rank"),
    (["--init-from", "RUN", "--lora-rank", "0"], "--lora-rank: must be positive, got 0"),
    (["--init-from", "RUN", "--lora-rank", "2", "--lora-alpha", "-1"],
     "--lora-alpha: must be positive, got -1.0")])
def test_lora_options_are_checked_by_name_and_nothing_written(imported, tmp_path, capsys,
                                                              extra, message):
    source, data = imported
    extra = [str(source.root) if word == "RUN" else word for word in extra]
    with pytest.raises(SystemExit):
        train.main([*data, *OPTIONS, "--steps", "2", *extra,
                    "--output-dir", str(tmp_path / "run")])
    assert message in capsys.readouterr().err
    assert not (tmp_path / "run").exists()


def test_init_from_names_what_it_was_given_and_writes_nothing(imported, tmp_path, capsys):
    """`--init-from` a path that does not exist, a Marian folder not yet imported (pointed to
    kt-import), or a run whose language tokens are required (its languages named): each
    refused by name before anything is written; so is `--pair`, with a hint that fits."""
    source, data = imported
    marian = source.root.parent / "marian"
    several = tmp_path / "several"  # a run of several pairs, as far as the check reads it
    (several / "vocab").mkdir(parents=True)
    (several / "config.json").write_bytes((source.root / "config.json").read_bytes())
    (several / "languages.json").write_text(json.dumps(RunLanguages.trained(
        "source", {"de": 5, "fr": 6}, 1.0, []).to_dict()), encoding="utf-8")
    for init_from, message in [
            (tmp_path / "nothere", f"--init-from: {str(tmp_path / 'nothere')!r} does not exist"),
            (marian, f"it holds a released model: import it first (kt-import {marian} "),
            (several, "translates into several languages (de, fr)")]:
        with pytest.raises(SystemExit):
            train.main([*data, *OPTIONS, "--init-from", str(init_from), "--steps", "2",
                        "--output-dir", str(tmp_path / "run")])
        assert message in capsys.readouterr().err
        assert not (tmp_path / "run").exists()
    with pytest.raises(SystemExit):
        train.main([*OPTIONS, "--init-from", str(source.root), "--pair", "en-de", *data[1:4:2],
                    "--dev-pair", "en-de", *data[5::2], "--output-dir", str(tmp_path / "run")])
    assert ("--pair: with --init-from only of a model of many languages that reads both (an "
            "imported NLLB-200 or M2M-100 model); fine-tune another on one pair's "
            "--train-src/--train-tgt") in capsys.readouterr().err
