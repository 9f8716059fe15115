"""Progress lines: ETA against the step budget or the time limit, whichever ends first; named
evaluation figures; counted work and stages, so that no command is silent for long."""
import io
from types import SimpleNamespace

import pytest
import tensorflow as tf

from keras_transformer.data import write_demo_corpus
from keras_transformer.data.prepare import combined_source, text_file_source
from keras_transformer.metrics import MaskedTokenAccuracy
from keras_transformer.training.callbacks import Schedule, StepClock
from keras_transformer.training.progress import CountProgress, ProgressLines, duration, stage
from trainers import prepare
from keras_transformer.training.inputs import counted_source
from helpers import FakeClock


def started_progress(max_steps, max_minutes):
    """A started `ProgressLines` (every 30 s) on a fake clock, token count and step counter."""
    clock, stream = FakeClock(), io.StringIO()
    tokens = MaskedTokenAccuracy()
    steps = StepClock()
    progress = ProgressLines(max_steps, max_minutes, tokens, Schedule(steps, 1000),
                             every_seconds=30, stream=stream, clock=clock)
    progress.set_model(SimpleNamespace(distribute_strategy=tf.distribute.get_strategy(),
                                       stop_training=False))
    progress.on_train_begin()
    return progress, clock, stream, tokens, steps


@pytest.mark.parametrize("max_steps, max_minutes, expected_eta", [
    (1000, None, "ETA 15m00s"),      # 100 steps in 100 s: 900 steps left
    (None, 10.0, "ETA 8m20s"),       # 600 s allowed, 100 s gone
    (1000, 5.0, "ETA 3m20s"),        # the time limit comes first
    (None, None, None),              # unbounded: no ETA
])
def test_eta_follows_the_budget_that_ends_first(max_steps, max_minutes, expected_eta):
    progress, clock, stream, tokens, steps = started_progress(max_steps, max_minutes)
    steps.on_epoch_begin(0)
    progress.on_epoch_begin(0)
    for step in range(1, 101):
        clock.now = float(step)
        steps.on_train_batch_end(step - 1)
        tokens.count.assign_add(50.0)
        progress.on_train_batch_end(step - 1, {"loss": 2.5})
    lines = stream.getvalue().splitlines()
    assert len(lines) == 3  # at 30, 60 and 90 s
    assert "50 target tok/s" in lines[-1] and "elapsed 1m30s" in lines[-1]
    progress.on_train_end({"loss": 2.5})
    last = stream.getvalue().splitlines()[-1]
    assert last.startswith("kt-train: step 100")
    assert (expected_eta in last) if expected_eta else "ETA" not in last


def test_lines_span_epochs_shorter_than_their_interval():
    """Keras restarts the token count every epoch (a backup interval, often shorter than the
    line interval) and evaluations pause training between epochs: lines still come every 30 s
    of training, with the rate over the tokens of every epoch since the last line."""
    progress, clock, stream, tokens, steps = started_progress(None, None)
    for epoch in range(10):  # 10 steps of 1 s each, then a 100 s evaluation
        tokens.count.assign(0.0)
        steps.on_epoch_begin(epoch)
        progress.on_epoch_begin(epoch)
        for batch in range(10):
            clock.now += 1.0
            steps.on_train_batch_end(batch)
            tokens.count.assign_add(50.0)
            progress.on_train_batch_end(batch, {"loss": 2.5})
        progress.on_epoch_end(epoch)
        clock.now += 100.0
    lines = stream.getvalue().splitlines()
    assert [line.split(",")[0] for line in lines] == [
        "kt-train: step 30", "kt-train: step 60", "kt-train: step 90"]
    assert all("50 target tok/s" in line for line in lines)


def test_duration_reads_like_a_clock():
    assert [duration(s) for s in (5, 250, 3720)] == ["5s", "4m10s", "1h02m"]


def test_evaluation_lines_name_their_figures():
    """The dev BLEU of an evaluation is printed under the name that says how it was measured,
    not as the `dev_bleu` key of the logs."""
    clock, stream = FakeClock(), io.StringIO()
    steps = StepClock()
    progress = ProgressLines(None, None, MaskedTokenAccuracy(), Schedule(steps, 1), stream=stream,
                             clock=clock, names={"dev_bleu": "dev greedy BLEU (200 sentences)"})
    progress.set_model(SimpleNamespace(distribute_strategy=tf.distribute.get_strategy(),
                                       stop_training=False))
    progress.on_train_begin()
    steps.on_epoch_begin(0)
    progress.on_epoch_begin(0)
    steps.on_train_batch_end(0)
    progress.on_train_batch_end(0, {"loss": 2.5})
    progress.on_epoch_end(0, {"loss": 2.5, "dev_bleu": 2.411})
    assert stream.getvalue() == ("kt-train: step 1: loss 2.5, dev greedy BLEU (200 sentences) "
                                 "2.411\n")


def test_count_progress_reports_every_interval_and_at_the_end():
    clock, stream = FakeClock(), io.StringIO()
    progress = CountProgress("kt-evaluate", 1000, every_seconds=10, stream=stream, clock=clock,
                             doing="translating")
    for _ in range(10):  # 100 sentences every 4 s
        clock.now += 4.0
        progress.advance(100)
    assert stream.getvalue().splitlines() == [
        "kt-evaluate: translating: 300/1,000 sentences, 25.0 sentences/s, ETA 28s",
        "kt-evaluate: translating: 600/1,000 sentences, 25.0 sentences/s, ETA 16s",
        "kt-evaluate: translating: 900/1,000 sentences, 25.0 sentences/s, ETA 4s",
        "kt-evaluate: translating: 1,000/1,000 sentences, 25.0 sentences/s"]
    quiet = CountProgress("kt-translate", 10, quiet=True, stream=stream, clock=clock)
    quiet.advance(10)
    assert len(stream.getvalue().splitlines()) == 4


def test_count_progress_without_a_total_counts_alone():
    clock, stream = FakeClock(), io.StringIO()
    progress = CountProgress("kt-prepare", None, "pairs", every_seconds=1, stream=stream,
                             clock=clock)
    clock.now = 2.0
    progress.advance(5000)
    assert stream.getvalue() == "kt-prepare: 5,000 pairs, 2,500.0 pairs/s\n"


def test_a_stage_prints_its_start_and_end():
    clock, stream = FakeClock(), io.StringIO()
    with stage("kt-train", "exporting demo-staging", stream=stream, clock=clock):
        clock.now = 75.0
    assert stream.getvalue().splitlines() == ["kt-train: exporting demo-staging ...",
                                              "kt-train: exporting demo-staging: done in 1m15s"]
    with pytest.raises(ValueError):
        with stage("kt-train", "averaging", stream=stream, clock=clock):
            raise ValueError("a full disk")
    assert stream.getvalue().splitlines()[-1] == "kt-train: averaging ..."


def test_counted_source_counts_each_pair_as_it_is_read(tmp_path):
    """kt-prepare's and kt-train's tokenizing lines: every pair read is counted once, also
    through several corpora, and counting the source (as preparing does first) sets the
    total, with the same description as the source (storage prepared from either is the
    same)."""
    files = []
    for name, lines in (("a", 3), ("b", 2)):
        for side in ("src", "tgt"):
            path = tmp_path / f"{name}.{side}"
            path.write_text("".join(f"{name} {index}\n" for index in range(lines)))
            files.append(path)
    source = combined_source([text_file_source(files[0], files[1]),
                              text_file_source(files[2], files[3])])
    progress = CountProgress("kt-prepare", None, "pairs", stream=io.StringIO())
    counted = counted_source(source, progress)
    assert counted.description == source.description
    assert counted.count() == 5 and progress.total == 5
    assert [len(list(part.pairs())) for part in counted.parts] == [3, 2]
    assert progress.done == 5
    assert list(counted.pairs()) == list(source.pairs()) and progress.done == 10


def test_prepare_command_prints_its_stages(tmp_path, capsys):
    paths = write_demo_corpus(tmp_path / "data")
    assert prepare.main(["--set", "vocab_size=300", "--train-src", paths["train"][0],
                         "--train-tgt", paths["train"][1], "--output-dir",
                         str(tmp_path / "prepared")]) == 0
    lines = capsys.readouterr().err.splitlines()
    assert lines[:2] == ["kt-prepare: learning a vocabulary of 300 pieces from up to "
                         "2,000,000 sentences ...", lines[1]]
    assert lines[1].startswith("kt-prepare: learning a vocabulary of 300 pieces from up to "
                               "2,000,000 sentences: done in ")
    assert any(line.startswith("kt-prepare: tokenizing: 15,000/15,000 pairs, ") for line in lines)
