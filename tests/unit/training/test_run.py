"""A run from Python alone (`keras_transformer.training.run.Training`): trained in stages,
resumed exactly from its backup, averaged, tested and exported (the export translates as the
test pass did), with no command line. That a resumed run's weights are an uninterrupted
run's: test_fine_tuning.py and test_reliability.py, through the same stages."""
import dataclasses
from pathlib import Path

import pytest
import tensorflow as tf

import keras_transformer as kt
from keras_transformer.data import write_demo_corpus
from keras_transformer.training.run import Training
from keras_transformer.training.settings import RunOptions, TrainingData

RECIPE = kt.Recipe.preset("tiny", vocab_size=400, d_model=32, d_ff=64, num_layers=1,
                          num_heads=2, batch_tokens=512, max_length=48, average_last=2)
OPTIONS = RunOptions(steps=2, precision="float32", kernels="fast", eval_every=2, backup_every=2,
                     checkpoint_every_steps=2, eval_sentences=4, attention_sentences=0,
                     progress_seconds=0, export=False)


def few_lines(pair: tuple[str, str], directory: Path, lines: int) -> tuple[str, str]:
    """The first `lines` lines of each file of `pair`, written into `directory`."""
    directory.mkdir(exist_ok=True)
    copies = []
    for path in pair:
        copy = directory / Path(path).name
        copy.write_text("".join(Path(path).read_text(encoding="utf-8").splitlines(
            keepends=True)[:lines]), encoding="utf-8")
        copies.append(str(copy))
    return copies[0], copies[1]


@pytest.mark.slow
def test_a_run_trains_resumes_and_exports_from_python(tmp_path, capsys):
    corpus = write_demo_corpus(tmp_path / "data")
    data = TrainingData.files(train=corpus["train"],
                              dev=few_lines(corpus["dev"], tmp_path / "dev", 8),
                              test=few_lines(corpus["test"], tmp_path / "test", 6))
    stopped = Training(RECIPE, data, OPTIONS, tmp_path / "run")
    assert stopped.fit() == 2  # a stage on its own: trained, nothing averaged or tested
    assert not (tmp_path / "run" / "result.json").exists()

    resumed = Training(RECIPE, data, dataclasses.replace(
        OPTIONS, steps=4, export=True, export_name="api", export_dir=str(tmp_path / "exports")),
        tmp_path / "run")
    summary = resumed.run()
    assert resumed.restored.step == 2 and resumed.restored.exact
    assert summary["steps"] == 4 and set(summary["dev_bleu"]) == {"final", "averaged"}
    hypotheses = Path(summary["test"]["hypotheses"]).read_text(encoding="utf-8").splitlines()
    assert len(hypotheses) == 6

    sources = Path(data.test_src).read_text(encoding="utf-8").splitlines()
    serving = tf.saved_model.load(summary["export"]).signatures["serving_default"]
    exported = serving(text=tf.constant(sources))["translation"].numpy().tolist()
    assert kt.load_run(tmp_path / "run").weights == Path(summary["weights"])
    assert [text.decode("utf-8") for text in exported] == hypotheses  # the run's result
    assert "kt-train: resuming" in capsys.readouterr().err
