"""A kt-train run directory loaded in Python: its model holding the weights the run chose, its
tokenizer and its recipe (`load_run`, exported as `kt.load_run`).

    run = kt.load_run("runs/demo")
    run.translator().translate(tf.constant(["A man is riding a bike."]))["translation"]
    # a run of several language pairs: one target language per sentence
    kt.load_run("runs/multi").translator().translate(tf.constant(["Hello"]), tf.constant(["de"]))
"""
from __future__ import annotations

import dataclasses
import os
from pathlib import Path
from typing import TYPE_CHECKING, Any, Optional

from keras_transformer.config import Recipe, SearchSettings
from keras_transformer.decoding.alignment import read_alignment_heads
from keras_transformer.model import Transformer
from keras_transformer.training.checkpoints import load_weights_file
from keras_transformer.training.run_dir import RunDir

if TYPE_CHECKING:
    from keras_transformer.data.languages import RunLanguages
    from keras_transformer.data.sentencepiece_pair import SentencePiecePair
    from keras_transformer.data.tokenizer import SubwordTokenizer
    from keras_transformer.decoding.translator import TranslationModule


@dataclasses.dataclass(frozen=True)
class LoadedRun:
    """A run directory's model, tokenizer and settings (`load_run`).

    `model` is a `Transformer` of the recipe's architecture holding `weights`, the weights file;
    `weights_reason` says why those weights (`RunDir.chosen_weights`' phrase, or "given").
    `tokenizer` is the run's vocabulary (`vocab/`): a `SubwordTokenizer`, or the `SentencePiecePair`
    of a model imported from elsewhere. `recipe` holds the run's settings (`config.json`):
    architecture, training and search. `results` is what the run recorded
    (`RunDir.recorded_results`: the weights it chose, their dev BLEU, the final test figures); {}
    for a run that recorded none. `run_dir` is the run directory; `languages` the target languages
    of a run of several language pairs (`RunDir.languages`), None for a run of one.
    """

    model: Transformer
    tokenizer: SubwordTokenizer | SentencePiecePair
    recipe: Recipe
    weights: Path
    weights_reason: str
    results: dict[str, Any]
    run_dir: RunDir
    languages: Optional[RunLanguages] = None

    def translator(self, settings: Optional[SearchSettings] = None,
                   **options: Any) -> TranslationModule:
        """A `TranslationModule` (strings in, translations out) of the model and tokenizer that
        searches with `settings` (default: the recipe's); `options` are its other arguments
        (e.g. `jit_compile=True`, `shortlist=`; `alignment` defaults to the run's
        `alignment.json`). Of a run of several language pairs, its calls take
        `target_language` too (`TranslationModule`)."""
        from keras_transformer.decoding.translator import TranslationModule  # see `load_run`

        options.setdefault("alignment", read_alignment_heads(self.run_dir.root,
                                                             self.model.config))
        return TranslationModule(self.model, self.tokenizer,
                          self.recipe.search if settings is None else settings,
                          languages=self.languages, **options)


def load_run(path: str | os.PathLike, weights: str | os.PathLike | None = None) -> LoadedRun:
    """Loads the run directory `path` (written by kt-train, or imported) as a `LoadedRun`.

    The model is a `Transformer` holding `weights` (a `.weights.h5` file of this run's model), by
    default the weights kt-train chose and evaluation and export use (`RunDir.default_weights`: as
    `result.json` records, the better on dev of the averaged and the final weights; else the
    averaged, else the final weights, else the newest checkpoint). It runs under the
    implementation in force (`keras_transformer.fast.set_implementation`); the weights are the
    same under either.

    A FileNotFoundError when `path` is not a run directory (no directory, no `config.json`, no
    vocabulary or no weights), or `weights` does not exist; a ValueError when a file cannot be read
    as this run's (a bad `config.json`, a vocabulary of another size than the model's, weights of
    another model).
    """
    # Imported here: `import keras_transformer`, which exports `load_run`, then loads neither
    # the data package (tensorflow-datasets) nor tensorflow-text (about a second).
    from keras_transformer.data.sentencepiece_pair import load_tokenizer

    run = _existing_run(path)
    recipe = run.load_recipe()
    tokenizer = load_tokenizer(run.vocab)
    if tokenizer.vocab_size != recipe.architecture.vocab_size:
        raise ValueError(f"run directory {os.fspath(path)!r}: its vocabulary has "
                         f"{tokenizer.vocab_size} ids, its config.json vocab_size="
                         f"{recipe.architecture.vocab_size}")
    model, chosen, reason = chosen_model(path, weights)
    return LoadedRun(model=model, tokenizer=tokenizer, recipe=recipe, weights=chosen,
                     weights_reason=reason, results=run.recorded_results(), run_dir=run,
                     languages=run.languages())


def chosen_model(path: str | os.PathLike, weights: str | os.PathLike | None = None
                 ) -> tuple[Transformer, Path, str]:
    """`load_run`'s model alone (a run directory without a vocabulary loads too), the
    weights file it holds and why those (as `LoadedRun.weights_reason`)."""
    run = _existing_run(path)
    if weights is None:
        chosen, reason = run.chosen_weights()
    else:
        chosen, reason = Path(weights), "given"
    model = Transformer(run.load_recipe().architecture)
    load_weights_file(model, chosen)
    return model, chosen, reason


def _existing_run(path: str | os.PathLike) -> RunDir:
    """The `RunDir` of `path`; FileNotFoundError naming it if it is no directory."""
    run = RunDir(path)
    if not run.root.is_dir():
        raise FileNotFoundError(f"run directory: no such directory {os.fspath(path)!r}")
    return run
