"""Helpers the tests share (not a test module): running scripts and command lines, reading
their output, small models, runs and batches."""
from __future__ import annotations

import json
import os
import random
import subprocess
import sys
from pathlib import Path

import numpy as np
import tensorflow as tf

import keras_transformer as kt
from keras_transformer.data import SubwordTokenizer
from trainers import translate_corpus

ROOT = Path(__file__).resolve().parents[1]


def run_script_json(script: str, warm: dict[str, str], timeout: int = 300) -> dict:
    """Runs `script` in a process of its own (its own TensorFlow devices), started warm by the
    `warm` fixture's server (`warm_commands`), from the project root, in this process's
    environment; the JSON object its last output line holds."""
    from warm_commands import SCRIPT_COMMAND, start_warm

    process = start_warm(warm, SCRIPT_COMMAND, ["-c", script], stdout=subprocess.PIPE,
                         stderr=subprocess.PIPE, text=True, env=dict(os.environ))
    try:
        stdout, stderr = process.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        process.kill()
        raise
    assert process.returncode == 0, stderr[-3000:]
    return json.loads(stdout.strip().splitlines()[-1])


def text_lines(path: Path) -> list[str]:
    """The lines of a text file as the commands write and read them, split at newlines only
    (str.splitlines also splits at U+001C-U+001E, U+0085, U+2028 and others, and read_text's
    universal newlines at a carriage return, which a random or untrained model's translations
    hold)."""
    return path.read_bytes().decode("utf-8").split("\n")[:-1]


# A Python with exactly tensorflow 2.20 and tensorflow-text 2.20, TF Serving 2.20's runtime
# (.ci/run points it at its oldest-versions venv); None: not given.
STOCK_PYTHON = os.environ.get("KT_STOCK_RUNTIME_PYTHON")


def run_stock(python: str, script: str, *arguments: str, cwd, timeout: float = 900) -> dict:
    """Runs `script` in `python` without this checkout on its path (killed after `timeout`
    seconds); its last line as JSON."""
    env = {key: value for key, value in os.environ.items() if key != "PYTHONPATH"}
    env["TF_CPP_MIN_LOG_LEVEL"] = "3"
    run = subprocess.run([python, "-c", script, *arguments], cwd=cwd, env=env,
                         capture_output=True, text=True, timeout=timeout)
    assert run.returncode == 0, run.stderr[-3000:]
    return json.loads(run.stdout.strip().splitlines()[-1])


def final_json(output: str) -> dict:
    """The JSON summary a command line prints last (TensorFlow may still log after it)."""
    output = "\n" + output  # the summary may be the only output
    summary, _ = json.JSONDecoder().raw_decode(output[output.rindex("\n{\n") + 1:])
    return summary


def final_weights(run_dir: Path) -> list:
    """The trainable weights (numpy arrays) a finished kt-train run saved in `run_dir`."""
    from keras_transformer.training.run_dir import RunDir

    model = kt.Transformer(RunDir(run_dir).load_recipe().architecture)
    model.load_weights(run_dir / "model.weights.h5")
    return [variable.numpy() for variable in model.trainable_weights]


def random_run(vocab: Path, root: Path, **overrides):
    """A run directory (`RunDir`) of a random one-layer `tiny` model on `vocab`, its weights
    spread out so that its translations and samples vary."""
    import shutil

    from keras_transformer.training.checkpoints import save_weights_atomic
    from keras_transformer.training.run_dir import RunDir

    recipe = kt.Recipe.preset("tiny", vocab_size=SubwordTokenizer.load(vocab).vocab_size,
                              **{"num_layers": 1, "max_length": 24, "beam_size": 1,
                                 **overrides})
    run_dir = RunDir(root)
    run_dir.write_json("config.json", recipe.to_dict())
    shutil.copytree(vocab, run_dir.vocab)
    # The same model whatever ran before in the process: Keras draws an unseeded initializer's
    # seed from Python's `random`, seeded here for the build and restored after.
    state = random.getstate()
    random.seed(0)
    try:
        model = kt.Transformer(recipe.architecture)
    finally:
        random.setstate(state)
    rng = np.random.default_rng(0)
    model.set_weights([weight + rng.normal(size=weight.shape).astype("float32") * 0.3
                       for weight in model.get_weights()])
    save_weights_atomic(model, run_dir.final_weights)
    return run_dir


def random_two_language_run(root: Path):
    """A `random_run` of two target languages, de and fr, their tokens first in the source
    (the "source" placement), on a 400-piece vocabulary learned from the demo train split
    under `root`; and that split's `(sources, targets)`."""
    from keras_transformer.data import read_parallel, write_demo_corpus
    from keras_transformer.data.languages import (LanguagePair, RunLanguages, language_token_ids,
                                                  reserved_tokens)
    from keras_transformer.training.run_dir import LANGUAGES_FILE

    texts = read_parallel(*write_demo_corpus(root / "demo")["train"])
    vocabulary = root / "vocabulary"
    SubwordTokenizer.train(texts[0] + texts[1], 400, vocabulary, reserved=reserved_tokens(
        [LanguagePair.parse(name) for name in ("en-de", "en-fr")]))
    run = random_run(vocabulary, root / "run")
    token_ids = language_token_ids(SubwordTokenizer.load(vocabulary), ["de", "fr"],
                                   "the vocabulary")
    run.write_json(LANGUAGES_FILE, RunLanguages.trained("source", token_ids, 1.0, []).to_dict())
    return run, texts


def train_vocab(pairs: tuple[list[str], list[str]], size: int, directory: Path) -> Path:
    """Learns a shared vocabulary of `size` pieces from both sides of `pairs` into `directory`."""
    sources, targets = pairs
    SubwordTokenizer.train(sources + targets, size, directory)
    return directory


# --- small models and batches

VARIANTS = {
    "paper": {},
    "pre_norm_learned_untied_uneven": {"norm": "pre", "positional": "learned",
                                       "share_embeddings": False, "tie_output": False,
                                       "target_vocab_size": 70, "num_encoder_layers": 3,
                                       "num_decoder_layers": 1},
    # The options of models trained elsewhere (e.g. Marian's), all on.
    "swish_halves_embedding_norm_output_bias": {
        "activation": "swish", "sinusoid_layout": "halves", "embedding_norm": True,
        "output_bias": True, "attention_bias": True},
}


def tiny_model(**overrides) -> kt.Transformer:
    """A tiny model without dropout of a 60-id vocabulary; an output bias, if any, drawn from a
    generator of its own (zeros when built: a bias that changes the logits)."""
    config = kt.TransformerConfig.preset("tiny", vocab_size=60, dropout=0.0, **overrides)
    model = kt.Transformer(config)
    if model.output_bias is not None:
        bias = np.random.default_rng(0).normal(size=model.output_bias.shape)
        model.output_bias.assign(bias.astype("float32"))
    return model


def random_ids(rng: np.random.Generator, shape, low=4, high=60) -> np.ndarray:
    """int32 ids of `shape` in `[low, high)`, drawn from the test's own `rng` (conftest.py)."""
    return rng.integers(low, high, size=shape).astype("int32")


def assert_equal_to_rounding(actual, expected, precision: str, scale: float | None = None) -> None:
    """Equal up to float32 rounding (of sums taken in another order: a gradient summed over
    positions may differ by 1e-4 of an element, 1e-5 of the array's scale), or 16-bit rounding
    compounded over a tiny model's layers (2% of the array's scale, and at least 5e-4: an array
    whose terms nearly cancel holds their 16-bit rounding alone, bfloat16's step being 4e-4 at
    0.1). `scale`, when given, is that of the terms summed into an array that is zero in exact
    arithmetic (its own values being rounding alone)."""
    scale = float(np.abs(expected).max()) if scale is None else scale
    if precision == "float32":
        np.testing.assert_allclose(actual, expected, rtol=1e-4, atol=1e-5 * max(1.0, scale))
    else:
        np.testing.assert_allclose(actual, expected, rtol=0, atol=max(0.02 * scale, 5e-4))


PAIRS = [([5, 6, 7], [9, 8]), ([7, 6], [10, 11, 12]), ([8, 9, 10, 11], [11, 10, 9, 8]),
         ([12, 5], [5]), ([13, 14, 15], [6, 7, 13, 14]), ([4, 4, 9], [15, 12])]


def padded(rows, width):
    out = np.zeros((len(rows), width), "int32")
    for i, row in enumerate(rows):
        out[i, :len(row)] = row
    return out


def pairs_batch() -> tuple[tuple[np.ndarray, np.ndarray], np.ndarray]:
    """`PAIRS` as one batch, `((source, target_in), target_out)`, each padded to 6 ids."""
    source = padded([s + [kt.EOS_ID] for s, _ in PAIRS], 6)
    target_in = padded([[kt.BOS_ID] + t for _, t in PAIRS], 6)
    target_out = padded([t + [kt.EOS_ID] for _, t in PAIRS], 6)
    return (source, target_in), target_out


def fit_one_batch(model: kt.Transformer, batch, epochs: int) -> dict[str, list[float]]:
    """`model.fit` over `epochs` epochs of one step on `batch` each, from one iterator of it
    repeated (`fit` of arrays makes a new one each epoch, which costs about as much as a tiny
    model's step); the history."""
    dataset = tf.data.Dataset.from_tensors(batch).repeat()
    return model.fit(dataset, epochs=epochs, steps_per_epoch=1, shuffle=False, verbose=0).history


# --- whole kt-train runs

def cut(path: str | os.PathLike, lines: int, *more: str) -> None:
    """Leaves the file at `path` its first `lines` lines, then the lines `more`."""
    kept = Path(path).read_text(encoding="utf-8").splitlines()[:lines]
    Path(path).write_text("\n".join(kept + list(more)) + "\n", encoding="utf-8")


def demo_corpus(directory: Path, train_lines: int | None = None) -> dict[str, tuple[str, str]]:
    """The demo corpus's files in `directory` (`write_demo_corpus`), its dev set cut to its
    first 16 lines (the dev BLEU of every dev line that a finished run computes, of its final
    weights and of their average, is no check of the runs that use it; `--eval-sentences` 8
    are left) and, with `train_lines`, its train set to its first so many (each start learns
    its vocabulary and tokenizes the set)."""
    from keras_transformer.data import write_demo_corpus

    paths = write_demo_corpus(directory)
    for split, lines in (("train", train_lines), ("dev", 16)):
        for path in paths[split] if lines else ():
            cut(path, lines)
    return paths


MICRO = ["--set", "vocab_size=400", "--set", "d_model=32", "--set", "d_ff=64",
         "--set", "num_layers=1", "--set", "batch_tokens=512", "--set", "max_length=48",
         "--eval-sentences", "8", "--attention-sentences", "0", "--no-export",
         "--precision", "float32", "--kernels", "fast", "--progress-seconds", "0"]


def run_args(data: dict, run_dir: Path, *extra: str) -> list[str]:
    return MICRO + ["--train-src", data["train"][0], "--train-tgt", data["train"][1],
                    "--dev-src", data["dev"][0], "--dev-tgt", data["dev"][1],
                    "--output-dir", str(run_dir), *extra]


def start_training(argv: list[str], log: Path) -> subprocess.Popen:
    """kt-train in a subprocess, its output appended to `log`, with the quiet start a user
    gets (TensorFlow's log level left as a user's shell leaves it)."""
    env = {key: value for key, value in os.environ.items() if key != "TF_CPP_MIN_LOG_LEVEL"}
    with open(log, "ab") as output:
        return subprocess.Popen([sys.executable, "-m", "trainers", "train", *argv], cwd=ROOT,
                                stdout=output, stderr=subprocess.STDOUT, env=env)


class FakeClock:
    """A clock the test moves."""

    def __init__(self):
        self.now = 0.0

    def __call__(self):
        return self.now


# --- one model, several target languages: a made-up three-language corpus

WORDS = "cat dog sun tree red blue big small".split()
# Three made-up target languages of the same English-like sources, word for word: each
# word's letters reversed, upper-cased, or followed by its first letter.
TARGETS = {"rv": lambda word: word[::-1], "up": str.upper, "dd": lambda word: word + word[0]}
LANGUAGE_PAIRS = [f"en-{target}" for target in TARGETS]


def write_corpus(directory: Path, split: str, lines: int, seed: int) -> dict[str, Path]:
    """`split`.en and its three translations in `directory`, `lines` lines; the paths by
    language."""
    rng = random.Random(seed)
    sources = [[rng.choice(WORDS) for _ in range(rng.randint(2, 5))] for _ in range(lines)]
    texts = {"en": [" ".join(words) for words in sources],
             **{language: [" ".join(map(translate, words)) for words in sources]
                for language, translate in TARGETS.items()}}
    paths = {}
    for language, lines_of in texts.items():
        paths[language] = directory / f"{split}.{language}"
        paths[language].write_text("\n".join(lines_of) + "\n", encoding="utf-8")
    return paths


def three_language_corpus(directory: Path) -> dict[str, dict[str, Path]]:
    """The corpus written in `directory`, split -> language -> file: train 3,000 lines, dev
    and test 40."""
    return {split: write_corpus(directory, split, lines, seed)
            for split, lines, seed in (("train", 3000, 0), ("dev", 40, 1), ("test", 40, 2))}


def pair_args(corpus: dict[str, dict[str, Path]], *splits: str) -> list[str]:
    """`--pair`, `--dev-pair`, ... options of the three pairs for `splits`."""
    flags = {"train": "--pair", "dev": "--dev-pair", "test": "--test-pair"}
    return [word for split in splits for name in LANGUAGE_PAIRS
            for word in (flags[split], name, str(corpus[split]["en"]),
                         str(corpus[split][name.split("-")[1]]))]


# kt-train options that learn the three languages (the steps and learning-rate scale: each
# test's, e.g. test_multilingual_serving.LEARNED_IN).
LEARNS = ["--set", "vocab_size=380", "--set", "d_model=64", "--set", "d_ff=128",
          "--set", "num_layers=2", "--set", "batch_tokens=1024", "--set", "max_length=24",
          "--set", "warmup_steps=100", "--set", "learning_rate_scale=0.25", "--set", "dropout=0",
          "--set", "label_smoothing=0", "--eval-sentences", "20", "--attention-sentences", "0",
          "--precision", "float32", "--kernels", "fast", "--progress-seconds", "600",
          "--test-beam-size", "1"]


def kt_translate_corpus(capsys, *arguments: str) -> tuple[int, str]:
    """kt-translate-corpus run in this process: its exit status and what it wrote to stderr."""
    capsys.readouterr()
    try:
        code = translate_corpus.main(list(arguments))
    except SystemExit as stop:  # argparse's refusals
        code = stop.code
    return code, capsys.readouterr().err
